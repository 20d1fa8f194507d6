"""Pure helpers of the Compare prompts page: the prompt table's view (filter, sort, columns) and the
scatter of per-prompt pass rates, over the frame `workbench.analysis.compare_runs` returns. No Streamlit
and no store access (tested in tests/app/test_compare_view.py)."""

from __future__ import annotations

import hashlib

import plotly.graph_objects as go
import polars as pl

from app.charts import PALETTE

ANY = "any change"

SORTS: dict[str, tuple[str, bool]] = {
    "B − A, largest gain first": ("diff_{b}", True),
    "B − A, largest loss first": ("diff_{b}", False),
    "held-out B − A, largest gain first": ("eval_diff_{b}", True),
    "A's pass rate, lowest first": ("pass_A", False),
    "B's pass rate, lowest first": ("pass_{b}", False),
    "B's rollouts, most first": ("rollouts_{b}", True),
    "prompt": ("prompt", False),
}
"""The table's sort choices: label -> (column, descending); `{b}` is the letter of the run compared with
A. A column added to the comparison's frame (a reward term's mean, say) becomes sortable by one entry."""


def columns(letters: list[str], b: str) -> list[str]:
    """The table's columns, in order, for runs `letters` with run `b` compared against A."""
    out = ["prompt", "level", "tag"]
    for x in letters:
        out += [f"pass_{x}", f"rollouts_{x}"]
    out += [f"diff_{b}", f"diff_{b}_lo", f"diff_{b}_hi", f"change_{b}"]
    out += [f"eval_pass_{x}" for x in letters] + [f"eval_diff_{b}", f"eval_diff_{b}_lo", f"eval_diff_{b}_hi"]
    return out + [f"prompt_id_{x}" for x in letters]


def change_options(frame: pl.DataFrame, b: str) -> list[str]:
    """The filter's choices: any change, then each label present in the frame (most frequent first)."""
    col = f"change_{b}"
    if frame.is_empty() or col not in frame.columns:
        return [ANY]
    counts = frame.group_by(col).len().sort(["len", col], descending=[True, False])
    return [ANY, *[c for c in counts[col].to_list() if c is not None]]


def table_view(frame: pl.DataFrame, letters: list[str], b: str, *, change: str = ANY, text: str = "",
               tags: list[str] | None = None, sort: str = next(iter(SORTS))) -> pl.DataFrame:
    """The rows the table shows: filtered by change label, by a substring of the prompt (case folded)
    and by tag (a level reads "level N"), sorted by one of SORTS (nulls last), `key` kept as the first
    column for the page to map a selected row back to its prompt."""
    out = frame.with_columns(tag_of(frame).alias("tag"))
    if change != ANY:
        out = out.filter(pl.col(f"change_{b}") == change)
    if text.strip():
        out = out.filter(pl.col("prompt").fill_null("").str.to_lowercase().str.contains(text.strip().lower(),
                                                                                         literal=True))
    if tags:
        out = out.filter(pl.col("tag").is_in(tags))
    column, descending = SORTS[sort]
    column = column.format(b=b)
    if column in out.columns:
        out = out.sort([column, "key"], descending=[descending, False], nulls_last=True)
    keep = [c for c in columns(letters, b) if c in out.columns]
    return out.select(["key", *keep])


def with_story(view: pl.DataFrame, run_id: str, letter: str = "A") -> pl.DataFrame:
    """`view` with a `story` column after `key`: the URL of the prompt's story (the Prompt page) in run
    `run_id` (side `letter`'s prompt id), null where that side has no such prompt."""
    from urllib.parse import quote

    ids = view[f"prompt_id_{letter}"] if f"prompt_id_{letter}" in view.columns else pl.Series([None] * view.height)
    urls = [None if p is None else f"prompt?run={quote(run_id, safe='')}&prompt={quote(str(p), safe='')}"
            for p in ids.to_list()]
    return view.insert_column(1, pl.Series("story", urls, dtype=pl.Utf8))


def tag_of(frame: pl.DataFrame) -> pl.Series:
    """Each prompt's tag as the table shows it: "level N" where it has a level, else its source tag."""
    level = frame["level"] if "level" in frame.columns else pl.Series([None] * frame.height, dtype=pl.Int64)
    tag = frame["tag"] if "tag" in frame.columns else pl.Series([None] * frame.height, dtype=pl.Utf8)
    return pl.select(pl.when(level.is_not_null()).then(pl.lit("level ") + level.cast(pl.Utf8))
                     .otherwise(tag).alias("tag")).to_series()


def _jitter(key: str, width: float) -> float:
    """A small offset fixed by the prompt's key, so prompts at equal rates stay apart and clickable."""
    return (int(hashlib.blake2b(key.encode("utf-8"), digest_size=2).hexdigest(), 16) / 65535 - 0.5) * width


def scatter(frame: pl.DataFrame, a: str, b: str, *, held_out: bool = False, names: tuple[str, str] = ("A", "B"),
            jitter: float = 0.03) -> go.Figure:
    """Per-prompt pass rate of run `a` (x) against run `b` (y), one point per prompt present in both,
    coloured by its change label; each point's customdata is the prompt's key (what a click selects).
    Points are offset by up to ±jitter/2 (fixed per prompt) so the many prompts at 0 or 1 stay apart."""
    pre = "eval_" if held_out else ""
    x_col, y_col = f"{pre}pass_{a}", f"{pre}pass_{b}"
    sub = frame.filter(pl.col(x_col).is_not_null() & pl.col(y_col).is_not_null()) if not frame.is_empty() else frame
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(color="#999", dash="dot", width=1),
                             hoverinfo="skip", showlegend=False))
    change = f"change_{b}"
    labels = sub[change].unique().sort().to_list() if change in sub.columns and sub.height else []
    for i, label in enumerate(labels):
        part = sub.filter(pl.col(change) == label)
        keys = part["key"].to_list()
        xs = [v + _jitter(k, jitter) for v, k in zip(part[x_col].to_list(), keys)]
        ys = [v + _jitter(k[::-1], jitter) for v, k in zip(part[y_col].to_list(), keys)]
        hover = [f"{(p or '')[:80]}<br>{names[0]} {x:.2f} · {names[1]} {y:.2f}"
                 for p, x, y in zip(part["prompt"].to_list(), part[x_col].to_list(), part[y_col].to_list())]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=str(label), customdata=keys, text=hover,
                                 hovertemplate="%{text}<extra></extra>",
                                 marker=dict(size=8, opacity=0.75, color=PALETTE[i % len(PALETTE)])))
    what = "held-out pass rate" if held_out else "training pass rate"
    fig.update_layout(title=dict(text=f"{what} per prompt, {names[1]} against {names[0]} (click a point)", x=0.0,
                                 font=dict(size=14)),
                      height=460, margin=dict(l=10, r=10, t=40, b=10), clickmode="event+select",
                      legend=dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0.0),
                      xaxis=dict(title=names[0], range=[-0.05, 1.05]),
                      yaxis=dict(title=names[1], range=[-0.05, 1.05]))
    return fig
