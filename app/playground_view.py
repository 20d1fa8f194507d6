"""Pure builders of the Playground page (no streamlit, no store): a checkpoint's samples as HTML, tokens
coloured by entropy with the Rollouts page's scale, each with its verdict, reward and terms; its pass@k
table with the intervals."""

from __future__ import annotations

import html
from typing import Any

from app.rollout_view import token_html

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


def checkpoints_from_url(params: dict[str, str], ckpts: list[int]) -> list[int]:
    """The checkpoints a URL asks for, among `ckpts`: `ckpts=2,4` as written by the page, else `step=N`
    (a rollout of step N: the checkpoint before it, which sampled it), else the latest; at most three."""
    try:
        if params.get("ckpts"):
            return [s for s in (int(x) for x in params["ckpts"].split(",") if x) if s in ckpts][:3]
        if params.get("step"):
            near = [s for s in ckpts if s < int(params["step"])] or ckpts[:1]
            return near[-1:]
    except ValueError:
        pass
    return ckpts[-1:]


def url_of(run_id: str, ckpts: list[int], initial: bool, prompt_id: str | None) -> dict[str, str]:
    """The Playground's view as URL query parameters (a typed prompt's text stays out of the URL)."""
    out = {"run": run_id, "ckpts": ",".join(str(int(s)) for s in sorted(ckpts))}
    if initial:
        out["initial"] = "1"
    if prompt_id:
        out["prompt"] = str(prompt_id)
    return out

