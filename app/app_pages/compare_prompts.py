"""Compare prompts: which prompts did a run learn that another never did, which did it lose. Two or more
runs (ours or imported, prompts matched by text) at a common point — the same step, the same generated
tokens, or each run's end — or one run at two steps (before/after): a sortable, filterable table of
prompts with each side's pass rate over a window around its point, the difference with its interval and
a change label (each row's "its story in A" link opens the prompt's story, the Prompt page); a scatter of
pass rates where clicking a point opens the prompt; and that prompt's responses side by side, tokens
coloured as on the Rollouts page."""

import polars as pl
import streamlit as st

from app import compare_view, components, data
from workbench.errors import DataError

PAGE = "compare_prompts"
RUNS, STEPS = "two or more runs", "two steps of one run"
BASES = {"each run's end": "end", "the same step": "step", "the same generated tokens": "tokens"}
PICKED = f"{PAGE}_picked"

st.title("Compare prompts")
ids, labels = data.run_options()
if not ids:
    st.info("No runs in this store yet.")
    st.stop()
mode = st.radio("compare", [RUNS, STEPS], horizontal=True, key=f"{PAGE}_mode",
                index=0 if len(ids) >= 2 else 1)  # one run in the store: its before and after
c1, c2, c3 = st.columns([3, 2, 1])
window = c3.number_input("window (steps)", min_value=1, value=None, step=1, key=f"{PAGE}_window",
                         placeholder="auto", help="steps around each point whose rollouts count; empty: enough "
                         "steps for the run's prompt pool to come round about twice")
window = int(window) if window else None
if mode == RUNS:
    # default: the two newest runs, the older one as A (the baseline, usually)
    chosen = c1.multiselect("runs (the first is A)", ids, default=ids[:2][::-1], format_func=lambda r: labels.get(r, r),
                            key=f"{PAGE}_runs")
    basis = BASES[c2.radio("at", list(BASES), horizontal=True, key=f"{PAGE}_basis")]
    if len(chosen) < 2:
        st.info("Pick two or more runs (or compare two steps of one run).")
        st.stop()
    at = None
    if basis != "end":
        at = c2.number_input("step" if basis == "step" else "generated tokens", min_value=0, value=None, step=1,
                             key=f"{PAGE}_at_{basis}", placeholder="the shortest run's end")
    try:
        cmp = data.prompt_comparison(tuple(chosen), basis, int(at) if at is not None else None, window,
                                     tuple(labels.get(r, r) for r in chosen))
    except DataError as exc:  # a run with no step yet
        st.info(str(exc))
        st.stop()
