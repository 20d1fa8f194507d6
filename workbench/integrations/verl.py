"""verl rollout dumps: the folder of `trainer.rollout_data_dir` (training) and, as evals, the folder of
`trainer.validation_data_dir`. Both of verl's trainers write them through one writer,
`_write_generations` (volcengine/verl, now verl-project/verl): one `{global_steps}.jsonl` per step, opened
with "w" and written in one call; one JSON object per response with `input` (prompt text, decoded with
`skip_special_tokens=True`), `output` (response text), `gts` (the sample's `reward_model.ground_truth`;
null when the sample has none; absent in older verl), `score` (the sequence reward: the sum of the
token-level scores), `step`, plus every reward-extra key whose list has one value per response.

Two formats, told apart by the `uid` key:

- The v1 trainer (`verl/trainer/ppo/v1/trainer_base.py`, the default since verl 0.9:
  `trainer.use_v1: true` in `verl/trainer/config/ppo_trainer.yaml`). Training (`_log_rollout_data`):
  `input, output, gts, score, step, uid`, no reward extras, rows sorted by uid. The uid is
  `{prompt uid}_{session}_{output index}`: a group is the uid less its last two `_`-separated parts
  (a uuid4 per prompt, so two draws of one prompt text in a batch are two groups). Validation
  (`_validate`): adds `reward` (= the score; an int where the reward function returns ints), the
  reward function's extra keys (null where a sample lacks one) and `uid`; a multi-output session
  (several outputs of one agent loop, `_{index}`) has one line per output, all with the session's
  final score: an eval sample is a session (its last output), as verl's own metrics count it.
- The older `RayPPOTrainer._dump_generations` (`verl/trainer/ppo/ray_trainer.py`, deprecated with
  the v1 trainer): no uid; the reward extras (`acc`, `pred`, `request_id`, ...) in both dumps. Rows
  with the same `input` in one file are one group (the trainer repeats each prompt n times with
  `interleave=True`), so two draws of one prompt in a batch merge.

Correctness: the reward-extra `acc` where logged (verl's own verdict), else the run's rule (see
`workbench.correctness`). Numeric reward-extra keys (not bools) import as reward terms
(`rollouts.reward_terms`), e.g. DAPO's `overlong_reward`. Token ids, log-probs, entropies and token lengths are not in the dump.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.json as pa_json

from workbench.errors import DataError
from workbench.integrations.common import (
    Problems,
    StepFile,
    as_text,
    ends_with_newline,
    read_json_lines,
    text_column,
)
from workbench.tasks.rewards import extra_terms

name = "verl"

_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
REQUIRED = {"input": "str", "output": "str", "score": "number"}
OPTIONAL = {"step": "int", "acc": "any", "reward": "number", "uid": "str"}
RESERVED_NUMBERS = {"score", "step", "reward", "gts", "uid"}
"""Numeric keys that are not reward terms (a numeric ground truth is an answer); every other numeric key
(not a bool) imports as one."""
_GROUP = r"_[^_]*_[^_]*$"
"""A uid's last two `_`-separated parts: removed, the prompt's group (verl splits keys with
`rsplit("_", 2)` and uses a key of fewer parts whole)."""
_SESSION = r"(_[^_]*)_[^_]*$"
"""A uid's last part, kept `${1}` of the two: removed, the session (one rollout of the group)."""


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


def read(f: StepFile, problems: Problems, options: dict[str, Any]) -> pl.DataFrame:
    """The file as the normalised frame (see common.py). Fast path: polars reads the whole file and
    the columns are checked at once; any doubt (a parse error, a missing key, a wrong type, a null)
    re-reads the file line by line to name the first bad `file:line` and key (or skip bad lines)."""
    frame = _fast(f)
    if frame is None:
        frame = _slow(f, problems)
    if frame.height == 0:
        return frame
    if "uid" in frame.columns and frame["uid"].null_count() == frame.height:
        frame = frame.drop("uid")
    if "uid" in frame.columns and f.split == "eval":  # one sample per session: its last output
        frame = (frame.with_columns(pl.col("uid").str.replace(_SESSION, "${1}").alias("session"))
                 .unique("session", keep="last", maintain_order=True))
    out = {"step": pl.Series([f.step] * frame.height, dtype=pl.Int64),
           "prompt": frame["input"], "response": frame["output"], "reward": frame["score"].cast(pl.Float64)}
    if "uid" in frame.columns:  # the v1 trainer: the group is the uid less its last two parts
        out["group"] = frame["uid"].str.replace(_GROUP, "")
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


BLOCKS = (1 << 22, 1 << 26)
"""pyarrow parses a file in blocks, one thread per block: 4 MB blocks parse a step file of a few MB on
every core (1.5x faster than one 64 MB block, `workbench bench import`); a line longer than a block
is retried with 64 MB blocks before the line-by-line path."""


def _arrow(path: Path) -> Any:
    for i, size in enumerate(BLOCKS):
        try:  # pyarrow refuses a key whose type changes between lines (polars would coerce it silently)
            return pa_json.read_json(path, read_options=pa_json.ReadOptions(block_size=size))
        except Exception:  # noqa: BLE001 (any parse failure: the slow path names the line)
            if i == len(BLOCKS) - 1 or path.stat().st_size <= size:
                return None
    return None


def _fast(f: StepFile) -> pl.DataFrame | None:
    table = _arrow(f.path)
    if table is None:
        return None
    frame = pl.from_arrow(table)
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
    if "uid" in frame.columns and frame["uid"].dtype not in (pl.Utf8, pl.Null):
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
    if any(o.get("uid") is not None for o in objs):
        frame = frame.with_columns(pl.Series("uid", [o.get("uid") for o in objs], dtype=pl.Utf8))
    if any("acc" in o for o in objs):
        acc = [bool(o["acc"]) if isinstance(o.get("acc"), (bool, int, float)) else None for o in objs]
        frame = frame.with_columns(pl.Series("acc", acc, dtype=pl.Boolean))
    return frame.with_columns(**extra_terms(objs, RESERVED_NUMBERS))
