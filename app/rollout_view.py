"""Rollouts as HTML for the pages: each token as it reads, coloured by its entropy (or the trainer's minus
the behaviour log-probability), a group's rollouts as a table with their fields, a group's header. Pure
builders (strings in, escaped HTML out): no Streamlit, no store access, unit-tested on hand-made rows."""

from __future__ import annotations

import html
import math
from typing import Any

import polars as pl

from workbench.correctness import is_correct


def entropy_colour(h: float, h_max: float) -> str:
    """Background colour for a token with entropy `h`: white (certain) to orange-red (uncertain)."""
    t = 0.0 if not h_max or h is None or math.isnan(h) else max(0.0, min(1.0, h / h_max))
    r, g, b = 255, int(255 - 150 * t), int(255 - 220 * t)
    return f"rgb({r},{g},{b})"


def token_pieces(response: str, token_ids: list[int] | None, decode: Any | None, *, special: bool = True) -> list[str]:
    """The response split into one piece per generated token: with the run's tokenizer (`decode(ids,
    special)` decodes a list of ids, special tokens kept or dropped), each token as a person reads it
    (`readable_pieces`); without one, one character per token when the lengths agree (character
    tokenizers), else the whole response as a single piece."""
    ids = list(token_ids or [])
    if decode is not None and ids:
        try:
            return readable_pieces(ids, lambda part: decode(part, special))
        except Exception:  # noqa: BLE001 - a tokenizer that can't decode an id: fall back below
            pass
    if ids and len(response) == len(ids):
        return list(response)
    return [response]


BYTES_PER_CHARACTER = 4
"""The most byte tokens one character can take (UTF-8)."""


def readable_pieces(ids: list[int], decode: Any) -> list[str]:
    """Each token's text as it reads in the decoded response: what the token adds to the text decoded
    so far (decoded after the token before it, so that a byte-level BPE 'Ġ' or a SentencePiece '▁' is
    the space it stands for, 'Ċ' the newline, and a SentencePiece word keeps its leading space), and
    a character split over several byte tokens (an emoji, a dash) shown whole on its last token, the
    earlier ones empty. `decode(ids)` returns the text of a list of ids; the pieces joined are the
    response as `decode` gives it (up to a character the response was cut in the middle of)."""
    pieces: list[str] = []
    before: list[int] = []  # the last whole token (or character) before the pending ones
    pending: list[int] = []
    for n, tid in enumerate(ids):
        pending.append(int(tid))
        head = decode(before) if before else ""
        text = decode(before + pending)
        piece = text[len(head):] if text.startswith(head) else decode(pending)
        if piece.endswith("\ufffd") and len(pending) < BYTES_PER_CHARACTER and n + 1 < len(ids):
            pieces.append("")  # a byte of a character that the next tokens complete
            continue
        pieces.append(piece)
        before, pending = pending, []
    return pieces


GAP_FLOOR = 0.05
"""Smallest scale (nats) of the behaviour-vs-trainer colouring: a page whose largest gap is below it (a
synchronous run, where the two differ by float rounding) stays near white instead of showing noise."""


def gap_scale(gaps: list[float | None]) -> float:
    """The colour scale of the gap colouring: the 98th percentile of |gap| over the page's tokens, at
    least GAP_FLOOR."""
    mags = sorted(abs(g) for g in gaps if g is not None)
    return max(GAP_FLOOR, mags[int(0.98 * (len(mags) - 1))]) if mags else GAP_FLOOR


def token_html(pieces: list[str], entropies: list[float] | None, h_max: float = 2.0, *,
               gaps: list[float | None] | None = None, gap_max: float = GAP_FLOOR,
               reused: tuple[int, int | None, int | None, bool] = (0, None, None, False)) -> str:
    """HTML spans, one per token, coloured by entropy, or with `gaps` by the trainer's minus the
    behaviour log-probability (`workbench.analysis.pipeline.token_logprob_gaps`: red where the trainer
    finds the token less likely than the weights that sampled it, green where more, white at 0, grey
    where the update did not compute it; scaled by `gap_max`); `reused` (a speculative rollout's reused
    prefix, first rejected position, draft length, lenient: `app.shape_view.reused_split`) shades the prefix.
    Escaped."""
    from app.shape_view import mark_reused
    from app.terms_view import term_colour

    ents, gs = list(entropies or []), list(gaps or [])
    spans = []
    for i, piece in enumerate(pieces):
        h = ents[i] if i < len(ents) and len(pieces) == len(ents) else None
        text = html.escape(piece).replace("\n", "⏎<br>").replace("\t", "⇥\t") or "&#8203;"
        if gaps is not None:
            g = gs[i] if i < len(gs) and len(pieces) == len(gs) else None
            title = "trainer log-prob not stored" if g is None else f"trainer − behaviour = {g:+.4f} nats"
            spans.append(f'<span title="{title}" style="background:{term_colour(g, -gap_max, gap_max)}">'
                         f"{text}</span>")
        elif h is None:
            spans.append(f"<span>{text}</span>")
        else:
            spans.append(f'<span title="H={h:.3f}" style="background:{entropy_colour(h, h_max)}">{text}</span>')
    spans = mark_reused(spans, *reused) if any(reused) or reused[1] == 0 else spans
    return ('<div style="font-family:monospace;white-space:pre-wrap;line-height:1.6">' + "".join(spans) + "</div>")


