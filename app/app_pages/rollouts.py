"""Rollouts: every sampled response, filtered by run, step range, prompt, reward, verdict, length,
entropy, a reward term's value, (asynchronous runs) staleness and (episodes) tool calls, tool errors and
finish reason; episodes drawn as conversations with their time lanes; grouped by prompt within a step;
tokens coloured by their entropy or by the trainer's minus the behaviour log-probability (subword
tokens shown as they read: spaces, newlines, whole characters), a chat model's template shown or
hidden by a switch, each rollout's reward terms coloured by a picked term, its version span shown in
a pipelined run; paged; the selection downloaded as an SFT, rejection or pairs set (`workbench export`)."""

import streamlit as st

from app import components, data, drill, run_tokens
from workbench.analysis import term_names
from workbench.analysis.pipeline import is_pipelined, pipeline_by_step
from workbench.episodes import FINISH_REASONS
from workbench.export import FORMATS, KINDS

PAGE = "rollouts"
OTHER = "other…"
COLOURS = ["entropy", "trainer − behaviour log-prob"]
VERDICTS = ["any", "correct", "wrong", "no_answer", OTHER]
NO_TERM = "none"

st.title("Rollouts")
run_id, steps = components.pick_run_with_steps(PAGE)
lo, hi = int(steps["step"].min()), int(steps["step"].max())
alert = st.query_params.get("alert")  # from the Alerts page: exactly the rollouts behind an alert
# the view in the URL (?step=N from a step curve, ?steps=a-b an alert's window, the filters, a histogram's
# bin): a link reopens it (app/drill.py)
components.apply_url_view(PAGE, run_id, lo, hi, VERDICTS, OTHER)

with st.container(border=True):
    c1, c2, c3 = st.columns([2, 1, 1])
    if lo < hi:
        step_range = c1.slider("steps", lo, hi, key=f"{PAGE}_steps")
    else:
        step_range = (lo, hi)
        c1.text(f"step {lo} (the only step so far)")
    prompt = c2.text_input("prompt id", key=f"{PAGE}_prompt", placeholder="any")
    verdict = c3.selectbox("verdict", VERDICTS, key=f"{PAGE}_verdict")
    if verdict == OTHER:
        verdict = c3.text_input("verdict is exactly", key=f"{PAGE}_verdict_other").strip() or None
    c4, c5, c6, c7, c8, c9 = st.columns(6)
    reward_min = c4.number_input("reward ≥", value=None, key=f"{PAGE}_reward_min", format="%.3g")
    reward_max = c5.number_input("reward ≤", value=None, key=f"{PAGE}_reward_max", format="%.3g")
    length_min = c6.number_input("length ≥", value=None, min_value=0, step=1, key=f"{PAGE}_length_min")
    length_max = c7.number_input("length ≤", value=None, min_value=0, step=1, key=f"{PAGE}_length_max")
    entropy_min = c8.number_input("entropy mean ≥", value=None, key=f"{PAGE}_entropy_min", format="%.3g")
    entropy_max = c9.number_input("entropy mean ≤", value=None, key=f"{PAGE}_entropy_max", format="%.3g")
    names = term_names(steps)
    term, term_min, term_max = None, None, None
    if names:  # the reward's parts: colour the rollouts by one, and filter on its value
        t1, t2, t3 = st.columns([2, 1, 1])
        term = t1.selectbox("reward term (colours the terms cell)", [NO_TERM, *names], key=f"{PAGE}_term")
        term = None if term == NO_TERM else term
        term_min = t2.number_input("term ≥", value=None, key=f"{PAGE}_term_min", format="%.3g", disabled=term is None)
        term_max = t3.number_input("term ≤", value=None, key=f"{PAGE}_term_max", format="%.3g", disabled=term is None)
    episodic = data.has_episodes(run_id)
    calls_min = errors_min = finish = None
    if episodic:  # a run of multi-turn episodes: filter by its tool calls and how the episodes ended
        e1, e2, e3 = st.columns(3)
        calls_min = e1.number_input("tool calls ≥", value=None, min_value=0, step=1, key=f"{PAGE}_calls_min")
        errors_min = e2.number_input("tool errors ≥", value=None, min_value=0, step=1, key=f"{PAGE}_errors_min")
        finish = e3.selectbox("finish reason", ["any", *FINISH_REASONS], key=f"{PAGE}_finish")
    pipelined = is_pipelined(steps)
    stale_range, stale_top = None, 0
    if pipelined:  # the asynchronous pipeline: how many versions behind the trainer a rollout was consumed
        stale_top = int(pipeline_by_step(steps)["staleness_max"].fill_null(0).max() or 0)
        if stale_top > 0:
            stale_range = st.slider("staleness (versions behind the trainer when consumed)", 0, stale_top,
                                    (0, stale_top), key=f"{PAGE}_staleness")
        else:
            st.text("staleness: every rollout so far was consumed fresh (0)")

