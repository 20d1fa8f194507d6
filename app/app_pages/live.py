"""Run (live): one run's curves (reward and its terms, pass@k, entropy, zero-signal groups, throughput,
time; an asynchronous run's pipeline timeline, staleness and off-policy correction), refreshed while it
goes, with the budget and allocator in force marked on them; and the control panel (budget, learning
rate, allocator and its parameters, lifecycle) with the history of commands and their outcomes. The
fragments only read; the engine applies the commands."""

import polars as pl
import streamlit as st

from app import permissions, charts, components, data, derive, pipeline_charts
from workbench.analysis import term_names, terms_by_step
from workbench.analysis.episodes import episodes_by_step
from workbench.errors import StoreUnreachable
from workbench.analysis.pipeline import idle_fractions, pipeline_by_step, staleness_histogram, worker_lanes
from workbench.store import inflight

PAGE = "live"
LIVE_STATUSES = ("created", "running", "paused", "stopping")

st.title("Run (live)")
try:
    run_id = components.pick_run(PAGE)
except StoreUnreachable as exc:  # what the runs of this machine say is all there is to show
    components.outage_banner()
    st.error(str(exc))
    st.stop()
if not run_id:
    st.stop()

status = data.run(run_id).get("status")
try:  # ?refresh=N sets the default (0: no automatic refresh)
    default_refresh = max(0, min(300, int(st.query_params.get("refresh", 5))))
except ValueError:
    default_refresh = 5
refresh = st.sidebar.number_input("refresh every (s, 0 = off)", 0, 300, default_refresh, key=f"{PAGE}_refresh")
every = refresh if refresh and status in LIVE_STATUSES else None
LANE_STEPS = 8  # steps drawn in the per-worker lanes (the latest; a bare string here would be drawn on the page)


@st.fragment(run_every=inflight.PAGE_REFRESH_S if refresh and status in LIVE_STATUSES else None)
def in_flight(run_id: str) -> None:
    """The step generating now (workbench/store/inflight.py): rows finished of rows granted, tokens so
    far, the slowest rows with their partial text; read from the run's file, not from the store."""
    from workbench.control.liveness import is_local, pid_alive

    st.subheader("Rollouts in flight")
    info = data.run(run_id)
    if not is_local(info.get("host")):
        st.info(f"This run works on host {info.get('host')}: its rollouts in flight are written there, where "
                "this dashboard cannot read them.", icon=":material/lan:")
        return
    if info.get("status") not in LIVE_STATUSES:
        st.caption(f"The run is {info.get('status') or 'unknown'}: no step is generating.")
        return
    report = data.inflight(run_id)
    if report.problem:
        st.warning(report.problem, icon=":material/report:")
        return
    row = report.row
    if row is None:
        st.caption("No step has reported generating yet (the in-process `hf` backend writes the report; "
                   "`logging.inflight_s = 0` turns it off).")
        return
    if not pid_alive(row.get("pid")):
        st.caption(f"No step is generating: the report was left by process {row.get('pid')}, which is gone.")
        return
    if row["state"] == "idle":
        st.caption(f"No step is generating now: {inflight.summary(row)}, ended {report.age_s:.1f} s ago (the run is "
                   "scoring, training, evaluating or committing).")
        return
    c = st.columns(4)
    c[0].metric("generating", f"step {row['step']}" if row.get("step") is not None else "outside a step")
    c[1].metric("rows finished / granted", f"{row['finished']} / {row['rows']}")
    c[2].metric("tokens so far", f"{row['step_tokens']}", help="this step's generated tokens, all batches")
    c[3].metric("report age", f"{report.age_s:.1f} s")
    st.progress(min(1.0, row["finished"] / max(1, row["rows"])), text=inflight.summary(row))
    if report.age_s > 3 * float(row.get("every_s") or 0.5) + 2:
        st.caption(f"No progress reported for {report.age_s:.0f} s: the decoding loop is slow or stalled.")
    st.caption("the slowest rows (still generating first, longest first) and their text so far")
    st.dataframe(pl.DataFrame(inflight.slowest_table(row), schema={"row": pl.Int64, "tokens": pl.Int64, "done": pl.Boolean,
                                                          "text": pl.String}),
                 hide_index=True, key=f"{PAGE}_inflight_rows")


