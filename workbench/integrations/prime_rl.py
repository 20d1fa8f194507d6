"""prime-rl runs: the file monitor's `rollouts/step_N/{train,eval}/effective/traces.jsonl` and `metrics.jsonl`.

    workbench import prime-rl RUN_DIR [--follow]

Written by `FileMonitor` (`prime_rl/monitors/file.py`, repository PrimeIntellect-ai/prime-rl): each line
of a traces file is one verifiers episode, `vf.Episode.to_record()` (`verifiers/v1/episode.py`: the
model dumped as JSON, raw tensor fields of the nodes left out, None values left out), appended as the
orchestrator logs it: every completed episode into `step_N/<kind>/all/` on arrival, the batch the
trainer is sent (train) or the finished eval batch into `step_N/<kind>/effective/`. `metrics.jsonl`
holds one JSON object per `monitors.log(metrics, step)` call: `{"step", "time", **metrics}`.

What becomes what (docs/import.md has the table): each trace of an episode is one rollout and one
episode of ours. Its message graph (`trace.nodes`, verifiers' `MessageNode`) becomes the turns in node
order: the node's message role and text, its token ids (the message's tokens plus its leading template
scaffold), its `mask` (True on sampled tokens) as the loss mask, its compact `logprobs` spread onto the
sampled positions (0.0 elsewhere, as verifiers' `Branch.logprobs` does; likewise the trainer's
`entropies` where annotated), and `parent` as the turn's
parent, so a trace with several leaves (branches) is a tree of turns. The leading unsampled nodes are
the prompt. A tool call (`AssistantMessage.tool_calls`) gets its result from the tool node answering its
id; verifiers keeps no error field, its harnesses return a failure as a result starting with
`error:`, which is recorded as a failed call (see `tool_error`). The reward is `trace.reward` (the
weighted sum of `rewards`), each named reward's unweighted score a reward term; the advantage is
prime-rl's scalar advantage (mean of the nonzero token advantages). The group is `episode.group.id`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl

from workbench.episodes import Episode, ToolCall, Turn, episode_rows
from workbench.errors import DataError
from workbench.integrations.common import Problems, StepFile, ends_with_newline, kind_ok, read_json_lines
from workbench.integrations.records import LOGGED
from workbench.tasks.rewards import FRAME_PREFIX

name = "prime-rl"

_STEP_DIR = re.compile(r"^step_(\d+)$")
_SPLITS = {"train": "train", "eval": "eval"}
REQUIRED = {"traces": "list"}
OPTIONAL = {"group": "any", "ok": "bool", "task": "any"}
ERROR_PREFIXES = (("error: unknown tool", "unknown_tool"), ("error: invalid json", "malformed"),
               ("error: tool arguments", "malformed"), ("error", "tool_error"))
"""A tool result's leading text -> the kind of failure it is recorded under (first match, case-insensitive)."""
METRICS_FILE = "metrics.jsonl"


def discover(path: Path, options: dict[str, Any]) -> list[StepFile]:
    """`rollouts/step_<N>/train/effective/traces.jsonl` (train) and `.../eval/effective/...` (eval) of the
    run folder (the folder holding `rollouts/`, or `rollouts/` itself)."""
    root = path / "rollouts" if (path / "rollouts").is_dir() else path
    if not root.is_dir():
        raise DataError(f"{path}: a prime-rl run folder holds rollouts/step_<N>/<kind>/effective/traces.jsonl")
    out = []
    for d in root.iterdir():
        m = _STEP_DIR.match(d.name)
        if not m:
            continue
        for kind, split in _SPLITS.items():
            f = d / kind / "effective" / "traces.jsonl"
            if f.is_file():
                out.append(StepFile(int(m.group(1)), f, split))
    return out


def _metrics_path(f: StepFile) -> Path:
    return f.path.parents[4] / METRICS_FILE


def looks_complete(f: StepFile) -> bool:
    """The file ends with a newline and `metrics.jsonl` holds a row of its step (the orchestrator logs a
    step's metrics after its effective traces)."""
    return ends_with_newline(f.path) and f.step in step_metrics(_metrics_path(f), Problems(True))


