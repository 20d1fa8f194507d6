"""Allocation: how the budget was spread — per step the rollouts granted by stage against the
budget, the rollouts-per-prompt histogram, zero-signal groups, every grant with its reason, and
how well the allocator's predicted pass rates matched what the rollouts then showed. A run imported
from another engine logged no decisions: the page says so and shows what its rollouts tell.
A click on a bar or point of a per-step chart opens that step's rollouts; picking a grant's row opens
its prompt's rollouts in that step (the Rollouts page, components.drill_to_step / drill_to_prompt)."""

import polars as pl
import streamlit as st

from app import charts, components, data, derive

PAGE = "allocation"
CALIBRATION_STEPS = 10
WINDOWS = ["this step", f"last {CALIBRATION_STEPS} steps"]

st.title("Allocation")
run_id, steps = components.pick_run_with_steps(PAGE)
lo, hi = int(steps["step"].min()), int(steps["step"].max())
source = components.source_of(run_id)


def told_by_rollouts() -> None:
    """The page for a run with no allocation decisions: rollouts per step, zero-signal groups per step,
    and for a chosen step the rollouts per prompt and the groups' observed pass rates."""
    st.info(f"This run was imported from {source}, which logged no allocation decisions (no grants, reasons, "
            "budgets or predicted pass rates). Shown is what its rollouts tell.", icon=":material/info:")
    step = st.slider("step", lo, hi, hi, key=f"{PAGE}_step") if lo < hi else hi
    left, right = st.columns(2)
    clicks = [left.plotly_chart(charts.line_chart(steps, [("rollouts", "rollouts")], "rollouts per step", y="rollouts"),
                                key=f"{PAGE}_budget", **components.DRILL),
              right.plotly_chart(charts.line_chart(derive.zero_signal_groups(steps),
                                                   [("zero_signal_groups", "zero-signal groups")],
                                                   "zero-signal groups per step", y="groups"),
                                 key=f"{PAGE}_zero", **components.DRILL)]
    for event in clicks:
        components.drill_to_step(run_id, event)
    groups = derive.group_pass_rates(data.step_rewards(run_id, step, step))
    st.subheader(f"Step {step}")
    c = st.columns(4)
    c[0].metric("prompts", groups.height)
    c[1].metric("rollouts", int(groups["rollouts"].sum()))
    c[2].metric("zero-signal groups", int(groups["zero_signal"].sum()))
    c[3].metric("observed pass rate", f"{groups['correct'].sum() / max(1, groups['rollouts'].sum()):.3f}")
    left, right = st.columns(2)
    left.plotly_chart(charts.histogram_chart(groups["rollouts"].to_list(), f"rollouts per prompt, step {step}",
                                             x="rollouts"), key=f"{PAGE}_hist")
    right.plotly_chart(charts.pass_rate_histogram(groups["pass_rate"].to_list(),
                                                  f"observed pass rate per prompt, step {step}"),
                       key=f"{PAGE}_pass_hist")
    st.dataframe(groups.sort(["rollouts", "prompt_id"], descending=[True, False]), hide_index=True,
                 key=f"{PAGE}_table", column_config={"pass_rate": "observed pass rate"})


if source is not None and data.allocations(run_id, step=hi).is_empty():
    told_by_rollouts()
    st.stop()

step = st.slider("step", lo, hi, hi, key=f"{PAGE}_step") if lo < hi else hi

left, right = st.columns(2)
zero = derive.zero_signal_groups(steps)
for event in [left.plotly_chart(charts.budget_chart(derive.budget_used_from_steps(steps)), key=f"{PAGE}_budget",
                                **components.DRILL),
              right.plotly_chart(charts.line_chart(zero, [("zero_signal_groups", "zero-signal groups")],
                                                   "zero-signal groups per step", y="groups",
                                                   changes=derive.regime_changes(steps)), key=f"{PAGE}_zero",
                                 **components.DRILL)]:
    components.drill_to_step(run_id, event)  # a bar or point: that step's rollouts

this = data.allocations(run_id, step=step)
per_prompt = derive.rollouts_per_prompt(this)
stages = sorted(this["stage"].unique().to_list()) if not this.is_empty() else []
st.subheader(f"Step {step}")
c = st.columns(4)
c[0].metric("prompts", len(per_prompt))
c[1].metric("rollouts granted", int(sum(per_prompt)))
c[2].metric("stages", len(stages))
zrow = zero.filter(pl.col("step") == step)
c[3].metric("zero-signal groups", int(zrow["zero_signal_groups"][0]) if not zrow.is_empty()
            and zrow["zero_signal_groups"][0] is not None else "–")

left, right = st.columns(2)
left.plotly_chart(charts.histogram_chart(per_prompt, f"rollouts per prompt, step {step}", x="rollouts"),
                  key=f"{PAGE}_hist")
with right:
    span = st.segmented_control("calibration over", [WINDOWS[0], WINDOWS[1]], default=WINDOWS[0],
                                key=f"{PAGE}_window") or WINDOWS[0]
    window = (step, step) if span == WINDOWS[0] else (max(lo, step - CALIBRATION_STEPS + 1), step)
    allocs = this if window[0] == window[1] else data.allocations(run_id).filter(pl.col("step").is_between(*window))
    pairs = derive.calibration_pairs(allocs, data.step_rewards(run_id, *window))
    st.plotly_chart(charts.calibration_chart(pairs, f"predicted vs observed pass rate, steps {window[0]}–{window[1]}"),
                    key=f"{PAGE}_calibration")

if not this.is_empty():
    cols = [c for c in ["stage", "prompt_id", "allocator", "asked", "granted", "reason", "predicted_pass",
                        "alpha_before", "beta_before", "budget_left", "used_in_update"] if c in this.columns]
    grants = this.sort(["stage", "granted", "prompt_id"], descending=[False, True, False]).select(cols)
    st.caption("pick a row to open that prompt's rollouts in this step")
    picked = st.dataframe(grants, hide_index=True, key=f"{PAGE}_table", on_select="rerun",
                          selection_mode="single-row")
    rows = [i for i in picked.selection.rows if i < grants.height]
    if rows and components.picked_once(f"{PAGE}_table_{run_id}_{step}", rows[0]):
        components.drill_to_prompt(run_id, step, grants["prompt_id"][rows[0]])
