"""NeMo-RL GRPO logs: `train_data_step{N}.jsonl` and `val_data_step{N}.jsonl` of the logger's folder.

Written by `Logger.log_batched_dict_as_jsonl` in `nemo_rl/utils/logger.py` (NVIDIA/NeMo-RL): the file is
opened with "w"; the batch is cut into micro-batches of ONE sample, tensors turned into lists, and each
line is `{**sample, "idx": i}`, so every value is wrapped in a one-element list (`"rewards": [1.0]`,
`"token_ids": [[...]]`) and `idx` is the line number in the file (not a prompt id).

`grpo_train` in `nemo_rl/algorithms/grpo.py` logs, per step, `content` (the flattened message log:
one string per message, e.g. [prompt, response]), `rewards` (one scalar per sample), `advantages`
(per token in recent versions, one scalar in older ones), `generation_logprobs` and `prev_logprobs`
(per token), `token_ids` (prompt + response, right-padded to the batch's longest), `token_loss_mask`
(1 on generated tokens), `sample_loss_mask`, `input_lengths` (unpadded length) and, with dynamic
sampling, `filtered_rewards`. `validate` logs `content` (the message logs: lists of {role, content})
and `rewards`.

How a row is split: the response tokens are `token_ids[:input_lengths]` where `token_loss_mask` is 1
(their behaviour log-probs the same positions of `generation_logprobs`); the response text is the last
message, the prompt text the messages before it. The batch is `repeat_interleave`d by
`num_generations_per_prompt`, so rows with the same prompt text in one file are one group.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl

from workbench.errors import DataError
from workbench.integrations.common import Problems, StepFile, ends_with_newline, kind_ok, read_json_lines

name = "nemo-rl"

_STEP_FILE = re.compile(r"^(train|val)_data_step(\d+)\.jsonl$")
REQUIRED = {"content": "list", "rewards": "list"}
OPTIONAL = {"advantages": "list", "generation_logprobs": "list", "token_ids": "list", "token_loss_mask": "list",
            "input_lengths": "list"}


def discover(path: Path, options: dict[str, Any]) -> list[StepFile]:
    """`train_data_step<N>.jsonl` (train) and `val_data_step<N>.jsonl` (eval) files of the folder."""
    files = [path] if path.is_file() else [p for p in path.iterdir() if p.is_file()]
    out = []
    for p in files:
        m = _STEP_FILE.match(p.name)
        if m:
            out.append(StepFile(int(m.group(2)), p, "train" if m.group(1) == "train" else "eval"))
        elif path.is_file():
            raise DataError(f"{p}: a NeMo-RL log file is named train_data_step<N>.jsonl or val_data_step<N>.jsonl")
    return out


def looks_complete(f: StepFile) -> bool:
    return ends_with_newline(f.path)


def _one(obj: dict[str, Any], key: str) -> Any:
    """Unwrap the one-element list the logger wraps every value in."""
    v = obj.get(key)
    if isinstance(v, list) and len(v) == 1:
        return v[0]
    return v


def _messages(content: Any) -> list[str] | None:
    """The message texts of a `content` value: a string, a list of strings, or a list of messages."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        out = []
        for m in content:
            if isinstance(m, str):
                out.append(m)
            elif isinstance(m, dict) and isinstance(m.get("content"), str):
                out.append(m["content"])
            else:
                return None
        return out
    return None


def _row(obj: dict[str, Any], where: str, problems: Problems) -> dict[str, Any] | None:
    msgs = _messages(_one(obj, "content"))
    if not msgs:
        problems.bad(where, "content", "expected a list of message texts (or of {role, content} messages)")
        return None
    reward = _one(obj, "rewards")
    if not kind_ok(reward, "number"):
        problems.bad(where, "rewards", f"expected [number], got {obj.get('rewards')!r:.60}")
        return None
    row: dict[str, Any] = {"prompt": "".join(msgs[:-1]) if len(msgs) > 1 else msgs[0],
                           "response": msgs[-1] if len(msgs) > 1 else "", "reward": float(reward)}
    ids, mask, length = _one(obj, "token_ids"), _one(obj, "token_loss_mask"), _one(obj, "input_lengths")
    if ids is not None and mask is not None:
        for key, v in (("token_ids", ids), ("token_loss_mask", mask)):
            if not isinstance(v, list) or not all(kind_ok(x, "number") for x in v):
                problems.bad(where, key, "expected [[numbers]]")
                return None
        if length is None:
            length = len(ids)
        if not kind_ok(length, "int") or not 0 <= length <= len(ids) or len(mask) < length:
            problems.bad(where, "input_lengths", f"{length!r} does not fit token_ids of length {len(ids)}")
            return None
        pos = [i for i in range(length) if mask[i]]
        row["token_ids"] = [int(ids[i]) for i in pos]
        row["length"] = len(pos)
        lp = _one(obj, "generation_logprobs")
        if isinstance(lp, list) and len(lp) >= length:
            row["token_logprobs"] = [float(lp[i]) for i in pos]
        adv = _one(obj, "advantages")
        if isinstance(adv, list) and pos and len(adv) > pos[0]:
            row["advantage"] = float(adv[pos[0]])
        elif kind_ok(adv, "number"):
            row["advantage"] = float(adv)
    else:
        adv = _one(obj, "advantages")
        if kind_ok(adv, "number"):
            row["advantage"] = float(adv)
    return row


def read(f: StepFile, problems: Problems, options: dict[str, Any]) -> pl.DataFrame:
    """The file as the normalised frame (see common.py), line by line (each line carries whole token
    arrays; the per-line work is list slicing)."""
    rows = []
    for lineno, obj in read_json_lines(f.path, REQUIRED, problems, OPTIONAL):
        row = _row(obj, f"{f.path}:{lineno}", problems)
        if row is not None:
            rows.append(row)
    if not rows:
        return pl.DataFrame()
    schema: dict[str, Any] = {"prompt": pl.Utf8, "response": pl.Utf8, "reward": pl.Float64}
    optional = {"advantage": pl.Float64, "length": pl.Int64, "token_ids": pl.List(pl.Int64),
                "token_logprobs": pl.List(pl.Float64)}
    schema.update({k: t for k, t in optional.items() if any(k in r for r in rows)})
    frame = pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=schema)
    return frame.with_columns(step=pl.lit(f.step, pl.Int64))