else:
    run_id = components.pick_run(PAGE, container=c1)
    steps = data.steps((run_id,))["step"].to_list() if run_id else []
    if len(steps) < 2:
        st.info("This run has fewer than two steps.")
        st.stop()
    before, after = c2.select_slider("before → after", steps, value=(steps[len(steps) // 4], steps[-1]),
                                     key=f"{PAGE}_before_after")
    cmp = data.step_comparison(run_id, int(before), int(after), window)

sides = cmp.sides
letters = sides["letter"].to_list()
names = dict(zip(letters, sides["label"].to_list()))
st.dataframe(sides.select("letter", "label", "step", "step_min", "step_max", "tokens", "prompts", "matched",
                          "match_rate", "matched_by"), hide_index=True, key=f"{PAGE}_sides",
             column_config={"step": "point (step)", "step_min": "window from", "step_max": "window to",
                            "tokens": "generated tokens at point",
                            "match_rate": st.column_config.NumberColumn("share of its prompts in A", format="%.2f")})
b = st.selectbox("compare with A", letters[1:], format_func=lambda x: f"{x}: {names[x]}", key=f"{PAGE}_b") \
    if len(letters) > 2 else letters[1]
frame = cmp.frame

f1, f2, f3, f4 = st.columns([2, 2, 2, 2])
change = f1.selectbox("change", compare_view.change_options(frame, b), key=f"{PAGE}_change")
text = f2.text_input("prompt contains", key=f"{PAGE}_text")
tag_values = sorted(t for t in compare_view.tag_of(frame).unique().to_list() if t is not None)
tags = f3.multiselect("level or tag", tag_values, key=f"{PAGE}_tags")
sort = f4.selectbox("sort by", list(compare_view.SORTS), key=f"{PAGE}_sort")
view = compare_view.table_view(frame, letters, b, change=change, text=text, tags=tags, sort=sort)
st.caption(f"{view.height} of {frame.height} prompts · pass rates over each side's window (training rollouts; "
           f"held-out where evaluated) · B − A with a {cmp.interval} · select a row or click a point to open it")

fmt = {c: st.column_config.NumberColumn(c, format="%.2f") for c in view.columns
       if c.startswith(("pass_", "eval_pass_", "diff_", "eval_diff_"))}
fmt["story"] = st.column_config.LinkColumn("story", display_text="its story in A",
                                           help="open the prompt's story in run A (the Prompt page)")
table = st.dataframe(compare_view.with_story(view, sides["run_id"][0]).drop("key"), hide_index=True,
                     on_select="rerun", selection_mode="single-row", key=f"{PAGE}_table", column_config=fmt,
                     height=360)
held_out = st.toggle("scatter held-out pass rates", key=f"{PAGE}_held_out")
clicked = st.plotly_chart(compare_view.scatter(view, "A", b, held_out=held_out, names=(names["A"], names[b])),
                          on_select="rerun", selection_mode="points", key=f"{PAGE}_scatter")

# the prompt opened: the row or point picked last (each pick once, so the box below can change it too)
picks = [("table", tuple(view["key"][i] for i in table.selection.rows if i < view.height))]
picks.append(("scatter", tuple(p.get("customdata") for p in clicked.selection.points if p.get("customdata"))))
for source, keys in picks:
    if keys and st.session_state.get(f"{PICKED}_{source}") != keys:
        st.session_state[f"{PICKED}_{source}"] = keys
        st.session_state[f"{PAGE}_prompt"] = keys[0]
options = view["key"].to_list()
if not options:
    st.info("No prompt matches these filters.")
    st.stop()
if st.session_state.get(f"{PAGE}_prompt") not in options:
    st.session_state[f"{PAGE}_prompt"] = options[0]
key = st.selectbox("prompt", options, key=f"{PAGE}_prompt",
                   format_func=lambda k: k if len(k) <= 120 else k[:117] + "…")

st.subheader("Side by side")
row = frame.filter(pl.col("key") == key).row(0, named=True)
cols = st.columns(len(letters) if len(letters) <= 3 else 3)
for i, (x, side) in enumerate(zip(letters, sides.iter_rows(named=True))):
    with cols[i % len(cols)]:
        st.markdown(f"**{x}** · {side['label']}")
        prompt_id, step = row.get(f"prompt_id_{x}"), row.get(f"last_step_{x}")
        if prompt_id is None or step is None:
            st.info(f"No training rollouts of this prompt in {x}'s window "
                    f"(steps {side['step_min']}–{side['step_max']}).")
            continue
        st.page_link("app_pages/prompt.py", label=f"its story in {x}", icon=":material/timeline:",
                      query_params={"run": side["run_id"], "prompt": str(prompt_id)})
        rate = row.get(f"pass_{x}")
        st.caption(f"{row[f'correct_{x}']}/{row[f'rollouts_{x}']} correct in the window"
                   + (f" (pass rate {rate:.2f})" if rate is not None else "") + f"; its rollouts in step {step}:")
        filters = (("prompt_id", prompt_id), ("step_min", int(step)), ("step_max", int(step)))
        components.rollout_groups(f"{PAGE}_{x}", side["run_id"], data.rollouts(side["run_id"], filters, 500, 0))
