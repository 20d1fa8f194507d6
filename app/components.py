"""Widgets shared by the pages: the run picker, run-control buttons, and the allocator parameter
form built from an allocator's Config dataclass. Every key is prefixed by the page that owns it."""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import streamlit as st

from app import data, permissions, run_tokens

CURRENT_RUN = "current_run"
"""Session key holding the run the user last picked on any page (the default on the others)."""


def pick_run(page: str, *, label: str = "run", container: Any = None) -> str | None:
    """A run selectbox keyed `<page>_run`. Defaults to the `run` query parameter, else the run
    picked last on another page, else the newest run."""
    ids, labels = data.run_options()
    box = container or st
    if not ids:
        box.info("No runs in this store yet. Launch one from the Runs page or with `workbench run`.")
        return None
    wanted = st.query_params.get("run") or st.session_state.get(CURRENT_RUN)
    index = ids.index(wanted) if wanted in ids else 0
    run_id = box.selectbox(label, ids, index=index, format_func=lambda r: labels.get(r, r), key=f"{page}_run")
    st.session_state[CURRENT_RUN] = run_id
    return run_id


def pick_run_with_steps(page: str) -> tuple[str, pl.DataFrame]:
    """The run picked (`pick_run`) and its finished steps; the page stops, saying why, when the store
    has no run or the run no finished step."""
    run_id = pick_run(page)
    if not run_id:
        st.stop()
    steps = data.steps((run_id,))
    if steps.is_empty():
        st.info("This run has no finished step yet.")
        st.stop()
    return run_id, steps


def as_dict(value: Any) -> dict:
    if isinstance(value, str):
        try:
            return json.loads(value) if value else {}
        except json.JSONDecodeError:
            return {}
    return dict(value) if isinstance(value, dict) else {}


def send(page: str, action, *args, **kwargs) -> int | None:
    """Run one live-control call (it validates and writes a `controls` row; the engine applies it).
    Shows the control id, or the error as text; returns the id or None."""
    from workbench.errors import WorkbenchError

    if not permissions.allowed(page, action.__name__, args[0] if args and isinstance(args[0], str) else None):
        return None

    try:
        control_id = action(data.store(), *args, who="dashboard", **kwargs)
    except WorkbenchError as exc:
        st.error(str(exc), icon=":material/block:")
        return None
    st.session_state[f"{page}_last_control"] = control_id
    data.controls.clear()
    st.toast(f"sent: {action.__name__} (control {control_id}); the engine applies it at its next boundary")
    return control_id


def source_of(run_id: str) -> str | None:
    """The engine an imported run came from ("verl", "trl", ...); None for this workbench's runs."""
    info = data.run(run_id)
    if info.get("source"):
        return str(info["source"])
    return "another engine" if info.get("status") == "imported" else None


def read_only_note(run_id: str) -> str | None:
    """Why a run offers no controls (it was imported: no process of ours runs it), or None."""
    source = source_of(run_id)
    if source is None:
        return None
    return (f"This run was imported from {source}: it is read-only (no process of this workbench runs it, so "
            "there is nothing to pause, resume, stop or steer).")


def lifecycle_buttons(page: str, run_id: str, status: str | None) -> None:
    """Pause / resume / stop for one run, enabled by its status (none for an imported run)."""
    from workbench.control import api

    note = read_only_note(run_id)
    if note:
        st.caption(note)
        return
    live = status in ("running", "created", "paused", "stopping")
    locked = not permissions.can_control()
    permissions.note_if_read_only()
    c1, c2, c3 = st.columns(3)
    if c1.button("Pause", key=f"{page}_pause", disabled=locked or status != "running", icon=":material/pause:",
                 use_container_width=True):
        send(page, api.pause, run_id)
    if c2.button("Resume", key=f"{page}_resume", disabled=locked or status != "paused", icon=":material/play_arrow:",
                 use_container_width=True):
        send(page, api.resume, run_id)
    if c3.button("Stop", key=f"{page}_stop", disabled=locked or not live, icon=":material/stop:",
                 use_container_width=True):
        send(page, api.stop, run_id)


def _literal_choices(type_name: str) -> list[str] | None:
    return type_name.split("|") if "|" in type_name and not type_name.startswith(("int", "float")) else None