ROLLOUT_FIELDS = [
    ("idx", "#", "{}"),
    ("stage", "stage", "{}"),
    ("policy_version", "policy", "{}"),
    ("reward", "reward", "{:.3g}"),
    ("verdict", "verdict", "{}"),
    ("correct", "correct", "{}"),
    ("advantage", "advantage", "{:+.3f}"),
    ("length", "len", "{}"),
    ("entropy_mean", "H mean", "{:.3f}"),
]


PIPELINE_FIELDS = [
    ("staleness", "stale", "{}"),
    ("is_weight_mean", "IS weight", "{:.3f}"),
]
"""The asynchronous pipeline's columns of a rollout (shown for pipelined runs), after its version span."""


def version_span(row: dict) -> str:
    """A rollout's policy versions: `v3`, or `v3→v4 (2 segments)` for a partial rollout continued under
    newer weights; `–` where none was recorded (imported runs)."""
    start, end, segments = row.get("version_start"), row.get("version_end"), row.get("segments")
    if start is None:
        return "–"
    text = f"v{start}" if end is None or end == start else f"v{start}→v{end}"
    return text + (f" ({segments} segments)" if segments and segments > 1 else "")


def _fmt(fmt: str, value: Any) -> str:
    if value is None:
        return "–"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def group_html(rows: list[dict], decode: Any | None = None, h_max: float = 2.0, *, term: str | None = None,
               term_span: tuple[float, float] = (0.0, 0.0), pipelined: bool = False,
               gap_max: float | None = None, special: bool = True) -> str:
    """One prompt's rollouts within a step as an HTML table: the rollout's fields (with `pipelined`, its
    version span, staleness and importance weight), its reward terms (the cell coloured by `term`'s
    value on the scale `term_span`, when a term is picked), then its response with each token coloured
    by entropy (with `gap_max`, by the trainer's minus the behaviour log-probability on that scale), and
    the environment's turns of a multi-turn rollout under it (`observations`, kept apart from the
    response). `special`: the response's special tokens (a chat model's end of turn) shown, else
    left out. Every value is escaped."""
    from app.shape_view import reused_split
    from app.terms_view import terms_cell
    from workbench.analysis.pipeline import token_logprob_gaps

    with_terms = any(r.get("reward_terms") is not None for r in rows)
    labels = [lab for _, lab, _ in ROLLOUT_FIELDS] + (["versions"] + [lab for _, lab, _ in PIPELINE_FIELDS]
                                                      if pipelined else []) + (["reward terms"] if with_terms else [])
    head = "".join(f"<th style='text-align:left;padding:2px 6px'>{html.escape(lab)}</th>" for lab in labels)
    cell = "<td style='padding:2px 6px;white-space:nowrap'>{}</td>"
    body = []
    for r in rows:
        cells = "".join(cell.format(html.escape(_fmt(fmt, r.get(col)))) for col, _, fmt in ROLLOUT_FIELDS)
        if pipelined:
            cells += cell.format(html.escape(version_span(r)))
            cells += "".join(cell.format(html.escape(_fmt(fmt, r.get(col)))) for col, _, fmt in PIPELINE_FIELDS)
        cells += terms_cell(r, term, term_span) if with_terms else ""
        pieces = token_pieces(r.get("response") or "", r.get("token_ids"), decode, special=special)
        gaps = token_logprob_gaps(r.get("token_logprobs"), r.get("token_trainer_logprobs")) \
            if gap_max is not None else None
        tokens = token_html(pieces, r.get("token_entropy"), h_max, gaps=gaps, gap_max=gap_max or GAP_FLOOR,
                            reused=reused_split(r) if len(pieces) == r.get("length") else (0, None, None, False))
        for obs in r.get("observations") or []:
            tokens += f"<div style='color:#666;font-family:monospace'>environment: {html.escape(str(obs))}</div>"
        body.append(f"<tr>{cells}<td style='padding:2px 6px;width:100%'>{tokens}</td></tr>")
    return (  # scrolls sideways in a narrow column (the side-by-side view) instead of overflowing it
        "<div style='overflow-x:auto'><table style='border-collapse:collapse;font-size:0.85rem;width:100%'>"
        f"<thead><tr>{head}<th style='text-align:left;padding:2px 6px;min-width:12rem'>response (tokens "
        f"coloured by {'trainer − behaviour log-prob' if gap_max is not None else 'entropy'})</th>"
        f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def group_rollouts(frame: pl.DataFrame) -> list[tuple[int, str, list[dict]]]:
    """The rows of a page grouped by (step, prompt) in the store's order: [(step, prompt_id, rows)]."""
    groups: list[tuple[int, str, list[dict]]] = []
    for row in frame.iter_rows(named=True):
        key = (row["step"], row["prompt_id"])
        if groups and (groups[-1][0], groups[-1][1]) == key:
            groups[-1][2].append(row)
        else:
            groups.append((row["step"], row["prompt_id"], [row]))
    return groups


def group_header(step: int, prompt_id: str, rows: list[dict], text: str | None) -> str:
    """A group's one-line header as escaped HTML: step, prompt, correct count, prompt text."""
    correct = sum(1 for r in rows if (r["correct"] if r.get("correct") is not None
                                      else is_correct(r.get("reward") or 0)))
    t = (f" — <code style='white-space:pre-wrap'>{html.escape(text)}</code>" if text else "")
    return (f"<div style='margin-top:0.6rem'><b>step {step}</b> · prompt <code>{html.escape(str(prompt_id))}</code>"
            f" · {correct}/{len(rows)} correct on this page{t}</div>")