in_flight(run_id)


@st.fragment(run_every=every)
def curves(run_id: str) -> None:
    components.outage_banner(run_id)  # read without the store: shown while the run cannot reach it
    info = data.run(run_id)
    steps = data.steps((run_id,))
    passk = data.passk(run_id)
    changes = derive.regime_changes(steps)
    last = steps.sort("step").tail(1).to_dicts()[0] if not steps.is_empty() else {}
    p1 = passk.filter(pl.col("k") == 1).sort("step")

    c = st.columns([1, 0.7, 0.8, 1, 1, 1.5])
    c[0].metric("status", info.get("status") or "?")
    c[1].metric("step", last.get("step", "–"))
    c[2].metric("reward", f"{last['reward_mean']:.3f}" if last.get("reward_mean") is not None else "–")
    c[3].metric("held-out pass@1", f"{p1['pass_at_k'][-1]:.3f}" if not p1.is_empty() else "–")
    c[4].metric(f"budget ({last.get('budget_kind') or 'per step'})", last.get("budget", "–"))
    c[5].metric("allocator", last.get("allocator") or "–")

    components.alert_banner(run_id)
    attempts = data.attempts(run_id)  # steps a guard's rollback abandoned, drawn faded
    left, right = st.columns(2)
    # a click on any step curve opens the Rollouts page at that run and step (components.drill_to_step)
    drill = components.DRILL
    events = [left.plotly_chart(charts.add_attempts(charts.line_chart(
        steps, [("reward_mean", "reward mean")], "reward", y="reward", changes=changes,
        band=("reward_mean", "reward_std")), attempts, "reward_mean"), key=f"{PAGE}_reward", **drill)]
    events.append(right.plotly_chart(charts.passk_chart(passk, changes=changes), key=f"{PAGE}_passk", **drill))
    quantiles, source = data.entropy_quantiles(run_id)
    with left:
        events.append(st.plotly_chart(charts.add_attempts(charts.entropy_chart(steps, quantiles, changes=changes),
                                                          attempts, "entropy_mean"), key=f"{PAGE}_entropy", **drill))
        if source:
            st.caption(f"entropy: mean per step (engine); {source}")
    events.append(right.plotly_chart(charts.line_chart(steps, [("zero_signal_frac", "zero-signal groups")],
                                                       "zero-signal group fraction", y="fraction", changes=changes,
                                                       y_range=(-0.02, 1.02)), key=f"{PAGE}_zero", **drill))
    events.append(left.plotly_chart(charts.throughput_chart(steps, changes=changes), key=f"{PAGE}_throughput",
                                    **drill))
    events.append(right.plotly_chart(charts.stacked_time_chart(steps, changes=changes), key=f"{PAGE}_time", **drill))
    names = term_names(steps)
    if names:  # the reward's parts (`reward/<term>` step metrics), unweighted
        events.append(st.plotly_chart(charts.line_chart(terms_by_step(steps), [(f"reward/{n}", n) for n in names],
                                                        "reward terms (mean per step, unweighted)", y="value",
                                                        changes=changes), key=f"{PAGE}_terms", **drill))
    ep = episodes_by_step(steps)
    if not ep.is_empty():  # episodes: how the tools were used, and where the tokens went
        events.append(left.plotly_chart(charts.line_chart(
            ep, [("call_rate", "episodes that call a tool"), ("tool_error_rate", "tool calls that fail"),
                 ("turn_limit_rate", "episodes ended by the turn limit")], "tool use", y="fraction",
            y_range=(-0.02, 1.02)), key=f"{PAGE}_tools", **drill))
        events.append(right.plotly_chart(charts.line_chart(
            ep, [("model_tokens", "model tokens"), ("tool_tokens", "tool-result tokens (not trained on)")],
            "tokens per episode", y="tokens"), key=f"{PAGE}_episode_tokens", **drill))
        if ep["entropy_after_tool_delta"].is_not_null().any():
            events.append(st.plotly_chart(charts.line_chart(
                ep, [("entropy_after_tool_delta", "first 10 tokens after a tool result - first turn's")],
                "entropy after tool results (ARPO's observation: above 0 = it rises)", y="nats"),
                key=f"{PAGE}_entropy_after_tool", **drill))
    for event in events:
        components.drill_to_step(run_id, event)
    if not steps.is_empty():
        st.caption(f"{steps.height} steps · {int(steps['tokens_generated'].sum())} generated tokens · "
                   f"{int(steps['rollouts'].sum())} rollouts")