def param_form_fields(page: str, allocator: str, params_doc: list[dict], current: dict) -> dict[str, Any]:
    """One widget per field of the allocator's Config (type, default and help from the dataclass);
    returns the values entered. Call inside an st.form."""
    values: dict[str, Any] = {}
    for p in params_doc:
        name, typ, doc = p["name"], str(p["type"]), p.get("doc") or None
        value = current.get(name, p.get("default"))
        key = f"{page}_param_{allocator}_{name}"
        choices = _literal_choices(typ)
        if choices:
            values[name] = st.selectbox(name, choices, index=choices.index(str(value)) if str(value) in choices else 0,
                                        help=doc, key=key)
        elif typ == "bool":
            values[name] = st.checkbox(name, value=bool(value), help=doc, key=key)
        elif typ == "int":
            values[name] = int(st.number_input(name, value=int(value if value is not None else 0), step=1,
                                               help=doc, key=key))
        elif typ == "float":
            values[name] = float(st.number_input(name, value=float(value if value is not None else 0.0),
                                                 format="%.6g", help=doc, key=key))
        else:
            text = st.text_input(f"{name} ({typ}, JSON)", value=json.dumps(value), help=doc, key=key)
            try:
                values[name] = json.loads(text)
            except json.JSONDecodeError:
                values[name] = text
    return values


def show_text(label: str, value: Any) -> None:
    """A user-supplied value shown as plain text (never as Markdown or HTML)."""
    st.text(f"{label}: {value}")


def rollout_groups(page: str, run_id: str, frame, *, link_prompt: bool = True, term: str | None = None,
                   pipelined: bool = False, colour_gap: bool = False, chat_template: bool = False) -> None:
    """Rollouts grouped by prompt within a step, each response's tokens coloured by entropy (with
    `colour_gap`, by the trainer's minus the behaviour log-probability), its reward terms' cell by
    `term` when given, and with `pipelined` each rollout's version span, staleness and weight. With
    `chat_template`, each prompt as the model saw it (the template's turns and markers) and the
    responses' special tokens (the end of turn); without, the question and the text only."""
    from app import rollout_view, shape_view
    from app.terms_view import term_range

    if frame.is_empty():
        st.info("No rollouts match these filters.")
        return
    decode = run_tokens.token_decoder(run_id)
    ents = [h for hs in frame["token_entropy"].to_list() if hs for h in hs] if "token_entropy" in frame.columns else []
    h_max = max(1e-6, sorted(ents)[int(0.98 * (len(ents) - 1))]) if ents else 2.0
    groups = rollout_view.group_rollouts(frame)
    span = term_range(frame.to_dicts(), term) if term and "reward_terms" in frame.columns else (0.0, 0.0)
    gap_max = None
    if colour_gap:  # one scale for the page, as the entropy's
        from workbench.analysis.pipeline import token_logprob_gaps

        gap_max = rollout_view.gap_scale([g for r in frame.iter_rows(named=True) for g in token_logprob_gaps(
            r.get("token_logprobs"), r.get("token_trainer_logprobs"))])
    texts = data.prompt_texts(run_id, tuple(sorted({g[1] for g in groups})))
    if chat_template:
        templated = run_tokens.chat_prompts(run_id, tuple(sorted(set(texts.values()))))
        texts = {pid: templated.get(t, t) for pid, t in texts.items()}
    # the page's episodes (multi-turn rollouts) read at once: two queries for the page, not two per group
    keys = tuple((r["step"], r["stage"], r["prompt_id"], r["idx"]) for r in frame.iter_rows(named=True)
                 if r.get("turns") is not None) if "turns" in frame.columns else ()
    found = data.episodes(run_id, keys) if keys else {}
    for i, (step, prompt_id, rows) in enumerate(groups):
        with st.container(border=True):
            st.html(rollout_view.group_header(step, prompt_id, rows, texts.get(prompt_id)))
            if link_prompt:
                left, right = st.columns(2)
                left.page_link("app_pages/prompt.py", label="this prompt's story", icon=":material/timeline:",
                               query_params={"run": run_id, "prompt": str(prompt_id)})
                right.page_link("app_pages/playground.py", label="sample it in the Playground",
                                icon=":material/science:",
                                query_params={"run": run_id, "prompt": str(prompt_id), "step": str(step)})
            table = rollout_view.group_html(rows, decode, h_max, term=term, term_span=span, pipelined=pipelined,
                                      gap_max=gap_max, special=chat_template)
            if shape_view.is_tree_group(rows):  # a tree-shaped run (issue #32): the tree, the table folded
                st.html(tree_view(rows, decode, h_max, gap_max, chat_template))
                with st.expander("the group as a table"):
                    st.html(table)
            else:
                st.html(table)
            conversations(rows, found, decode, h_max, chat_template)
    colours = shapes_legend(frame) + (
               f"entropy colour scale: white 0 → red ≥ {h_max:.2f} nats (98th percentile on this page)"
               if gap_max is None else
               f"token colour: trainer − behaviour log-prob, red ≤ −{gap_max:.3g} < white 0 < green ≥ +{gap_max:.3g} "
               "nats (98th percentile of |gap| on this page, at least "
               f"{rollout_view.GAP_FLOOR:g}); grey: the update did not compute the token's trainer log-prob")
    st.caption(colours
               + (f" · reward terms cell coloured by {term}: red < 0 < green, scaled by the largest |value| on "
                  f"this page ({max(abs(span[0]), abs(span[1])):.3g}); grey: the rollout has no {term}" if term else ""))


