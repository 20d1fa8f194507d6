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