curves(run_id)


@st.fragment(run_every=every)
def pipeline(run_id: str) -> None:
    """The asynchronous pipeline (docs/async.md): how both sides spent each step, how stale the consumed
    rollouts were, and the off-policy correction's diagnostics. One line for a synchronous run of ours;
    nothing for an imported run or a run with no step yet."""
    steps = data.steps((run_id,))
    frame = pipeline_by_step(steps)
    if frame.is_empty():
        if not steps.is_empty() and components.source_of(run_id) is None:
            st.caption("Synchronous run: each step generated, then trained (no pipeline timeline, staleness "
                       "or off-policy correction to show; `pipeline.max_staleness` turns the pipeline on).")
        return
    st.subheader("Asynchronous pipeline")
    cfg = components.as_dict(data.run(run_id).get("config")).get("pipeline") or {}
    idle = idle_fractions(frame)
    hist = staleness_histogram(data.staleness_counts(run_id))
    last = frame.tail(1).to_dicts()[0]
    c = st.columns(4)
    c[0].metric("max staleness (config)", cfg.get("max_staleness", "–"))
    c[1].metric("staleness now (max)", "–" if last["staleness_max"] is None else int(last["staleness_max"]))
    c[2].metric("trainer idle", "–" if idle["trainer"] is None else f"{100 * idle['trainer']:.0f}%")
    c[3].metric("generator idle", "–" if idle["generator"] is None else f"{100 * idle['generator']:.0f}%")
    changes = derive.regime_changes(steps)
    left, right = st.columns(2)
    left.plotly_chart(pipeline_charts.timeline_chart(frame, changes=changes), key=f"{PAGE}_pipeline_timeline")
    right.plotly_chart(pipeline_charts.staleness_chart(hist), key=f"{PAGE}_staleness")
    # a lane per worker of what it did in the last LANE_STEPS steps; a bar opens that step's rollouts
    event = st.plotly_chart(pipeline_charts.lanes_chart(worker_lanes(steps, last=LANE_STEPS)), key=f"{PAGE}_lanes",
                            **components.DRILL)
    components.drill_to_step(run_id, event, lanes=True)
    left.plotly_chart(pipeline_charts.weight_chart(frame, cfg.get("is_cap"), changes=changes),
                      key=f"{PAGE}_is_weight")
    right.plotly_chart(pipeline_charts.clip_chart(frame, changes=changes), key=f"{PAGE}_clip")
    left.plotly_chart(pipeline_charts.kl_chart(frame, changes=changes), key=f"{PAGE}_kl_behav")
    right.caption(f"correction: {cfg.get('correction', '?')} ({cfg.get('correction_level', 'token')}), is_cap "
                  f"{cfg.get('is_cap', '?')}; the weight, truncation, ESS and KL are over the stale tokens of the "
                  "steps that updated the policy; idle shares over the steps shown.")


pipeline(run_id)


@st.fragment(run_every=every)
def workers(run_id: str) -> None:
    """Rollout workers (Ray backend): how many, rollouts/s of each, weight sync time per step, and for a
    synchronous run what each worker did in the last steps (its lane beside the trainer's)."""
    rates, sync = data.workers(run_id)
    if rates.is_empty():
        return
    st.subheader("Rollout workers")
    last_step = int(rates["step"].max())
    last = rates.filter(pl.col("step") == last_step)
    c = st.columns(3)
    c[0].metric("workers", last.height)
    c[1].metric("rollouts/s per worker (last step)",
                " · ".join(f"{w}: {r:.0f}" for w, r in zip(last["worker"], last["rollouts_per_s"])))
    last_sync = sync.filter(pl.col("step") == last_step)["weight_sync_s"].to_list()
    c[2].metric("weight sync (last step)", f"{1000 * last_sync[0]:.0f} ms" if last_sync else "–")
    left, right = st.columns(2)
    with left:
        st.caption("rollouts/s of each worker (its rollouts over its own generation time)")
        st.line_chart(rates.pivot(on="worker", index="step", values="rollouts_per_s"), x="step")
    with right:
        st.caption("weight sync per step (s): new weights put once in Ray's object store, loaded by every worker")
        st.line_chart(sync, x="step", y="weight_sync_s")
    steps = data.steps((run_id,))
    if pipeline_by_step(steps).is_empty():  # a synchronous run's lanes (the pipeline's panel draws its own)
        event = st.plotly_chart(pipeline_charts.lanes_chart(worker_lanes(steps, last=LANE_STEPS)),
                                key=f"{PAGE}_worker_lanes", **components.DRILL)
        components.drill_to_step(run_id, event, lanes=True)
        st.caption("each worker's generate, weight install, restart and idle spans, timed on the worker and "
                   "placed on the trainer's clock; the trainer's own phases in its lane")