def conversations(rows: list[dict], episodes: dict, decode, h_max: float, special: bool) -> None:
    """The group's episodes (multi-turn rollouts, among the page's `episodes` by key) as conversations,
    each in a fold, and their time lanes."""
    from app import episode_view

    mine = [(r["step"], r["stage"], r["prompt_id"], r["idx"]) for r in rows]
    found = {k: episodes[k] for k in mine if k in episodes}
    if not found:
        return
    by_idx = {k[3]: ep for k, ep in found.items()}
    dropped = {r["idx"] for r in episode_view.dropped_rows(rows)}
    if episode_view.is_branched_group(rows):  # ARPO: the group as a tree of turns (RoC's dropped nodes marked)
        with st.expander(f"the group as a tree of turns · {len(rows)} episodes", expanded=True):
            st.html(episode_view.episode_tree_html(rows, by_idx, decode, h_max, special=special))
    else:
        for row in rows:
            key = (row["step"], row["stage"], row["prompt_id"], row["idx"])
            if key in found and row["idx"] not in dropped:
                with st.expander(f"#{row['idx']} as a conversation · {episode_view.episode_summary(row)}"):
                    st.html(episode_view.conversation_html(found[key], decode, h_max, special=special))
    if dropped:  # GRPO-RoC: what it sampled and did not train on, apart
        st.html(episode_view.dropped_html(rows, by_idx, decode, h_max, special=special,
                                          conversations=not episode_view.is_branched_group(rows)))
    lanes = [(f"#{k[3]}", ep) for k, ep in found.items()]
    if any(episode_view.lane_segments(ep) for _, ep in lanes):
        with st.expander("where the episodes' time went"):
            st.html(episode_view.lanes_html(lanes))


def tree_view(rows: list[dict], decode, h_max: float, gap_max: float | None, special: bool) -> str:
    """A tree-shaped group drawn as a tree (`app.shape_view.tree_html`), its tokens coloured as the table's."""
    from app import rollout_view, shape_view
    from workbench.analysis.pipeline import token_logprob_gaps

    def pieces_of(row: dict) -> list[str]:
        return rollout_view.token_pieces(row.get("response") or "", row.get("token_ids"), decode, special=special)

    def tokens_of(row: dict, start: int) -> str:
        pieces, ents = pieces_of(row), list(row.get("token_entropy") or [])
        start = start if len(pieces) == row.get("length") else 0  # no per-token pieces: the whole text
        gaps = (token_logprob_gaps(row.get("token_logprobs"), row.get("token_trainer_logprobs"))
                if gap_max is not None else None)
        return rollout_view.token_html(pieces[start:], ents[start:] if len(ents) == len(pieces) else None, h_max,
                                 gaps=None if gaps is None else list(gaps)[start:], gap_max=gap_max or rollout_view.GAP_FLOOR)

    return shape_view.tree_html(rows, pieces_of, tokens_of)


def shapes_legend(frame) -> str:
    """The caption's words on the rollout shapes the page shows (none: empty)."""
    shapes = set(frame["shape"].drop_nulls().to_list()) if "shape" in frame.columns else set()
    modes = set(frame["draft_mode"].drop_nulls().to_list()) if "draft_mode" in frame.columns else set()
    return (("tree groups: each branch under the row it left, ↳ its branch point (token, entropy there), "
             "… the prefix it shares (drawn once, in its parent) · " if "tree" in shapes else "")
            + ("speculative: blue band = prefix reused from the draft (accepted by the current policy), red bar = "
               "first token after a rejected draft · " if "speculative" in shapes else "")
            + ("lenient drafts: orange dashed band = prefix accepted leniently; those rows are not samples of the "
               "current policy · " if "lenient" in modes else ""))


def alert_banner(run_id: str) -> None:
    """A banner naming the run's open alerts (guards), with a link to the Alerts page."""
    open_ = data.alerts(run_id, "open")
    if open_.is_empty():
        return
    latest = open_.to_dicts()[0]
    more = f" (and {open_.height - 1} more)" if open_.height > 1 else ""
    st.warning(f"{latest['message']}{more}", icon=":material/notifications_active:")
    st.page_link("app_pages/alerts.py", label="open the alerts", icon=":material/notifications:",
                 query_params={"run": run_id})


