"""Playground: sample a run's checkpoints side by side. Pick up to three checkpoints (and the initial
model), a prompt (typed, from the task's train or held-out set, or sent from the Rollouts page), the
number of samples and the sampling settings; each checkpoint's responses come back with the verifier's
verdict, the reward's terms and tokens coloured by entropy, and the prompt's pass@k with its interval.
The sampling runs in the dashboard's worker process (`app/playground.py`), never in this script; only a
session with the control role may sample, the others see the results already computed."""

import streamlit as st

from app import components, data, permissions
from app import playground as pg
from app import playground_view as view
from workbench.errors import WorkbenchError
from workbench.playground.sample import SampleRequest

PAGE = "playground"
SOURCES = ["typed", "train set", "held-out set"]
BATCH = f"{PAGE}_batch"

st.title("Playground")
run_id = components.pick_run(PAGE)
if not run_id:
    st.stop()
if components.source_of(run_id) is not None:
    st.info("This run was imported from another engine: it has no checkpoints to sample.")
    st.stop()

steps = pg.steps(run_id)
ckpts = [s for s in steps if s > 0]
# the view in the URL: ?ckpts=2,4&initial=1 (what this page writes), or ?step=N from a rollout of step N (the
# checkpoint that sampled it); a link reopens it
default = view.checkpoints_from_url(dict(st.query_params), ckpts)

with st.container(border=True):
    c1, c2 = st.columns([3, 1])
    chosen = c1.multiselect("checkpoints (up to three)", ckpts, default=default, max_selections=3,
                            key=f"{PAGE}_ckpts", help="Full checkpoints and weights-only snapshots "
                            "(`checkpoint.weights_every`) of this run.")
    initial = c2.checkbox("the initial model", value=not ckpts or st.query_params.get("initial") == "1",
                          key=f"{PAGE}_initial")
    if not ckpts:
        c1.caption("This run has no checkpoint yet: only its initial model can be sampled.")
    prompts = data.prompts(run_id)
    sent = st.query_params.get("prompt")  # a prompt id sent from a rollout
    p1, p2 = st.columns([1, 3])
    source_index = 0
    if sent and not prompts.is_empty() and sent in prompts["prompt_id"].to_list():
        split = prompts.filter(prompts["prompt_id"] == sent)["split"][0]
        source_index = 2 if split == "eval" else 1
    source = p1.radio("prompt", SOURCES, index=source_index, key=f"{PAGE}_source")
    prompt_text, prompt_id, answer = None, None, None
    if source == "typed":
        prompt_text = p2.text_area("prompt text", key=f"{PAGE}_text", max_chars=8000, height=80)
        answer = p2.text_input("reference answer (optional: verdicts need one)", key=f"{PAGE}_answer") or None
    else:
        pool = prompts.filter(prompts["split"] == ("train" if source == "train set" else "eval"))
        ids = pool["prompt_id"].to_list()
        texts = dict(zip(ids, pool["text"].to_list()))
        if not ids:
            p2.info("The run's store holds no prompt of this split.")
        else:
            prompt_id = p2.selectbox("prompt", ids, index=ids.index(sent) if sent in ids else 0,
                                     format_func=lambda i: f"{i}: {texts[i][:80]}", key=f"{PAGE}_prompt_id")
    s1, s2, s3, s4, s5, s6 = st.columns(6)
    n = s1.number_input("samples", 1, 64, 8, key=f"{PAGE}_n")
    seed = s2.number_input("seed", 0, 2**31 - 1, 0, key=f"{PAGE}_seed")
    run_cfg = components.as_dict(data.run(run_id).get("config")).get("sampling", {})
    temperature = s3.number_input("temperature", 0.01, 10.0, float(run_cfg.get("temperature", 1.0)),
                                  key=f"{PAGE}_temperature")
    top_p = s4.number_input("top p", 0.01, 1.0, float(run_cfg.get("top_p", 1.0)), key=f"{PAGE}_top_p")
    top_k = s5.number_input("top k (0: off)", 0, 100_000, int(run_cfg.get("top_k", 0)), key=f"{PAGE}_top_k")
    max_new = s6.number_input("max new tokens", 1, 1024, int(run_cfg.get("max_new_tokens", 8)),
                              key=f"{PAGE}_max_new")
    permissions.note_if_read_only()
    b1, b2 = st.columns([1, 5])
    go = b1.button("Sample", type="primary", key=f"{PAGE}_go", disabled=not permissions.can_control())
    stop = b2.button("Cancel", key=f"{PAGE}_cancel", disabled=not st.session_state.get(BATCH))

wanted_url = view.url_of(run_id, chosen, initial, prompt_id)
if st.query_params.to_dict() != wanted_url:
    st.query_params.from_dict(wanted_url)
if stop and st.session_state.get(BATCH):
    pg.cancel(st.session_state[BATCH])
if go and permissions.allowed(PAGE, "sampling", run_id):
    picked = ([0] if initial else []) + sorted(chosen)
    if not picked:
        st.error("Pick a checkpoint or the initial model first.")
    else:
        try:
            requests = [SampleRequest(run_id, step, prompt=prompt_text, prompt_id=prompt_id, answer=answer, n=int(n),
                                      seed=int(seed), temperature=float(temperature), top_p=float(top_p),
                                      top_k=int(top_k), max_new_tokens=int(max_new)) for step in picked]
            st.session_state[BATCH] = pg.submit(requests)
        except WorkbenchError as exc:
            st.error(f"refused: {exc}")


def results() -> None:
    """The batch submitted in this session (refreshed while it runs), else the results computed so far."""
    ids = st.session_state.get(BATCH) or []
    shown = pg.statuses(ids) if ids else pg.computed(run_id)
    if not shown:
        st.info("No samples yet." if permissions.can_control() else
                "No samples computed for this run yet (sampling needs the control role).")
        return
    done = [s["result"] for s in shown if s.get("state") == "done"]
    h_max = view.entropy_scale(done)
    cols = st.columns(len(shown))
    for col, s in zip(cols, shown):
        step = s.get("request", {}).get("checkpoint", s.get("result", {}).get("checkpoint", 0))
        with col.container(border=True):
            st.subheader(view.checkpoint_label(step))
            state = s.get("state")
            if state in ("queued", "running"):
                st.write(f"{state}…")
            elif state != "done":
                st.error(f"{state}: {s.get('error', '')}")
            else:
                r = s["result"]
                st.caption(view.summary(r))
                if r.get("pass_at_k"):
                    st.dataframe(view.pass_at_k_rows(r), hide_index=True, key=f"{PAGE}_passk_{s['id']}")
                st.html(view.samples_html(r, h_max))
    st.caption(f"entropy colour scale: white 0 → red ≥ {h_max:.2f} nats (98th percentile of the samples shown); "
               "pass@k: unbiased estimate, 95% interval from the Wilson interval of the pass rate")


def pending() -> bool:
    return any(s.get("state") in ("queued", "running") for s in pg.statuses(st.session_state.get(BATCH) or []))


@st.fragment(run_every=1.0)
def waiting() -> None:
    """While this session's batch runs: its state every second; the whole page again once it is done."""
    if not pending():
        st.rerun()
    results()


if pending():
    waiting()
else:
    results()
