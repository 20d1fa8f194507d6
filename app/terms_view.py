"""Reward terms drawn on the pages (pure: no Streamlit, no store): the colour and text of a rollout's
terms on the Rollouts page. The frames (terms per step, term names) come from `workbench.analysis.terms`;
this module only draws them. See workbench/tasks/rewards.py for what a term is."""

from __future__ import annotations

import html
import math
from typing import Any

from workbench.analysis.terms import metric_items


def term_colour(value: float | None, lo: float, hi: float) -> str:
    """A diverging colour for a term's value: red below zero, green above, white at zero (scaled by the
    largest magnitude on the page); grey when the rollout has no value for the term."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "rgb(235,235,235)"
    scale = max(abs(lo), abs(hi), 1e-12)
    t = max(-1.0, min(1.0, float(value) / scale))
    if t >= 0:
        return f"rgb({int(255 - 155 * t)},{int(255 - 40 * t)},{int(255 - 155 * t)})"
    return f"rgb(255,{int(255 + 155 * t)},{int(255 + 155 * t)})"


def terms_text(terms: Any) -> str:
    """A rollout's terms as one short line: `verifier 1 · format 0 · overlong -0.333`."""
    return " · ".join(f"{k} {v:.3g}" for k, v in metric_items(terms) if v is not None)


def term_value(terms: Any, name: str) -> float | None:
    """One term's value in a rollout's `reward_terms` (None when absent)."""
    return dict(metric_items(terms)).get(name)


def term_range(rows: list[dict], name: str) -> tuple[float, float]:
    """The smallest and largest value of a term among `rows` (0, 0 when none has it)."""
    vals = [v for r in rows if (v := term_value(r.get("reward_terms"), name)) is not None]
    return (min(vals), max(vals)) if vals else (0.0, 0.0)


def terms_cell(row: dict, term: str | None, span: tuple[float, float]) -> str:
    """The Rollouts table's terms cell of one rollout: its terms as text, the background coloured by
    `term` (when one is picked). Escaped."""
    terms = row.get("reward_terms")
    text = html.escape(terms_text(terms)) if terms is not None else "–"
    style = "padding:2px 6px;white-space:nowrap"
    if term:
        value = term_value(terms, term) if terms is not None else None
        shown = "–" if value is None else f"{value:.3g}"
        style += f";background:{term_colour(value, *span)}"
        return f"<td style='{style}' title='{html.escape(term)} = {shown}'>{text}</td>"
    return f"<td style='{style}'>{text}</td>"