def outage_banner(run_id: str | None = None) -> bool:
    """A warning per run (or for `run_id` only) whose store is unreachable, read without the store
    (`data.store_outages`); True when one was shown."""
    said = data.store_outages()
    rows = [row for rid, row in said.items() if run_id is None or rid == run_id]
    for row in rows:
        st.warning(f"{row['run_id']}: {row['message']}", icon=":material/cloud_off:")
    return bool(rows)


# -- click to drill (the pure part: app/drill.py) ----------------------------------------------------

ROLLOUTS_PAGE = "app_pages/rollouts.py"


DRILL = dict(on_select="rerun", selection_mode="points")
"""`st.plotly_chart`'s arguments for a chart whose click drills (`drill_to_step`)."""


def drill_to_step(run_id: str, event: Any, *, lanes: bool = False) -> None:
    """A click on a step curve or a bar of a per-step chart (`event`: what `st.plotly_chart(...,
    **DRILL)` returned; `lanes`: a bar of the per-worker lanes, whose x is time) opens the Rollouts
    page at that run and step."""
    from app import drill

    points = list(getattr(getattr(event, "selection", None), "points", None) or [])
    step = drill.lane_step_of(points) if lanes else drill.step_of(points)
    if step is not None:
        st.switch_page(ROLLOUTS_PAGE, query_params={"run": run_id, "step": str(step)})


def drill_to_prompt(run_id: str, step: int, prompt_id: str | None) -> None:
    """Open the Rollouts page at a run's step, filtered to one prompt's rollouts (a row picked in a
    table of that step's grants)."""
    query = {"run": run_id, "step": str(int(step))}
    if prompt_id:
        query["prompt"] = str(prompt_id)
    st.switch_page(ROLLOUTS_PAGE, query_params=query)


def picked_once(key: str, value: Any) -> bool:
    """Whether `value` (a chart's selection) is new for `key`: a selection stays on its chart across
    reruns, and each one should act once."""
    seen = f"{key}_seen"
    if value is None or st.session_state.get(seen) == value:
        return False
    st.session_state[seen] = value
    return True


def _url_signature(run_id: str, params: dict[str, Any]) -> str:
    from app import drill

    return repr((run_id, sorted((k, params.get(k)) for k in ("step", "steps", *drill.URL_FILTERS))))


def apply_url_view(page: str, run_id: str, lo: int, hi: int, verdicts: list[str], other: str) -> None:
    """The Rollouts page's view from its URL (`app.drill.parse`) into its widgets' state, once per URL
    and run (a link, a drill from another page, Back in the browser; a URL of another run sets only the
    steps, to the last), and a histogram bar clicked in the last run (`<page>_drill`)."""
    from app import drill

    params = {k: st.query_params.get(k) for k in ("step", "steps", *drill.URL_FILTERS)}
    ours = st.query_params.get("run") in (None, run_id)
    view = drill.parse({k: v for k, v in params.items() if v is not None}) if ours else {}
    first, last = view.get("steps", (hi, hi))
    steps = (min(max(lo, first), hi), max(min(hi, last), lo))
    signature = _url_signature(run_id, params)
    if st.session_state.get(f"{page}_url") != signature:
        st.session_state[f"{page}_url"] = signature
        if lo < hi:
            st.session_state[f"{page}_steps"] = steps
        for name in drill.URL_FILTERS if ours else ():
            value = view.get(name)
            if name == "verdict":
                in_list = value is None or value in verdicts
                st.session_state[f"{page}_verdict"] = value if value in verdicts else ("any" if in_list else other)
                if not in_list:
                    st.session_state[f"{page}_verdict_other"] = value
            else:
                st.session_state[f"{page}_{name}"] = value if value is not None else ("" if name == "prompt" else None)
    if lo < hi and f"{page}_steps" not in st.session_state:  # its state goes when another page is shown
        st.session_state[f"{page}_steps"] = steps
    pending = st.session_state.pop(f"{page}_drill", None)
    if pending:  # a bar of a histogram: its bounds become the filter of its column
        name, low, high, kind = pending
        st.session_state[f"{page}_{name}_min"] = kind(low)
        st.session_state[f"{page}_{name}_max"] = kind(high)


def write_url_view(page: str, run_id: str, steps: tuple[int, int], filters: dict[str, Any],
                   keep: tuple[str, ...] = ()) -> None:
    """Put the Rollouts page's view into its URL (`app.drill.encode`), keeping the parameters `keep`."""
    from app import drill

    wanted = drill.encode(run_id, steps, filters)
    wanted.update({k: st.query_params[k] for k in keep if k in st.query_params})
    if st.query_params.to_dict() != wanted:
        st.query_params.from_dict(wanted)
        st.session_state[f"{page}_url"] = _url_signature(run_id, wanted)