def step_metrics(path: Path, problems: Problems) -> dict[int, dict[str, float]]:
    """Step -> every numeric metric logged for it in `metrics.jsonl` (rows of one step merged, later
    rows winning); nested or non-numeric values are left out."""
    if not path.is_file():
        return {}
    out: dict[int, dict[str, float]] = {}
    for _lineno, obj in read_json_lines(path, {"step": "int"}, problems):
        row = out.setdefault(int(obj["step"]), {})
        row.update({k: float(v) for k, v in obj.items() if k not in ("step", "time") and kind_ok(v, "number")})
    return out


def _text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise DataError(f"expected text or a list of content parts, got {type(content).__name__}")


def tool_error(result: str) -> str | None:
    """The failure kind of a tool result, by verifiers' convention of returning `error: ...`."""
    head = result.lstrip().lower()
    return next((kind for prefix, kind in ERROR_PREFIXES if head.startswith(prefix)), None)


def _spread(mask: list[bool], values: list[float]) -> list[float]:
    it = iter(values)
    return [float(next(it, 0.0)) if m else 0.0 for m in mask]


def trace_episode(trace: dict[str, Any]) -> Episode:
    """One verifiers trace record as an Episode (DataError naming the node and field on bad input)."""
    nodes = trace.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise DataError("traces[].nodes: expected a non-empty list of message nodes")
    calls = {c["node"]: c for c in trace.get("calls") or [] if isinstance(c, dict) and c.get("node") is not None}
    start = (trace.get("timing") or {}).get("start")
    results = {n["message"].get("tool_call_id"): n["message"] for n in nodes
               if isinstance(n, dict) and isinstance(n.get("message"), dict) and n["message"].get("role") == "tool"}
    turns, prompt_turns, seen_sampled = [], 0, False
    for i, node in enumerate(nodes):
        where = f"traces[].nodes[{i}]"
        msg = node.get("message") if isinstance(node, dict) else None
        if not isinstance(msg, dict) or msg.get("role") not in ("system", "user", "assistant", "tool"):
            raise DataError(f"{where}.message: expected a message with role system, user, assistant or tool")
        try:
            text = _text(msg.get("content"))
        except DataError as exc:
            raise DataError(f"{where}.message.content: {exc}") from None
        ids, mask = node.get("token_ids") or [], node.get("mask") or []
        if len(mask) != len(ids):
            raise DataError(f"{where}.mask: {len(mask)} flags for {len(ids)} token_ids")
        parent = node.get("parent")
        turn = Turn(msg["role"], text, token_ids=[int(t) for t in ids], mask=[bool(m) for m in mask],
                    parent=-1 if parent is not None and parent == i - 1 else parent)
        if msg["role"] == "assistant" and ids:
            turn.logprobs = _spread(turn.mask or [], node.get("logprobs") or [])
            if node.get("entropies") is not None:
                turn.entropy = _spread(turn.mask or [], node["entropies"])
        call = calls.get(i)
        if call is not None:
            turn.finish_reason = call.get("finish_reason")
            span = call.get("time") or {}
            if span.get("end"):
                turn.seconds = max(0.0, float(span["end"]) - float(span.get("start", 0.0)))
                if start:
                    turn.started_s = max(0.0, float(span.get("start", 0.0)) - float(start))
        for tc in msg.get("tool_calls") or []:
            answer = results.get(tc.get("id"))
            result = _text(answer.get("content")) if answer else ""
            turn.tool_calls.append(ToolCall(str(tc.get("name", "")), str(tc.get("arguments", "")), result,
                                            tool_error(result) if answer else "unknown_tool"))
        seen_sampled = seen_sampled or bool(node.get("sampled"))
        prompt_turns += not seen_sampled
        turns.append(turn)
    return Episode(turns, prompt_turns=prompt_turns)


