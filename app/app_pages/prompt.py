"""Prompt: one prompt's story across a run — its posterior pass rate over steps, the rollouts the
allocator granted it per step and why, and its rollouts. For a run that logged no allocation
decisions (imported from another engine), what its rollouts tell: rollouts and observed pass rate
per visit."""

import polars as pl
import streamlit as st

from app import charts, components, data, derive

PAGE = "prompt"

st.title("Prompt")
run_id = components.pick_run(PAGE)
if not run_id:
    st.stop()

steps = data.steps((run_id,))
source = components.source_of(run_id)
span = (int(steps["step"].min()), int(steps["step"].max())) if not steps.is_empty() else None
default = st.query_params.get("prompt")
if not default and span:
    last = data.allocations(run_id, step=span[1])
    if not last.is_empty():
        default = str(last.group_by("prompt_id").agg(pl.col("granted").sum())
                      .sort(["granted", "prompt_id"], descending=[True, False])["prompt_id"][0])
    else:  # no decisions logged: the prompt with the most rollouts in the latest step
        default = derive.busiest_prompt(data.step_rewards(run_id, span[1], span[1]))
known = data.prompts(run_id)
options = known.filter(pl.col("split") == "train")["prompt_id"].to_list() if "split" in known.columns else []
if default and default not in options:
    options = [default, *options]
if not options:
    st.info("This run has no prompts yet.")
    st.stop()
prompt_id = st.selectbox("prompt", options, index=options.index(default) if default in options else 0,
                         key=f"{PAGE}_prompt", accept_new_options=True)

row = known.filter(pl.col("prompt_id") == prompt_id).to_dicts() if not known.is_empty() else []
if row:
    st.code(row[0].get("text") or "", language=None)
    st.text(f"answer: {row[0].get('answer')} · level: {row[0].get('level')} · split: {row[0].get('split')}")
else:
    components.show_text("no prompt with id", prompt_id)

history = data.prompt_history(run_id, prompt_id)  # per step: its grants (all stages) and its posterior after
grants = history.filter(pl.col("granted").is_not_null()) if "granted" in history.columns else history
told_by_rollouts = grants.is_empty() and source is not None
if told_by_rollouts:  # an imported run: no grants, reasons nor posterior were logged
    grants = derive.prompt_visits(data.prompt_rollout_outcomes(run_id, prompt_id))
    st.caption(f"Imported from {source}, which logged no allocation decisions nor per-prompt posterior: "
               "shown is what this prompt's rollouts tell (rollouts and observed pass rate per visit).")

left, right = st.columns(2)
if told_by_rollouts:
    left.plotly_chart(charts.pass_rate_chart(grants), key=f"{PAGE}_posterior")
    right.plotly_chart(charts.grants_chart(grants, "rollouts per step", steps_span=span), key=f"{PAGE}_grants")
else:
    left.plotly_chart(charts.posterior_chart(history), key=f"{PAGE}_posterior")
    right.plotly_chart(charts.grants_chart(grants, steps_span=span), key=f"{PAGE}_grants")

if told_by_rollouts and not grants.is_empty():
    st.subheader("Visits")
    st.dataframe(grants.sort("step", descending=True), hide_index=True, key=f"{PAGE}_grants_table",
                 column_config={"granted": "rollouts", "last_pass": "observed pass rate"})
elif not grants.is_empty():
    st.subheader("Grants and reasons")
    cols = [c for c in ["step", "allocator", "stages", "asked", "granted", "reasons", "predicted_pass",
                        "alpha", "beta", "last_pass"] if c in grants.columns]
    st.dataframe(grants.sort("step", descending=True).select(cols), hide_index=True, key=f"{PAGE}_grants_table",
                 column_config={"alpha": "alpha after", "beta": "beta after", "last_pass": "observed pass rate"})

st.subheader("Its rollouts")
visited = sorted(grants["step"].to_list(), reverse=True) if not grants.is_empty() else []
if not visited:
    st.info("No rollouts of this prompt in this run.")
    st.stop()
step = st.selectbox("in step", visited, key=f"{PAGE}_step_{abs(hash((run_id, prompt_id))) % 10**9}",
                    help="the steps in which this prompt got rollouts, latest first")
key = (("prompt_id", prompt_id), ("step_min", int(step)), ("step_max", int(step)))
frame = data.rollouts(run_id, key, 1000, 0)
st.text(f"{frame.height} rollouts in step {step} · visited in {len(visited)} steps")
components.rollout_groups(PAGE, run_id, frame, link_prompt=False)
