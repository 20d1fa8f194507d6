"""An episode (a multi-turn rollout, `workbench.episodes.Episode`) drawn as a conversation, and its time
lane: pure builders (HTML strings), no Streamlit, no store.

- `conversation_html`: each turn in order under its role; assistant tokens coloured by entropy (as a
  single-turn response is), tokens the loss does not train on (the prompt's, the tools' results) struck
  through in grey; each tool call with its arguments, result, error and seconds.
- `lanes_html`: one lane per episode of where its time went, as miles draws it: generate (assistant
  turns), tool (calls and their results), waiting for the rest of the batch. HTML bars, not a Plotly
  figure: a figure per group cost the Rollouts page ~0.15 s of CPU each (`workbench bench episodes-page`).
"""

from __future__ import annotations

import html
from typing import Any, Callable

from workbench.episodes import Episode, Turn

ROLE_COLOURS = {"system": "#6b7280", "user": "#2563eb", "assistant": "#059669", "tool": "#b45309"}
LANE_COLOURS = {"generate": "#10b981", "tool": "#f59e0b", "wait": "#d1d5db"}
MASKED_STYLE = "color:#9ca3af;text-decoration:line-through;text-decoration-color:#d1d5db"


def _pieces(turn: Turn, decode: Callable[..., str] | None, special: bool) -> list[str]:
    from app.rollout_view import token_pieces

    return token_pieces(turn.text, turn.token_ids, decode, special=special)


def _turn_tokens(turn: Turn, trained: list[bool], decode, h_max: float, special: bool) -> str:
    """The turn's tokens, one span each: trained ones coloured by their entropy, the rest greyed and struck
    through (the loss never sees them); the text alone where the tokens cannot be split into pieces."""
    from app.rollout_view import entropy_colour

    pieces = _pieces(turn, decode, special)
    ents = list(turn.entropy or [])
    if len(pieces) != len(trained):  # no per-token pieces: the text, styled by the turn's role
        style = "" if any(trained) else MASKED_STYLE
        return f'<div style="font-family:monospace;white-space:pre-wrap;{style}">{html.escape(turn.text)}</div>'
    spans = []
    for i, piece in enumerate(pieces):
        text = html.escape(piece).replace("\n", "⏎<br>") or "&#8203;"
        if not trained[i]:
            spans.append(f'<span title="not trained on" style="{MASKED_STYLE}">{text}</span>')
        elif len(ents) == len(pieces):
            spans.append(f'<span title="H={ents[i]:.3f}" style="background:{entropy_colour(ents[i], h_max)}">'
                         f"{text}</span>")
        else:
            spans.append(f"<span>{text}</span>")
    return '<div style="font-family:monospace;white-space:pre-wrap;line-height:1.6">' + "".join(spans) + "</div>"


def _call_html(call) -> str:
    badge = ('<span style="background:#fee2e2;color:#991b1b;padding:0 4px;border-radius:3px">'
             f"error: {html.escape(call.error)}</span>" if call.error else
             '<span style="background:#dcfce7;color:#166534;padding:0 4px;border-radius:3px">ok</span>')
    cut = " · truncated" if call.truncated else ""
    return (f'<div style="margin:2px 0 2px 16px;font-size:0.9em">🔧 <b>{html.escape(call.name)}</b>('
            f"<code>{html.escape(call.arguments)}</code>) → <code>{html.escape(call.result)}</code> {badge} "
            f'<span style="color:#6b7280">{call.seconds * 1000:.1f} ms{cut}</span></div>')