def _advantage(trace: dict[str, Any]) -> float | None:
    """prime-rl's `scalar_advantage`: the mean of the nonzero token advantages (0 if all are zero)."""
    values = [float(v) for n in trace["nodes"] for v in (n.get("advantages") or [])]
    if not any(n.get("advantages") is not None for n in trace["nodes"]):
        return None
    nonzero = [v for v in values if v != 0.0]
    return sum(nonzero) / len(nonzero) if nonzero else 0.0


def trace_row(trace: dict[str, Any], group: str | None) -> dict[str, Any]:
    """One trace as a row of the normalised frame, its episode's rows as JSON in `episode`."""
    ep = trace_episode(trace)
    rewards = trace.get("rewards") or {}
    if not isinstance(rewards, dict):
        raise DataError("traces[].rewards: expected {name: {score, weight}}")
    terms = {k: float(r["score"]) for k, r in rewards.items() if isinstance(r, dict) and kind_ok(r.get("score"), "number")}
    reward = sum(float(r["score"]) * float(r.get("weight", 1.0)) for k, r in rewards.items() if k in terms)
    sampled = [(tok, lp) for t in ep.response_turns if t.role == "assistant"
               for tok, m, lp in zip(t.token_ids, t.trained(), t.logprobs or [0.0] * len(t.token_ids)) if m]
    turns, calls = episode_rows(ep)
    row: dict[str, Any] = {
        "prompt": "\n".join(t.text for t in ep.turns[:ep.prompt_turns]),
        "response": "\n".join(t.text for t in ep.response_turns if t.role == "assistant"),
        "reward": reward, "advantage": _advantage(trace), "group": group,
        "token_ids": [tok for tok, _ in sampled], "length": len(sampled),
        "token_logprobs": [lp for _, lp in sampled] if any(t.logprobs for t in ep.turns) else None,
        "episode": json.dumps([turns, calls]), **ep.summary()}
    if terms:
        row["reward_terms"] = terms
    return row


def read(f: StepFile, problems: Problems, options: dict[str, Any]) -> pl.DataFrame:
    """The traces file as the normalised frame: one row per trace of every episode, in file order."""
    rows = []
    for lineno, obj in read_json_lines(f.path, REQUIRED, problems, OPTIONAL):
        group = obj.get("group", {}).get("id") if isinstance(obj.get("group"), dict) else None
        for k, trace in enumerate(obj["traces"]):
            try:
                if not isinstance(trace, dict):
                    raise DataError(f"traces[{k}]: expected a trace object")
                rows.append(trace_row(trace, f"{group or obj.get('id', lineno)}"))
            except DataError as exc:
                problems.bad(f"{f.path}:{lineno}", "traces", str(exc).replace("traces[]", f"traces[{k}]"))
    if not rows:
        return pl.DataFrame()
    schema: dict[str, Any] = {"prompt": pl.Utf8, "response": pl.Utf8, "reward": pl.Float64, "advantage": pl.Float64,
                              "group": pl.Utf8, "token_ids": pl.List(pl.Int64), "length": pl.Int64,
                              "token_logprobs": pl.List(pl.Float64), "episode": pl.Utf8, "turns": pl.Int32,
                              "tool_calls": pl.Int32, "tool_errors": pl.Int32, "tool_tokens": pl.Int32}
    if any("reward_terms" in r for r in rows):
        names = sorted({k for r in rows for k in r.get("reward_terms", {})})
        schema.update({FRAME_PREFIX + n: pl.Float64 for n in names})
        for r in rows:
            r.update({FRAME_PREFIX + n: v for n, v in r.pop("reward_terms", {}).items()})
    frame = pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=schema)
    if frame["advantage"].null_count() == frame.height:
        frame = frame.drop("advantage")
    if frame["token_logprobs"].null_count():
        frame = frame.drop("token_logprobs")
    frame = frame.with_columns(step=pl.lit(f.step, pl.Int64))
    if f.split == "train":
        frame = frame.with_columns(**{f"{LOGGED}{k}": pl.lit(v) for k, v in
                                      step_metrics(_metrics_path(f), problems).get(f.step, {}).items()})
    return frame
