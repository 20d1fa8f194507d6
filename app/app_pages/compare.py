"""Compare: several runs side by side, ours and imported ones — held-out pass@1 and pass@k against
generated tokens and against training wall time (the sum of step times, pauses excluded), and the
training reward against generated tokens (which every run logs)."""

import polars as pl
import streamlit as st

from app import charts, data, derive

PAGE = "compare"
DEFAULT_RUNS = 4

st.title("Compare runs")
ids, labels = data.run_options()
if not ids:
    st.info("No runs in this store yet.")
    st.stop()
chosen = st.multiselect("runs", ids, default=ids[:DEFAULT_RUNS], format_func=lambda r: labels.get(r, r),
                        key=f"{PAGE}_runs")
if not chosen:
    st.info("Pick at least one run.")
    st.stop()

all_steps = data.steps(tuple(chosen))
per_run = {}
for rid in chosen:
    s = all_steps.filter(pl.col("run_id") == rid) if not all_steps.is_empty() else all_steps
    per_run[labels.get(rid, rid)] = (s, data.evals(rid))
curves = derive.compare_curves(per_run)
untimed = [label for label, (s, _) in per_run.items() if s.is_empty() or s["step_time_s"].drop_nulls().len() == 0]
unevaluated = [label for label, (_, e) in per_run.items() if e.is_empty()]
ks = sorted(curves["k"].unique().to_list()) if not curves.is_empty() else [1]
k = st.selectbox("k for pass@k", [x for x in ks if x > 1] or ks, index=len([x for x in ks if x > 1] or ks) - 1,
                 key=f"{PAGE}_k")

left, right = st.columns(2)
left.plotly_chart(charts.compare_chart(curves, x="tokens", x_title="generated tokens", k=1,
                                       title="held-out pass@1 vs generated tokens"), key=f"{PAGE}_p1_tokens")
right.plotly_chart(charts.compare_chart(curves, x="wall_s", x_title="training wall time (s)", k=1,
                                        title="held-out pass@1 vs wall time"), key=f"{PAGE}_p1_wall")
left.plotly_chart(charts.compare_chart(curves, x="tokens", x_title="generated tokens", k=k,
                                       title=f"held-out pass@{k} vs generated tokens"), key=f"{PAGE}_pk_tokens")
right.plotly_chart(charts.compare_chart(curves, x="wall_s", x_title="training wall time (s)", k=k,
                                        title=f"held-out pass@{k} vs wall time"), key=f"{PAGE}_pk_wall")

notes = []
if unevaluated:
    notes.append(f"no held-out evaluations logged (not in the pass@k charts): {', '.join(unevaluated)}")
if untimed:
    notes.append(f"no step times logged (not in the wall-time charts): {', '.join(untimed)}")
if notes:
    st.caption(" · ".join(notes))
st.plotly_chart(charts.reward_compare_chart(derive.reward_curves({label: s for label, (s, _) in per_run.items()})),
                key=f"{PAGE}_reward_tokens")

if not curves.is_empty():
    summary = (curves.sort("step").group_by(["run", "k"]).agg(
        pl.col("pass_at_k").last().alias("final"), pl.col("pass_at_k").max().alias("best"),
        pl.col("tokens").last().alias("tokens"), pl.col("wall_s").last().alias("wall_s"))
        .filter(pl.col("k").is_in([1, k])).sort(["run", "k"]))
    st.dataframe(summary, hide_index=True, key=f"{PAGE}_summary")
