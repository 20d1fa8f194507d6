"""`workbench export`: a run's selected rollouts out as training sets, with a card.

    workbench export RUN OUT --kind sft --verdict correct --step-min 100
    workbench export RUN OUT --kind rejection --k 4 --format both
    workbench export RUN OUT --kind pairs --sql "length < 512"

OUT is a folder (refused when it holds anything, unless `overwrite`): `data.jsonl` and/or `data.parquet`
(`datasets.load_dataset("parquet", data_files=...)` and `("json", ...)` read both), `card.json` and
`README.md` (source run, its config, the filters, the counts, how to import the set back). The sets
(`sft`, `rejection`, `pairs`) and their SQL are `workbench/store/export.py`'s; rows stream through in
Arrow batches, so memory stays flat however many rollouts the selection holds.

The selection takes the Rollouts page's filters (`workbench.store.reader.rollout_where`: steps, verdict,
reward, entropy, prompt, length, stage, finish reason, reward term, tool calls and tool errors, a tool
error's kind) and a SQL condition over the rollouts' columns. A run that holds episodes exports their
turns as chat messages with OpenAI's tool calls (`sft`, `rejection`).
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.correctness import run_rule
from workbench.episodes import TOOL_ERRORS
from workbench.errors import DataError
from workbench.store.export import FORMATS, KINDS, REIMPORT_MAP, copy_out, export_query

if TYPE_CHECKING:
    from workbench.store.store import Store

__all__ = ["KINDS", "FORMATS", "export_run"]


def _prepare(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise DataError(f"export: {out} is a file; give a folder (it receives data.jsonl, card.json, ...)")
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise DataError(f"export: {out} is not empty; pick another folder or pass --overwrite")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def export_run(store: Store, run_id: str, out: str | Path, *, kind: str = "sft", fmt: str = "jsonl",
               filters: dict[str, Any] | None = None, sql: str | None = None, k: int = 1,
               tokens: bool = True, overwrite: bool = False, tool_error: str | None = None,
               memory_limit: str | None = None) -> dict[str, Any]:
    """Export one run's selection as a `kind` set in `fmt` ("jsonl", "parquet" or "both") into folder
    `out`; returns the card (also written to out/card.json). `filters` are the Rollouts page's
    (`workbench.store.reader.rollout_where`: steps, verdict, reward, entropy, prompt, tool_calls_min/max,
    tool_errors_min/max, ...); `tool_error` keeps the rollouts with a tool call that failed with that kind
    (`workbench.episodes.TOOL_ERRORS`)."""
    formats = list(FORMATS) if fmt == "both" else [fmt]
    if any(f not in FORMATS for f in formats):
        raise DataError(f"--format {fmt!r}: must be one of {', '.join(FORMATS)}, both")
    if tool_error is not None and tool_error not in TOOL_ERRORS:
        raise DataError(f"--tool-error {tool_error!r}: must be one of {', '.join(TOOL_ERRORS)}")
    run = store.run(run_id)  # StoreError naming the run when there is none
    rule = run_rule(run["config"])
    filters = {key: value for key, value in {**(filters or {}), "tool_error": tool_error}.items() if value is not None}
    episodes = store.has_episodes(run_id)
    query, params = export_query(kind, run_id, filters, rule=rule, sql=sql, k=k, tokens=tokens, episodes=episodes)
    out = Path(out)
    _prepare(out, overwrite)
    files: dict[str, Any] = {}
    tally = None
    seconds = 0.0
    for f in formats:
        path = out / f"data.{f}"
        tally, s = copy_out(store, query, params, path, f, memory_limit=memory_limit)
        seconds += s
        files[path.name] = {"rows": tally.rows, "bytes": path.stat().st_size, "seconds": round(s, 3)}
    assert tally is not None
    card = {
        "kind": kind, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source": {"run_id": run_id, "name": run.get("name"), "engine": run.get("source") or "workbench",
                   "status": run.get("status"), "config": run["config"]},
        "selection": {"filters": filters, "sql": sql, "k": k if kind != "sft" else None,
                      "correct": f"the stored verdict, else the run's rule {rule.text}"},
        "episodes": episodes,
        "counts": {"rows": tally.rows, "correct": tally.correct if kind != "pairs" else None,
                   "steps": [tally.step_min, tally.step_max]},
        "files": files,
        "rows_per_s": round(tally.rows * len(formats) / seconds, 1) if seconds else None,
    }
    if kind == "sft" and "jsonl" in formats:
        card["reimport"] = f"workbench import jsonl {out / 'data.jsonl'} --map {REIMPORT_MAP}"
    (out / "card.json").write_text(json.dumps(card, indent=2, default=str) + "\n")
    (out / "README.md").write_text(_readme(card))
    return card


def _readme(card: dict[str, Any]) -> str:
    src, counts = card["source"], card["counts"]
    lines = [f"# {card['kind']} set from run {src['run_id']}", "",
             f"- source: run `{src['run_id']}` ({src['name']}, {src['engine']}, {src['status']})",
             f"- selection: filters {json.dumps(card['selection']['filters'])}, sql {card['selection']['sql']!r}, "
             f"k {card['selection']['k']}",
             f"- correct: {card['selection']['correct']}",
             f"- rows: {counts['rows']} (correct: {counts['correct']}), steps {counts['steps'][0]}..{counts['steps'][1]}",
             f"- files: {', '.join(card['files'])}", "",
             "```python", "import datasets",
             f"ds = datasets.load_dataset(\"parquet\", data_files=\"data.parquet\")" if "data.parquet" in card["files"]
             else "ds = datasets.load_dataset(\"json\", data_files=\"data.jsonl\")", "```", ""]
    if card.get("reimport"):
        lines += ["Import it back:", "", "```", card["reimport"], "```", ""]
    lines += ["The source run's config is in card.json.", ""]
    return "\n".join(lines)