def conversation_html(episode: Episode, decode: Callable[..., str] | None = None, h_max: float = 2.0, *,
                      special: bool = False) -> str:
    """The episode as a conversation (see the module docstring). `decode(ids, special)` is the run's
    tokenizer (None: the texts, one piece per token where the lengths agree); `special` keeps template
    tokens in the pieces (the page's "show the chat template" switch). Every text is escaped."""
    rows = []
    for i, turn in enumerate(episode.turns):
        in_prompt = i < episode.prompt_turns
        trained = turn.trained(in_prompt)
        colour = ROLE_COLOURS.get(turn.role, "#111827")
        meta = []
        if turn.finish_reason:
            meta.append(turn.finish_reason)
        if turn.seconds is not None:
            meta.append(f"{turn.seconds * 1000:.0f} ms")
        if in_prompt:
            meta.append("prompt")
        head = (f'<div style="font-size:0.8em;color:{colour};font-weight:600">{html.escape(turn.role)}'
                f'<span style="color:#9ca3af;font-weight:400"> {html.escape(" · ".join(meta))}</span></div>')
        calls = "".join(_call_html(c) for c in turn.tool_calls)
        rows.append(f'<div style="border-left:3px solid {colour};padding-left:8px;margin:4px 0">'
                    f"{head}{_turn_tokens(turn, trained, decode, h_max, special)}{calls}</div>")
    return "".join(rows)


def lane_segments(episode: Episode) -> list[tuple[str, float, float]]:
    """(kind, start s, seconds) of the episode's time: generate (assistant turns), tool (tool turns), and
    wait (a gap between one turn's end and the next one's start: the rest of the batch was decoding)."""
    out: list[tuple[str, float, float]] = []
    end = 0.0
    for turn in episode.response_turns:
        if turn.started_s is None or turn.seconds is None:
            continue
        if turn.started_s > end + 1e-6:
            out.append(("wait", end, turn.started_s - end))
        kind = "generate" if turn.role == "assistant" else "tool"
        out.append((kind, turn.started_s, turn.seconds))
        end = max(end, turn.started_s + turn.seconds)
    return out


def lanes_html(episodes: list[tuple[str, Episode]]) -> str:
    """One horizontal lane per (label, episode): its generate / tool / wait segments over time, on one
    scale (seconds from each episode's start; the longest episode spans the lane), with a legend."""
    lanes = [(label, lane_segments(ep)) for label, ep in episodes]
    span = max((start + secs for _, segs in lanes for _, start, secs in segs), default=0.0) or 1.0
    rows = []
    for label, segs in lanes:
        bars = "".join(
            f'<span title="{kind}: {secs:.3f} s from {start:.3f} s" style="position:absolute;left:'
            f'{100 * start / span:.2f}%;width:{max(0.3, 100 * secs / span):.2f}%;top:3px;bottom:3px;'
            f'background:{LANE_COLOURS[kind]}"></span>' for kind, start, secs in segs)
        rows.append(f'<div style="display:flex;align-items:center;gap:6px;margin:2px 0">'
                    f'<span style="width:3em;font-size:0.8em;color:#6b7280">{html.escape(label)}</span>'
                    f'<span style="position:relative;flex:1;height:18px;background:#f9fafb">{bars}</span></div>')
    legend = " ".join(f'<span style="display:inline-block;width:10px;height:10px;background:{c}"></span> {k}'
                      for k, c in LANE_COLOURS.items())
    return (f'<div style="font-size:0.8em">{legend} · 0 to {span:.3f} s from each episode\'s start</div>'
            + "".join(rows))


def episode_summary(row: dict[str, Any]) -> str:
    """One line for a rollout row of an episode: turns, calls, errors, tool tokens."""
    if row.get("turns") is None:
        return ""
    return (f"{row['turns']} turns · {row.get('tool_calls') or 0} tool calls"
            + (f" · {row['tool_errors']} failed" if row.get("tool_errors") else "")
            + (f" · {row['tool_tokens']} tool tokens" if row.get("tool_tokens") else ""))


# -- allocation inside episodes (issue #41): ARPO's tree of turns, GRPO-RoC's dropped episodes -------------

