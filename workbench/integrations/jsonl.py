"""Any JSONL or Parquet file of rollouts, read through a field map.

    workbench import jsonl rollouts.jsonl --map prompt=question,response=completion,reward=score,step=iter

The map names, for each of our fields, the key (JSONL) or column (Parquet) that holds it. Required:
`prompt`, `response`, `reward`, `step`; optional: `answer`, `advantage`, `correct` (a boolean or 0/1
accuracy flag), `group` (the trainer's group key), `length` (response tokens), `token_ids`,
`token_logprobs`. A file may hold many steps; a folder is read file by file (`*.jsonl`, `*.json` lines,
`*.parquet`). Rows with the same `group` (without one: the same prompt text) in one step are one group. Steps the run already holds are skipped, so a file that grows can be imported
again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from workbench.errors import DataError
from workbench.integrations.common import (
    Problems,
    StepFile,
    ends_with_newline,
    kind_ok,
    read_json_lines,
    text_column,
)

name = "jsonl"
multi_step = True

REQUIRED = ("prompt", "response", "reward", "step")
KINDS = {"prompt": "any", "response": "str", "reward": "number", "step": "int", "answer": "any",
         "advantage": "number", "correct": "any", "group": "any", "length": "int", "token_ids": "list", "token_logprobs": "list"}
SUFFIXES = (".jsonl", ".json", ".parquet")


def parse_map(text: str | dict[str, str] | None) -> dict[str, str]:
    """`"prompt=question,reward=score"` -> {"prompt": "question", "reward": "score"}, checked."""
    if isinstance(text, dict):
        m = dict(text)
    else:
        m = {}
        for item in (text or "").split(","):
            if not item.strip():
                continue
            ours, sep, theirs = item.partition("=")
            if not sep or not ours.strip() or not theirs.strip():
                raise DataError(f"--map {item!r}: expected field=key (for example reward=score)")
            m[ours.strip()] = theirs.strip()
    unknown = sorted(set(m) - set(KINDS))
    if unknown:
        raise DataError(f"--map: unknown field {unknown[0]!r}; fields are {', '.join(KINDS)}")
    missing = [k for k in REQUIRED if k not in m]
    if missing:
        raise DataError(f"--map: field {missing[0]!r} is required (required: {', '.join(REQUIRED)}), "
                        "e.g. --map prompt=question,response=completion,reward=score,step=iter")
    return m


def discover(path: Path, options: dict[str, Any]) -> list[StepFile]:
    parse_map(options.get("map"))
    if path.is_file():
        return [StepFile(-1, path)]
    return [StepFile(-1, p) for p in sorted(path.iterdir()) if p.is_file() and p.suffix in SUFFIXES]


def looks_complete(f: StepFile) -> bool:
    if f.path.suffix == ".parquet":
        from workbench.integrations.trl_files import looks_complete as parquet_complete

        return parquet_complete(f)
    return ends_with_newline(f.path)


def read(f: StepFile, problems: Problems, options: dict[str, Any]) -> pl.DataFrame:
    """The file as the normalised frame, all its steps."""
    fmap = parse_map(options.get("map"))
    if f.path.suffix == ".parquet":
        try:
            raw = pl.from_arrow(pq.read_table(f.path))
        except Exception as exc:  # noqa: BLE001
            problems.bad(str(f.path), None, f"not a readable Parquet file ({str(exc).splitlines()[0]})")
            return pl.DataFrame()
        assert isinstance(raw, pl.DataFrame)
        return _from_frame(raw, fmap, str(f.path), problems)
    required = {fmap[k]: KINDS[k] for k in REQUIRED}
    optional = {fmap[k]: KINDS[k] for k in fmap if k not in REQUIRED}
    rows = read_json_lines(f.path, required, problems, optional)
    if not rows:
        return pl.DataFrame()
    data = {ours: [obj.get(theirs) for _, obj in rows] for ours, theirs in fmap.items()}
    raw = pl.DataFrame({k: pl.Series(k, v, dtype=_dtype(k)) if k not in ("prompt", "answer", "correct", "group")
                        else pl.Series(k, [_plain(x) for x in v]) for k, v in data.items()})
    return _finish(raw)


def _plain(v: Any) -> Any:
    from workbench.integrations.common import as_text

    return v if isinstance(v, (bool, int, float)) or v is None else as_text(v)


def _dtype(field: str) -> Any:
    return {"response": pl.Utf8, "reward": pl.Float64, "step": pl.Int64, "advantage": pl.Float64,
            "length": pl.Int64, "token_ids": pl.List(pl.Int64), "token_logprobs": pl.List(pl.Float64)}[field]


def _from_frame(raw: pl.DataFrame, fmap: dict[str, str], where: str, problems: Problems) -> pl.DataFrame:
    for ours, theirs in fmap.items():
        if theirs not in raw.columns:
            if ours in REQUIRED:
                problems.bad(where, theirs, f"missing column (mapped to {ours})")
                return pl.DataFrame()
    frame = raw.select([pl.col(theirs).alias(ours) for ours, theirs in fmap.items() if theirs in raw.columns])
    for ours in ("reward", "step"):
        if not frame[ours].dtype.is_numeric():
            problems.bad(where, fmap[ours], f"column holds {frame[ours].dtype}, not numbers")
            return pl.DataFrame()
    bad = frame.with_row_index("row").filter(pl.any_horizontal([pl.col(k).is_null() for k in REQUIRED]))
    for row in bad.iter_rows(named=True):
        key = next(k for k in REQUIRED if row[k] is None)
        problems.bad(f"{where}:row {row['row'] + 1}", fmap[key], "missing value")
    frame = frame.drop_nulls(list(REQUIRED))
    if "prompt" in frame.columns:
        frame = frame.with_columns(prompt=text_column(frame, "prompt"))
    return _finish(frame)


def _finish(frame: pl.DataFrame) -> pl.DataFrame:
    for key in ("answer", "group"):
        if key in frame.columns:
            frame = frame.with_columns(text_column(frame, key).alias(key))
    if "correct" in frame.columns and frame["correct"].dtype != pl.Boolean:
        frame = frame.with_columns(correct=pl.Series([bool(v) if kind_ok(v, "number") or isinstance(v, bool)
                                                      else None for v in frame["correct"].to_list()],
                                                     dtype=pl.Boolean))
    return frame