workers(run_id)
if components.read_only_note(run_id):  # an imported run: nothing to steer
    st.info(components.read_only_note(run_id), icon=":material/lock:")
    st.stop()

st.header("Control")
from workbench.allocators import available_allocators, describe_allocator, make_config  # noqa: E402
from workbench.control import api  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402

steps_now = data.steps((run_id,))
last = steps_now.sort("step").tail(1).to_dicts()[0] if not steps_now.is_empty() else {}
components.lifecycle_buttons(PAGE, run_id, status)

budget_col, alloc_col = st.columns(2)
with budget_col:
    kind = last.get("budget_kind") or "rollouts"
    current_budget = int(last.get("budget") or 64)
    top = max(4 * current_budget, 64)
    with st.form(f"{PAGE}_budget_form"):
        amount = st.slider(f"budget per step ({kind})", 1, top, current_budget, key=f"{PAGE}_budget")
        if st.form_submit_button("Set budget", icon=":material/tune:", disabled=not permissions.can_control()):
            components.send(PAGE, api.set_budget, run_id, int(amount), kind)
    with st.form(f"{PAGE}_lr_form"):  # the engine refuses a bad value with one line (shown by send)
        lr = st.number_input("learning rate (optim.lr; the schedule still scales it)", value=float(last.get("lr") or 1e-4),
                             min_value=0.0, format="%.2e", step=1e-5, key=f"{PAGE}_lr")
        if st.form_submit_button("Set learning rate", icon=":material/speed:", disabled=not permissions.can_control()):
            components.send(PAGE, api.set_lr, run_id, float(lr))

with alloc_col:
    try:
        in_force, in_force_params = data.allocator_in_force(run_id)
    except WorkbenchError:
        in_force, in_force_params = last.get("allocator"), {}
    names = available_allocators()
    chosen = st.selectbox("allocator", names, index=names.index(in_force) if in_force in names else 0,
                          key=f"{PAGE}_allocator")
    desc = describe_allocator(chosen)
    st.caption(desc["summary"])
    with st.form(f"{PAGE}_alloc_form"):
        params = components.param_form_fields(PAGE, chosen, desc["params"],
                                              in_force_params if chosen == in_force else {})
        verb = "Set parameters" if chosen == in_force else f"Switch to {chosen}"
        if st.form_submit_button(verb, icon=":material/swap_horiz:", disabled=not permissions.can_control()):
            try:
                make_config(chosen, params)
            except WorkbenchError as exc:
                st.error(str(exc), icon=":material/block:")
            else:
                if chosen == in_force:
                    changed = {k: v for k, v in params.items() if in_force_params.get(k) != v}
                    components.send(PAGE, api.set_allocator_params, run_id, changed or params)
                else:
                    components.send(PAGE, api.set_allocator, run_id, chosen, params)


@st.fragment(run_every=every)
def history(run_id: str) -> None:
    st.subheader("Commands")
    ctl = data.controls(run_id)
    if ctl.is_empty():
        st.caption("no commands yet")
        return
    cols = [c for c in ["control_id", "created_at", "who", "command", "args", "status", "applied_step", "reason",
                        "resolved_at"] if c in ctl.columns]
    st.dataframe(ctl.sort("control_id", descending=True).select(cols), hide_index=True, key=f"{PAGE}_controls")


history(run_id)
