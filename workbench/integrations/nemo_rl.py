"""NeMo-RL GRPO logs: `train_data_step{N}.jsonl` and `val_data_step{N}.jsonl` of the logger's folder.

Written by `Logger.log_batched_dict_as_jsonl` in `nemo_rl/utils/logger.py` (NVIDIA-NeMo/RL): the file is
opened with "w"; the batch is cut into micro-batches of ONE sample, tensors turned into lists, and each
line is `{**sample, "idx": i}`, so every value is wrapped in a one-element list (`"rewards": [1.0]`,
`"token_ids": [[...]]`) and `idx` is the line number in the file (not a prompt id).

What a sample holds: `run_multi_turn_rollout` (`nemo_rl/experience/rollouts.py`) starts from the
prompt's messages (the chat template applied) and, per turn, appends the assistant's message (its
tokens generated, with `generation_logprobs`) and then the environment's observation (role
"environment", e.g. the math environment's "Environment: correct"), the last turn included.

`grpo_train` (`nemo_rl/algorithms/grpo.py`) marks the generated assistant tokens with
`token_loss_mask` 1 (`add_grpo_token_loss_masks_and_generation_logprobs`), flattens each message log
(`batched_message_log_to_flat_message`, `nemo_rl/data/llm_message_utils.py`: token ids concatenated
and right-padded, `content` = one string per message, roles dropped) and logs `content`, `rewards`
(with dynamic sampling: the unfiltered total reward), `input_lengths` (unpadded length), `token_ids`,
`token_loss_mask`, `sample_loss_mask`, `advantages` (per token), `generation_logprobs`,
`prev_logprobs` (per token). `validate` logs `content` (each message log as {role, content}
messages) and `rewards`.

How a line is split (`split_messages`): the number of generated turns T is the number of runs of 1 in
`token_loss_mask`; the last 2T messages of `content` are (assistant, observation) pairs and the ones
before them the prompt (a prompt that holds earlier assistant messages keeps them: they were not
generated, mask 0). The response is the assistant turns (their texts joined; their tokens the
mask-1 positions below `input_lengths`, with their `generation_logprobs`); the observations are
stored apart (`rollouts.observations`), and the sample is also stored as an episode
(`message_log_episode`): the prompt, each assistant turn and each observation (role `tool`) with their
tokens cut at the loss mask's runs, so the turns' tokens laid end to end are the logged `token_ids`
up to `input_lengths`. Validation lines carry roles: the prompt is the messages
before the first assistant message. The batch is `repeat_interleave`d by `num_generations_per_prompt`,
so rows with the same prompt text in one file are one group.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl

from workbench.episodes import Episode, Turn, episode_rows
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


def _messages(content: Any) -> list[tuple[str | None, str]] | None:
    """(role, text) of each message of a `content` value: a list of strings (training: the flattened
    message log keeps no roles, role None), a list of {role, content} messages (validation), or one
    string."""
    if isinstance(content, str):
        return [(None, content)]
    if isinstance(content, list):
        out: list[tuple[str | None, str]] = []
        for m in content:
            if isinstance(m, str):
                out.append((None, m))
            elif isinstance(m, dict) and isinstance(m.get("content"), str):
                out.append((m.get("role") if isinstance(m.get("role"), str) else None, m["content"]))
            else:
                return None
        return out
    return None


def _turns(mask: list[Any], length: int) -> int:
    """Generated turns: runs of 1 in the loss mask (each assistant turn's tokens are contiguous and an
    environment observation's tokens, mask 0, come between two turns)."""
    runs, prev = 0, False
    for i in range(length):
        on = bool(mask[i])
        runs += on and not prev
        prev = on
    return runs


def split_messages(msgs: list[tuple[str | None, str]], turns: int | None) -> tuple[str, list[str], list[str]]:
    """(prompt, assistant turns, observations) of one sample's messages.

    NeMo-RL's rollout (`run_multi_turn_rollout`) appends to the prompt's messages an assistant
    message per turn and, after each turn (the last one too), the environment's observation. With
    roles (validation), the prompt is the messages before the first assistant message; after it,
    assistant messages are turns and the others observations. Without roles (training), `turns`
    (from the loss mask) says how many (assistant, observation) pairs end the list; without a mask,
    one turn when there are at least three messages, else [prompt, response]."""
    roles = [r for r, _ in msgs]
    if "assistant" in roles:
        first = roles.index("assistant")
        rest = msgs[first:]
        return ("".join(t for _, t in msgs[:first]), [t for r, t in rest if r == "assistant"],
                [t for r, t in rest if r != "assistant"])
    if turns is None:
        turns = 1 if len(msgs) >= 3 else 0
    if turns == 0 or len(msgs) < 2 * turns + 1:
        if len(msgs) == 1:
            return msgs[0][1], [], []
        return "".join(t for _, t in msgs[:-1]), [msgs[-1][1]], []
    start = len(msgs) - 2 * turns
    tail = [t for _, t in msgs[start:]]
    return "".join(t for _, t in msgs[:start]), tail[0::2], tail[1::2]


def _row(obj: dict[str, Any], where: str, problems: Problems) -> dict[str, Any] | None:
    msgs = _messages(_one(obj, "content"))
    if not msgs:
        problems.bad(where, "content", "expected a list of message texts (or of {role, content} messages)")
        return None
    reward = _one(obj, "rewards")
    if not kind_ok(reward, "number"):
        problems.bad(where, "rewards", f"expected [number], got {obj.get('rewards')!r:.60}")
        return None
    row: dict[str, Any] = {"reward": float(reward)}
    turns = None
    ids, mask, length = _one(obj, "token_ids"), _one(obj, "token_loss_mask"), _one(obj, "input_lengths")
    if ids is not None and mask is not None:
        if not _tokens(row, obj, ids, mask, length, where, problems):
            return None
        turns = _turns(mask, row.pop("_length"))
    else:
        adv = _one(obj, "advantages")
        if kind_ok(adv, "number"):
            row["advantage"] = float(adv)
    prompt, responses, observations = split_messages(msgs, turns)
    row.update(prompt=prompt, response="".join(responses))
    if observations:
        row["observations"] = observations
    if turns and len(responses) == turns:
        ep = message_log_episode(prompt, responses, observations, ids, mask, length if length is not None else len(ids),
                                 _one(obj, "generation_logprobs"))
        if ep is not None:
            turn_rows, call_rows = episode_rows(ep)
            row.update(episode=json.dumps([turn_rows, call_rows]), **ep.summary())
    return row


def message_log_episode(prompt: str, responses: list[str], observations: list[str], ids: list[Any],
                        mask: list[Any], length: int, logprobs: Any) -> Episode | None:
    """A training sample's message log as an Episode: the prompt as a user turn (the tokens before the
    first generated one), then per turn the assistant message (a run of loss-mask 1: its tokens and
    generation log-probs) and the environment's observation as a tool turn (the mask-0 tokens up to the
    next run, or to `input_lengths`). None when the texts and the mask's runs do not pair up."""
    runs: list[list[int]] = []
    for i in range(length):
        if mask[i] and (i == 0 or not mask[i - 1]):
            runs.append([i, i + 1])
        elif mask[i]:
            runs[-1][1] = i + 1
    if len(runs) != len(responses) or len(observations) not in (len(runs), len(runs) - 1):
        return None
    ends = [r[0] for r in runs[1:]] + [length]
    if len(observations) < len(runs) and runs[-1][1] != length:
        return None
    lp = logprobs if isinstance(logprobs, list) and len(logprobs) >= length else None
    turns = [Turn("user", prompt, token_ids=[int(t) for t in ids[:runs[0][0]]])]
    for k, ((a, b), end) in enumerate(zip(runs, ends)):
        turns.append(Turn("assistant", responses[k], token_ids=[int(t) for t in ids[a:b]],
                          logprobs=None if lp is None else [float(x) for x in lp[a:b]]))
        if k < len(observations):
            turns.append(Turn("tool", observations[k], token_ids=[int(t) for t in ids[b:end]]))
    return Episode(turns)


def _tokens(row: dict[str, Any], obj: dict[str, Any], ids: Any, mask: Any, length: Any, where: str,
            problems: Problems) -> bool:
    """The response's token ids (positions < input_lengths the loss mask marks), their behaviour
    log-probs and the first response token's advantage into `row`; False after reporting a problem."""
    for key, v in (("token_ids", ids), ("token_loss_mask", mask)):
        if not isinstance(v, list) or not all(kind_ok(x, "number") for x in v):
            problems.bad(where, key, "expected [[numbers]]")
            return False
    if length is None:
        length = len(ids)
    if not kind_ok(length, "int") or not 0 <= length <= len(ids) or len(mask) < length:
        problems.bad(where, "input_lengths", f"{length!r} does not fit token_ids of length {len(ids)}")
        return False
    pos = [i for i in range(length) if mask[i]]
    row.update(token_ids=[int(ids[i]) for i in pos], length=len(pos), _length=length)
    lp = _one(obj, "generation_logprobs")
    if isinstance(lp, list) and len(lp) >= length:
        row["token_logprobs"] = [float(lp[i]) for i in pos]
    adv = _one(obj, "advantages")
    if isinstance(adv, list) and pos and len(adv) > pos[0]:
        row["advantage"] = float(adv[pos[0]])
    elif kind_ok(adv, "number"):
        row["advantage"] = float(adv)
    return True


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
                "token_logprobs": pl.List(pl.Float64), "observations": pl.List(pl.Utf8), "episode": pl.Utf8,
                "turns": pl.Int32, "tool_calls": pl.Int32, "tool_errors": pl.Int32, "tool_tokens": pl.Int32}
    schema.update({k: t for k, t in optional.items() if any(k in r for r in rows)})
    frame = pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=schema)
    return frame.with_columns(step=pl.lit(f.step, pl.Int64))
