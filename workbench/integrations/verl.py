"""verl rollout dumps: the folder of `trainer.rollout_data_dir` (training) and, as evals, the folder of
`trainer.validation_data_dir`.

Written by `RayPPOTrainer._dump_generations` in `verl/trainer/ppo/ray_trainer.py` (volcengine/verl):
one `{global_steps}.jsonl` per step, opened with "w" and written in one call at the end of the step's
logging; one JSON object per response with keys `input` (prompt text, decoded with
`skip_special_tokens=True`), `output` (response text), `gts` (the sample's
`reward_model.ground_truth`; absent in older verl), `score` (the sequence reward: the sum of
`token_level_scores`), `step` (global step), plus every reward-extra key whose list has one value per
response (e.g. `acc`, `pred`; `request_id` in recent versions). Numeric reward-extra keys (not bools)
import as reward terms (`rollouts.reward_terms`), e.g. DAPO's `overlong_reward`. The validation dump adds `reward`
(= the score) and, with `val_kwargs.n > 1`, holds n interleaved samples per prompt.

Rows with the same `input` in one file are one group (the trainer repeats each prompt n times with
`interleave=True`). Token ids, log-probs, entropies and token lengths are not in the dump.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.json as pa_json

from workbench.errors import DataError
from workbench.integrations.common import Problems, StepFile, as_text, read_json_lines, text_column
from workbench.tasks.rewards import extra_terms

name = "verl"

_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
REQUIRED = {"input": "str", "output": "str", "score": "number"}
OPTIONAL = {"step": "int", "acc": "any", "reward": "number"}
RESERVED_NUMBERS = {"score", "step", "reward"}
"""Numeric keys that are not reward terms; every other numeric key (not a bool) imports as one."""


def _files(folder: Path, split: str) -> list[StepFile]:
    if folder.is_file():
        m = _STEP_FILE.match(folder.name)
        if not m:
            raise DataError(f"{folder}: a verl dump file is named <step>.jsonl")
        return [StepFile(int(m.group(1)), folder, split)]
    out = []
    for p in folder.iterdir():
        m = _STEP_FILE.match(p.name)
        if m and p.is_file():
            out.append(StepFile(int(m.group(1)), p, split))
    return out


def discover(path: Path, options: dict[str, Any]) -> list[StepFile]:
    """`{step}.jsonl` files of the rollout folder, and of `options["val_dir"]` as eval files."""
    files = _files(path, "train")
    val = options.get("val_dir")
    if val:
        vdir = Path(val)
        if not vdir.exists():
            raise DataError(f"{val}: no such validation folder")
        files += _files(vdir, "eval")
    return files


def looks_complete(f: StepFile) -> bool:
    """verl writes the whole file in one call ending with a newline."""
    return ends_with_newline(f.path)


def ends_with_newline(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            if fh.tell() == 0:
                return False
            fh.seek(-1, 2)
            return fh.read(1) == b"\n"
    except OSError:
        return False


def read(f: StepFile, problems: Problems, options: dict[str, Any]) -> pl.DataFrame:
    """The file as the normalised frame (see common.py). Fast path: polars reads the whole file and
    the columns are checked at once; any doubt (a parse error, a missing key, a wrong type, a null)
    re-reads the file line by line to name the first bad `file:line` and key (or skip bad lines)."""
    frame = _fast(f)
    if frame is None:
        frame = _slow(f, problems)
    if frame.height == 0:
        return frame
    out = {"step": pl.Series([f.step] * frame.height, dtype=pl.Int64),
           "prompt": frame["input"], "response": frame["output"], "reward": frame["score"].cast(pl.Float64)}
    if "gts" in frame.columns:
        out["answer"] = text_column(frame, "gts")
    if "acc" in frame.columns:
        out["correct"] = _acc(frame["acc"])
    out.update(extra_terms(frame, RESERVED_NUMBERS))  # numeric reward-extra keys -> reward terms
    return pl.DataFrame(out)


def _acc(col: pl.Series) -> pl.Series:
    if col.dtype == pl.Boolean:
        return col
    if col.dtype.is_numeric():
        return col > 0
    return pl.Series("acc", [bool(v) if isinstance(v, (bool, int, float)) else None for v in col.to_list()],
                     dtype=pl.Boolean)


def _fast(f: StepFile) -> pl.DataFrame | None:
    try:  # pyarrow refuses a key whose type changes between lines (polars would coerce it silently)
        table = pa_json.read_json(f.path, read_options=pa_json.ReadOptions(block_size=1 << 26))
        frame = pl.from_arrow(table)
    except Exception:  # noqa: BLE001 (any parse failure: the slow path names the line)
        return None
    assert isinstance(frame, pl.DataFrame)
    if frame.height == 0:
        return None
    for key in REQUIRED:
        if key not in frame.columns or frame[key].null_count():
            return None
    if frame["input"].dtype != pl.Utf8 or frame["output"].dtype != pl.Utf8:
        return None
    if not frame["score"].dtype.is_numeric() or frame["score"].dtype == pl.Boolean:
        return None
    if "step" in frame.columns and not frame["step"].dtype.is_integer():
        return None
    return frame


def _slow(f: StepFile, problems: Problems) -> pl.DataFrame:
    rows = read_json_lines(f.path, REQUIRED, problems, OPTIONAL)
    if not rows:
        return pl.DataFrame()
    objs = [obj for _, obj in rows]
    frame = pl.DataFrame({"input": [o["input"] for o in objs], "output": [o["output"] for o in objs],
                          "score": [float(o["score"]) for o in objs]},
                         schema={"input": pl.Utf8, "output": pl.Utf8, "score": pl.Float64})
    if any("gts" in o for o in objs):
        frame = frame.with_columns(pl.Series("gts", [as_text(o.get("gts")) for o in objs], dtype=pl.Utf8))
    if any("acc" in o for o in objs):
        acc = [bool(o["acc"]) if isinstance(o.get("acc"), (bool, int, float)) else None for o in objs]
        frame = frame.with_columns(pl.Series("acc", acc, dtype=pl.Boolean))
    return frame.with_columns(**extra_terms(objs, RESERVED_NUMBERS))
