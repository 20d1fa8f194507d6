"""TRL GRPOTrainer completion logs: the `output_dir/completions/` folder of `completions_*.parquet`.

Written by `GRPOTrainer.log` in `trl/trainer/grpo_trainer.py` (huggingface/trl) when
`log_completions=True`: at every logging step, `completions_{global_step:05d}.parquet` (pandas
`to_parquet`) with columns `step`, `prompt`, `completion`, one column per reward function (named by
`reward_func_names`; NaN where a function did not score a row), one column per `log_extra` key, and
`advantage`. The rows are TRL's `_logs` buffer, which holds the latest generation batch only
(`generation_batch_size` rows), so each file is one step's completions when `logging_steps=1`.

Groups: the trainer's sampler repeats each prompt `num_generations` times in a row, so rows with the same
prompt text in one file are one group. Each reward column is kept as a reward term of that name
(`rollouts.reward_terms`, unweighted). The total reward is the weighted sum of the reward columns;
the weights (`GRPOConfig.reward_weights`) are not in the file: pass them (`reward_weights`), else
every reward column weighs 1. Prompts and completions may be conversations (lists of messages);
they are stored as text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from workbench.errors import DataError
from workbench.integrations.common import Problems, StepFile
from workbench.tasks.rewards import FRAME_PREFIX

name = "trl"

_STEP_FILE = re.compile(r"^completions_(\d+)\.parquet$")
RESERVED = {"step", "prompt", "completion", "advantage"}


def _folder(path: Path) -> Path:
    if path.is_dir() and (path / "completions").is_dir():
        return path / "completions"
    return path


def discover(path: Path, options: dict[str, Any]) -> list[StepFile]:
    """`completions_<step>.parquet` files of the folder (or of its `completions/` subfolder)."""
    folder = _folder(path)
    if folder.is_file():
        m = _STEP_FILE.match(folder.name)
        if not m:
            raise DataError(f"{folder}: a TRL completions file is named completions_<step>.parquet")
        return [StepFile(int(m.group(1)), folder)]
    return [StepFile(int(m.group(1)), p) for p in folder.iterdir()
            if (m := _STEP_FILE.match(p.name)) and p.is_file()]


def looks_complete(f: StepFile) -> bool:
    """A Parquet file is whole when it starts and ends with the magic bytes `PAR1`."""
    try:
        with open(f.path, "rb") as fh:
            head = fh.read(4)
            fh.seek(0, 2)
            if fh.tell() < 12:
                return False
            fh.seek(-4, 2)
            return head == b"PAR1" and fh.read(4) == b"PAR1"
    except OSError:
        return False


def _as_text(col: pl.Series, what: str) -> pl.Series:
    """Text, or a conversation (list of {role, content}) rendered one message per line."""
    if col.dtype == pl.Utf8:
        return col
    out = []
    for v in col.to_list():
        if v is None or isinstance(v, str):
            out.append(v)
        elif isinstance(v, list):
            parts = []
            for m in v:
                if isinstance(m, dict):
                    content = m.get("content")
                    if isinstance(content, list):  # multimodal content blocks
                        content = "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
                    role = m.get("role")
                    parts.append(f"{role}: {content}" if what == "prompt" and role else str(content or ""))
                else:
                    parts.append(str(m))
            out.append("\n".join(parts))
        else:
            out.append(str(v))
    return pl.Series(col.name, out, dtype=pl.Utf8)


def reward_columns(frame: pl.DataFrame, options: dict[str, Any], where: str) -> dict[str, float]:
    """Reward column -> weight: the given weights, else every numeric column not reserved (weight 1)."""
    weights = options.get("reward_weights")
    if weights:
        missing = [c for c in weights if c not in frame.columns]
        if missing:
            raise DataError(f"{where}: reward column {missing[0]!r} is not in the file "
                            f"(columns: {frame.columns})")
        return {c: float(w) for c, w in weights.items()}
    cols = {c: 1.0 for c, t in frame.schema.items()
            if c not in RESERVED and t.is_numeric() and not t.is_integer()}
    if not cols:
        raise DataError(f"{where}: no reward column (a float column besides step/advantage); "
                        f"columns: {frame.columns}")
    return cols


def read(f: StepFile, problems: Problems, options: dict[str, Any]) -> pl.DataFrame:
    """The file as the normalised frame (see common.py); rows are named `file:row N` (1-based)."""
    where = str(f.path)
    try:
        frame = pl.from_arrow(pq.read_table(f.path))
    except Exception as exc:  # noqa: BLE001 (a truncated or foreign file)
        problems.bad(where, None, f"not a readable Parquet file ({str(exc).splitlines()[0]})")
        return pl.DataFrame()
    assert isinstance(frame, pl.DataFrame)
    for key in ("prompt", "completion"):
        if key not in frame.columns:
            problems.bad(where, key, "missing column")
            return pl.DataFrame()
    try:
        weights = reward_columns(frame, options, where)
    except DataError:
        if not problems.skip_bad:
            raise
        problems.bad(where, None, "no reward column")
        return pl.DataFrame()
    for c in weights:
        if not frame[c].dtype.is_numeric():
            problems.bad(where, c, f"reward column holds {frame[c].dtype}, not numbers")
            return pl.DataFrame()
    prompt, completion = _as_text(frame["prompt"], "prompt"), _as_text(frame["completion"], "completion")
    reward = pl.sum_horizontal([pl.col(c).cast(pl.Float64).fill_nan(None) * w for c, w in weights.items()])
    out = pl.DataFrame({"prompt": prompt, "response": completion}).with_columns(
        step=pl.lit(f.step, pl.Int64), reward=frame.select(reward.fill_null(0.0))
        .to_series())
    out = out.with_columns(  # each reward function's column, unweighted, as a term
        [frame[c].cast(pl.Float64).fill_nan(None).alias(FRAME_PREFIX + c) for c in weights])
    if "advantage" in frame.columns and frame["advantage"].dtype.is_numeric():
        out = out.with_columns(advantage=frame["advantage"].cast(pl.Float64))
    answer = options.get("answer_column", "answer")
    if answer in frame.columns:
        out = out.with_columns(answer=_as_text(frame[answer], "answer"))
    bad = out.with_row_index("row").filter(pl.col("prompt").is_null() | pl.col("response").is_null())
    if bad.height:
        for row, p in bad.select("row", "prompt").iter_rows():
            problems.bad(f"{where}:row {row + 1}", "prompt" if p is None else "completion", "missing value")
        out = out.filter(pl.col("prompt").is_not_null() & pl.col("response").is_not_null())
    return out