TREE_STYLE = "margin-left:{indent}rem;border-left:2px solid rgb(190,170,215);padding:2px 0 2px 8px;margin-top:3px"
BRANCH_STYLE = ("display:inline-block;border:1px solid rgb(120,80,170);border-radius:4px;padding:0 4px;"
                "background:rgb(243,236,252);font-family:monospace;margin-right:6px")
DROPPED_STYLE = "background:#f3f4f6;color:#6b7280;padding:0 4px;border-radius:3px"


def is_branched_group(rows: list[dict[str, Any]]) -> bool:
    """Whether a group of episodes holds an ARPO branch (a row of turns with a parent in its group)."""
    return any(r.get("turns") is not None and r.get("parent_idx") is not None for r in rows)


def dropped_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The group's episodes GRPO-RoC sampled and dropped (`filter_kept` false): stored, never trained on."""
    return [r for r in rows if r.get("filter_kept") is False]


def branch_turn(episode: Episode, branch_at: int | None) -> int | None:
    """The index (in `episode.turns`) of the first turn after the branch point `branch_at` (a response
    position at a turn's end: ARPO branches after a whole tool result); None when no turn ends there."""
    if branch_at is None or branch_at <= 0:
        return None
    pos = 0
    for k, turn in enumerate(episode.response_turns):
        pos += len(turn.token_ids)
        if pos == branch_at:
            return episode.prompt_turns + k + 1
        if pos > branch_at:
            return None
    return None


def _num(value: Any, fmt: str = ".3f") -> str:
    return "–" if value is None or value != value else format(float(value), fmt)


def _row_head(row: dict[str, Any]) -> str:
    bits = [f"#{row.get('idx')}", f"reward {_num(row.get('reward'), '.3g')}", str(row.get("verdict") or "–"),
            f"adv {_num(row.get('advantage'), '+.3f')}", episode_summary(row)]
    kept = row.get("filter_kept")
    badge = "" if kept is None else (
        f' <span data-roc="kept" style="background:#dcfce7;color:#166534;padding:0 4px;border-radius:3px">kept'
        f" · penalty {_num(row.get('filter_penalty'), '.2f')}</span>" if kept else
        f' <span data-roc="dropped" style="{DROPPED_STYLE}">dropped by RoC · penalty '
        f"{_num(row.get('filter_penalty'), '.2f')} · {html.escape(str(row.get('filter_reason') or '–'))}</span>")
    return html.escape(" · ".join(b for b in bits if b)) + badge


def _branch_mark(row: dict[str, Any], turn: int | None) -> str:
    at = row.get("branch_at")
    where = f"after turn {turn - 1}" if turn is not None else "(no turn ends there: drawn whole)"
    before, after, draw = (_num(row.get(k)) for k in ("branch_entropy_before", "branch_entropy_after", "branch_draw"))
    return (f'<span data-branch-at="{at}" data-entropy-before="{before}" data-entropy-after="{after}" '
            f'data-draw="{draw}" title="ARPO branched this episode from #{row.get("parent_idx")} at response position '
            f'{at} (the end of a tool result): the first turn\'s entropy, the entropy of the turn before the branch '
            f'(each summed over its window, over ln |V|) and the draw u" style="{BRANCH_STYLE}">'
            f"↳ from #{row.get('parent_idx')} {where} · t{at} · H before {before} · H after {after} · "
            f"draw {draw}</span>")