filters = {
    "step_min": step_range[0],
    "step_max": step_range[1],
    "prompt_id": prompt.strip() or None,
    "verdict": None if verdict in (None, "any") else verdict,
    "reward_min": reward_min,
    "reward_max": reward_max,
    "length_min": None if length_min is None else int(length_min),
    "length_max": None if length_max is None else int(length_max),
    "entropy_min": entropy_min,
    "entropy_max": entropy_max,
    # a term filter only with a bound: picking a term alone colours by it and hides nothing
    "term": term if term is not None and (term_min is not None or term_max is not None) else None,
    "term_min": term_min if term is not None else None,
    "term_max": term_max if term is not None else None,
    # the whole range hides nothing (and keeps rows that recorded no staleness)
    "staleness_min": stale_range[0] if stale_range and stale_range[0] > 0 else None,
    "staleness_max": stale_range[1] if stale_range and stale_range[1] < stale_top else None,
    "tool_calls_min": None if calls_min is None else int(calls_min),
    "tool_errors_min": None if errors_min is None else int(errors_min),
    "finish_reason": None if finish in (None, "any") else finish,
}
if alert:
    only = st.checkbox(f"only the rollouts behind alert {alert}", value=True, key=f"{PAGE}_alert")
    filters = {"alert_id": alert} if only else filters
components.write_url_view(PAGE, run_id, step_range, dict(  # the widgets' view (an alert's filter aside)
    prompt=prompt.strip() or None, verdict=None if verdict in (None, "any") else verdict, reward_min=reward_min,
    reward_max=reward_max, length_min=None if length_min is None else int(length_min),
    length_max=None if length_max is None else int(length_max), entropy_min=entropy_min, entropy_max=entropy_max,
), keep=("alert",))
# off by default: the histograms read the step range's rollouts (the page's time target stands without them)
if st.toggle("distributions of these steps (click a bar: its rollouts)", key=f"{PAGE}_hists"):
    values = data.rollout_values(run_id, step_range[0], step_range[1])
    for col, (name, (column, kind)) in zip(st.columns(len(drill.BINNED)), drill.BINNED.items()):
        event = col.plotly_chart(drill.bin_chart(drill.bins(values[column].to_list(), kind), name, x=column),
                                 on_select="rerun", selection_mode="points", key=f"{PAGE}_hist_{name}")
        bounds = drill.bin_of(list(event.selection.points))
        if components.picked_once(f"{PAGE}_hist_{name}", bounds):
            st.session_state[f"{PAGE}_drill"] = (name, *bounds, kind)
            st.rerun()
key = tuple((k, v) for k, v in filters.items() if v is not None)
total = data.count_rollouts(run_id, key)
with st.expander("export these rollouts (what `workbench export` writes for these filters)"):
    x1, x2, x3 = st.columns([1, 1, 2])
    kind = x1.radio("set", KINDS, horizontal=True, key=f"{PAGE}_export_kind")
    fmt = x2.radio("format", FORMATS, horizontal=True, key=f"{PAGE}_export_format")
    x3.download_button(f"download data.{fmt}", data.exporter(run_id, key, kind, fmt), file_name=f"{run_id}-{kind}.{fmt}",
                       mime="application/jsonl" if fmt == "jsonl" else "application/vnd.apache.parquet",
                       on_click="ignore", key=f"{PAGE}_export")

p1, p2, p3 = st.columns([1, 1, 4])
size = p1.selectbox("per page", [20, 50, 100], index=1, key=f"{PAGE}_size")
pages = max(1, -(-total // size))
# keyed by the filters, so changing a filter returns to page 1
page = p2.number_input("page", 1, pages, 1, key=f"{PAGE}_page_{abs(hash(key)) % 10**9}")
p3.text(f"{total} rollouts match · page {page} of {pages}"
        + (f" · alert {filters['alert_id']}" if filters.get("alert_id") else "")
        + (f" · prompt filter: {filters['prompt_id']}" if filters.get("prompt_id") else "")
        + (f" · verdict filter: {filters['verdict']}" if filters.get("verdict") else "")
        + (f" · term filter: {term}" if filters.get("term") else ""))

frame = data.rollouts(run_id, key, size, (page - 1) * size)
colour_gap = False
v1, v2 = st.columns([3, 2])
if "token_trainer_logprobs" in frame.columns and frame["token_trainer_logprobs"].null_count() < frame.height:
    colour_gap = v1.radio("colour tokens by", COLOURS, horizontal=True, key=f"{PAGE}_colour") == COLOURS[1]
# a chat model's prompts as it saw them (system turn, role markers) and its end-of-turn tokens, or the text only
template = run_tokens.uses_chat_template(run_id) and v2.toggle("show the chat template", key=f"{PAGE}_template")
components.rollout_groups(PAGE, run_id, frame, term=term, pipelined=pipelined, colour_gap=colour_gap,
                          chat_template=template)
