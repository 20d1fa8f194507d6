"""Pure builders of the Playground page (no streamlit, no store): a checkpoint's samples as HTML, tokens
coloured by entropy with the Rollouts page's scale, each with its verdict, reward and terms; its pass@k
table with the intervals."""

from __future__ import annotations

import html
from typing import Any

from app.derive import token_html

INITIAL_LABEL = "initial model"


def checkpoint_label(step: int) -> str:
    return INITIAL_LABEL if int(step) == 0 else f"checkpoint {int(step)}"


def entropy_scale(results: list[dict[str, Any]]) -> float:
    """One colour scale for every column shown: the 98th percentile of the samples' token entropies."""
    ents = sorted(h for r in results for s in r.get("samples", []) for h in s.get("entropy", []))
    return max(1e-6, ents[int(0.98 * (len(ents) - 1))]) if ents else 2.0


def samples_html(result: dict[str, Any], h_max: float) -> str:
    """One row per sample: verdict, reward (terms in its title), the tokens coloured by entropy."""
    rows = []
    for s in result.get("samples", []):
        mark = "✓" if s.get("correct") else "✗"
        terms = ", ".join(f"{k} {v:+.3g}" for k, v in (s.get("terms") or {}).items())
        head = (f'<b>{mark} {html.escape(str(s.get("verdict")))}</b> · reward '
                f'<span title="{html.escape(terms)}">{s.get("reward", 0.0):+.3g}</span> · '
                f'{s.get("length")} tokens, {html.escape(str(s.get("finish_reason")))}')
        pieces = list(s.get("token_text") or [])
        rows.append(f'<div class="playground-sample" style="margin:4px 0;padding:4px;border-bottom:1px solid #ddd">'
                    f'<div style="font-size:0.85em">{head}{" · " + html.escape(terms) if terms else ""}</div>'
                    f'{token_html(pieces, s.get("entropy"), h_max)}</div>')
    return "".join(rows)


def pass_at_k_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The pass@k table: k, the estimate and its 95% interval (empty for a prompt without an answer)."""
    return [dict(k=int(k), pass_at_k=round(v["value"], 4), low=round(v["low"], 4), high=round(v["high"], 4))
            for k, v in (result.get("pass_at_k") or {}).items()]


def summary(result: dict[str, Any]) -> str:
    """One line: correct of n, seconds, the file the weights came from."""
    if not result.get("pass_at_k"):
        return (f"{result['n']} samples in {result['seconds']:.2f} s from {result['source']} "
                "(no reference answer: no verdicts)")
    return f"{result['correct']}/{result['n']} correct in {result['seconds']:.2f} s · weights: {result['source']}"