def _tree_node(node: Any, episodes: dict[int, Episode], draw: Callable[[Episode], str], depth: int) -> str:
    row = node.row
    ep = episodes.get(int(row["idx"]))
    head, body, start = "", "", 0
    if node.parent is not None:
        start = branch_turn(ep, row.get("branch_at")) if ep is not None else None
        head = _branch_mark(row, start)
        start = start or 0
    if node.missing_parent is not None:
        head = (f'<span style="color:#888">(branched from #{node.missing_parent} at t{row.get("branch_at")}, not '
                "shown: a filter or the page hides it; drawn whole)</span> ")
    if start:
        body = (f'<div data-shared-turns="{start}" style="color:#888;font-size:0.8em">… {start} turns shared with '
                f"#{html.escape(str(row.get('parent_idx')))} (drawn there)</div>")
    if ep is not None:
        body += draw(Episode(ep.turns[start:], prompt_turns=max(0, ep.prompt_turns - start)))
    kids = "".join(_tree_node(c, episodes, draw, depth + 1) for c in node.children)
    return (f'<div data-episode-node="{html.escape(str(row.get("idx")))}" data-depth="{depth}" '
            f'style="{TREE_STYLE.format(indent=1.4 if depth else 0)}">'
            f'<div style="font-size:0.8rem;color:#444">{head}{_row_head(row)}</div>{body}{kids}</div>')


def episode_tree_html(rows: list[dict[str, Any]], episodes: dict[int, Episode], decode: Callable[..., str] | None = None,
                      h_max: float = 2.0, *, special: bool = False) -> str:
    """An ARPO group (one step, one prompt) as a tree of turns: each episode under the one it branched from
    (`parent_idx`), its branch point marked with ARPO's decision (the entropies before and after, the draw),
    the turns it shares with its parent drawn once, in the parent; each node's reward, verdict, advantage
    and, under GRPO-RoC, whether it was kept. `episodes` maps a row's `idx` to its episode."""
    from app.shape_view import rollout_forest

    def draw(ep: Episode) -> str:
        return conversation_html(ep, decode, h_max, special=special)

    forest = rollout_forest(rows)
    branches = sum(1 for r in rows if r.get("parent_idx") is not None)
    first = rows[0] if rows else {}
    return (f'<div data-episode-tree="{html.escape(str(first.get("prompt_id")), quote=True)}" '
            f'data-step="{html.escape(str(first.get("step")))}" style="font-size:0.85rem">'
            f'<div style="color:#666;font-size:0.8rem">{len(rows)} episodes, {branches} of them ARPO branches '
            "(↳ the branch point: the turn it follows, response position t, the first turn's entropy H before, the "
            "entropy of the turn before the branch H after, the draw u; … the turns shared with the parent)</div>"
            + "".join(_tree_node(n, episodes, draw, 0) for n in forest) + "</div>")


def dropped_html(rows: list[dict[str, Any]], episodes: dict[int, Episode], decode: Callable[..., str] | None = None,
                 h_max: float = 2.0, *, special: bool = False, conversations: bool = True) -> str:
    """GRPO-RoC's dropped episodes of a group, apart: each with its penalty (tool error ratio + format) and
    the reason it was dropped, and (with `conversations`) its conversation folded."""
    out = dropped_rows(rows)
    if not out:
        return ""
    items = []
    for r in out:
        ep = episodes.get(int(r["idx"]))
        conv = (f"<details><summary>the conversation</summary>{conversation_html(ep, decode, h_max, special=special)}"
                "</details>" if conversations and ep is not None else "")
        items.append(f'<div data-dropped-idx="{r["idx"]}" data-penalty="{_num(r.get("filter_penalty"))}" '
                     f'data-reason="{html.escape(str(r.get("filter_reason") or ""), quote=True)}" '
                     f'style="border-left:3px solid #d1d5db;padding-left:8px;margin:4px 0">'
                     f'<div style="font-size:0.8rem">{_row_head(r)} · finish {html.escape(str(r.get("finish_reason")))}'
                     f"</div>{conv}</div>")
    first = out[0]
    return (f'<div data-roc-dropped="{html.escape(str(first.get("prompt_id")), quote=True)}" style="font-size:0.85rem">'
            f'<div style="color:#666;font-size:0.8rem">{len(out)} of {len(rows)} episodes dropped by GRPO-RoC: stored, '
            "never trained on (penalty = tool error ratio, 0.5 without a call, + 1 unless the episode ended with "
            "stop)</div>" + "".join(items) + "</div>")
