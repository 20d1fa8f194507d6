"""Episodes: each row a multi-turn episode in which the model calls the tools of `[tools]`, reads their
results and goes on (rollout.shape = "episodes"; docs/episodes.md).

The shape runs `decode_episodes` (the in-process backend, each row's cache kept across turns; the
calls run in the sandbox of `workbench.tools`, at once, under `[tools.limits]`) and hands the engine
what every shape hands it, plus what only episodes have:

- the batch: each row's turns after the prompt laid end to end (assistant tokens, then the tool
  result's tokens as the model read them, ...), so the verifier reads the whole response and the
  update one sequence per row, with the prompt computed once per group as for any row;
- `loss_mask` [N, T]: True on the tokens the model sampled, False on every tool-result token (the
  loss never sees them; their log-prob and entropy columns are 0);
- `episodes`: the rows as `workbench.episodes.Episode`s, for the store's `turns` and `tool_calls`;
- its figures (`episodes/...` in the metric catalogue) through `take_metrics`.

A row that never calls a tool is a one-turn episode: its tokens, log-probs and entropy are what the
backend's `generate` would draw from the same seed (`decode_episodes`' contract), and its mask is its
whole length, so it trains exactly as an independent rollout.
"""

from __future__ import annotations

import json
import threading
import warnings
from typing import Any, Sequence

import numpy as np
import torch

from workbench.config.shapes import EpisodesConfig
from workbench.episodes import Episode, ToolCall
from workbench.errors import WorkbenchError
from workbench.faults import fault_point
from workbench.rollout.base import GenerationBatch, SamplingParams
from workbench.rollout.episode_decode import Branching, EpisodeBatch, EpisodeLimits, decode_episodes, to_episodes
from workbench.rollout.shapes.arpo import arpo_episodes
from workbench.rollout.shapes.common import Shaped, empty_columns
from workbench.tools import Sandbox, ToolResult, parse
from workbench.tools.config import ToolsConfig
from workbench.tools.parsers import SYNTAXES


class EpisodeShape:
    """Multi-turn episodes with tools (module docstring). Holds the sandbox's process from its first
    step until `close`."""

    name = "episodes"

    def __init__(self, cfg: EpisodesConfig, tools: ToolsConfig, tokenizer: Any, max_new_tokens: int) -> None:
        self.cfg, self.tools, self.tokenizer = cfg, tools, tokenizer
        self.limits = EpisodeLimits(turn_tokens=cfg.turn_tokens or max_new_tokens, max_turns=cfg.max_turns,
                                    max_tool_calls=tools.max_calls, max_model_tokens=cfg.max_model_tokens,
                                    max_total_tokens=cfg.max_total_tokens)
        self.syntax = SYNTAXES.get(tools.syntax)
        self.call_end_ids, self.ends_call = call_end(tokenizer, self.syntax.close)
        self._box: Sandbox | None = None
        self._box_lock = threading.Lock()
        self._backend: Any = None
        self._metrics: dict[str, float] = {}
        self.oversample = cfg.roc_oversample
        """GRPO-RoC: the producer samples this many times each grant and keeps the grant (1: off;
        `workbench.engine.episode_filter`)."""

    # -- the Shape protocol ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def take_metrics(self) -> dict[str, float]:
        out, self._metrics = self._metrics, {}
        for name in ("kept_correct", "sampled_correct"):  # GRPO-RoC: the error rate of what is trained on
            calls = out.pop(f"episodes/roc_{name}_calls", None)
            errors = out.pop(f"episodes/roc_{name}_errors", 0.0)
            if calls is not None:
                out[f"episodes/roc_{name}_tool_error_rate"] = errors / calls if calls else 0.0
        return out

    def note_metrics(self, metrics: dict[str, float]) -> None:
        """Add figures measured beside the shape (GRPO-RoC's counts) to the step's, summed over stages."""
        for k, v in metrics.items():
            self._metrics[k] = self._metrics.get(k, 0.0) + v

    def generate(self, model: torch.nn.Module, backend: Any, prompts: Sequence[Sequence[int]], keys: Sequence[int],
                 sampling: SamplingParams, seeds: Sequence[int] | None, version: int, pad_token_id: int, *,
                 generator: torch.Generator | None = None, feed: Any = None) -> Shaped:
        """One episode per prompt (module docstring)."""
        if feed is not None:
            raise WorkbenchError("rollout.shape = \"episodes\" runs in the synchronous loop only (no partial rollouts)")
        if not hasattr(backend, "_prefill"):
            raise WorkbenchError(f"rollout.shape = \"episodes\" needs the in-process backend (rollout.backend = "
                                 f"\"hf\"), not {type(backend).__name__}")
        self._backend = backend
        columns, branch, arpo = empty_columns(len(prompts), self.name), None, {}
        if (self.cfg.arpo_branch or self.cfg.aepo_branch) and seeds is not None:  # ARPO / AEPO (shapes/arpo.py)
            def run(ps, ss, branching):
                return self.run(backend, ps, sampling, seeds=ss, branching=branching)
            eb, columns["parent_idx"], columns["branch_at"], branch, arpo = arpo_episodes(
                run, prompts, seeds, self.cfg, len(self.tokenizer))
        else:
            eb = self.run(backend, prompts, sampling, seeds=seeds, generator=generator)
        episodes = self.episodes(eb, prompts)
        batch, mask = flatten(eb, pad_token_id)
        self._add_metrics(episodes, eb)
        self.note_metrics(arpo)
        return Shaped(batch, columns, loss_mask=mask, episodes=episodes,
                      finish_reasons=list(eb.finish_reasons), branch=branch)

    def generate_flat(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *,
                      generator: torch.Generator | None = None) -> GenerationBatch:
        """Episodes as a backend's GenerationBatch (each row's turns end to end): what evaluation
        samples, with the tools, under the backend `bind` set (the run's)."""
        if self._backend is None:
            raise WorkbenchError("EpisodeShape.generate_flat before a backend was bound (bind)")
        # one stream per row, drawn from `generator`: a row's tokens never depend on how long another
        # row's tool took (a shared generator's draws would follow the rows' order of reaching it)
        seeds = (torch.randint(0, 2**31 - 1, (len(prompts),), generator=generator, device=generator.device).tolist()
                 if generator is not None else None)
        return flatten(self.run(self._backend, prompts, sampling, seeds=seeds, generator=None if seeds else generator),
                       self._backend.pad_token_id)[0]

    def bind(self, backend: Any) -> "EpisodeShape":
        """The backend `generate_flat` samples with (the run's in-process backend)."""
        self._backend = backend
        return self

    # -- parts -----------------------------------------------------------------------------------------
    def run(self, backend: Any, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *,
            seeds: Sequence[int] | None = None, generator: torch.Generator | None = None,
            branching: Branching | None = None) -> EpisodeBatch:
        """`decode_episodes` with this run's tools and limits (evaluation calls it too)."""
        return decode_episodes(backend, prompts, sampling, limits=self.limits, call_end_ids=self.call_end_ids,
                               ends_call=self.ends_call, run_tool=self.run_tool, result_tokens=self.result_tokens,
                               seeds=seeds, generator=generator, max_workers=self.tools.parallel,
                               branching=branching)

    def episodes(self, eb: EpisodeBatch, prompts: Sequence[Sequence[int]]) -> list[Episode]:
        texts = self.tokenizer.batch_decode([list(p) for p in prompts], skip_special_tokens=True)
        return to_episodes(eb, texts, prompts, lambda ids: self.tokenizer.decode(ids, skip_special_tokens=False))

    def run_tool(self, text: str) -> ToolCall:
        """The call that ends `text` (an assistant turn), run in the sandbox under `[tools.limits]`;
        never raises: a call that cannot run is an error result the model reads."""
        cut = self.tools.limits.max_result_chars
        parsed = parse(text, self.syntax, self.tools.enabled)
        arguments = (str(parsed.arguments.get("expression")) if self.syntax.name == "calc" and parsed.kind == "call"
                     else json.dumps(parsed.arguments) if parsed.kind == "call" else text[max(parsed.start, 0):])
        if parsed.kind != "call":
            res = parsed.failure(cut) or ToolResult.failure("malformed", "no call in the turn", max_chars=cut)
            return ToolCall(parsed.name or "?", arguments, res.text, error=res.kind, seconds=0.0)
        res = self.box.call(parsed.name or "", parsed.arguments, self.tools.limits)
        fault_point("tool")
        return ToolCall(parsed.name or "", arguments, res.text, error=res.kind if res.error else None,
                        seconds=res.seconds, truncated=res.truncated)

    def result_tokens(self, call: ToolCall) -> list[int]:
        """The tokens the model reads after its call: the syntax's result inside `tools.result_template`
        (a chat model's tool turn, its template tokens included; none of it is trained on)."""
        res = ToolResult(call.result, error=call.error is not None, kind=call.error or "ok")
        text = self.tools.result_text(self.syntax.format_result(res))
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @property
    def box(self) -> Sandbox:
        """The run's sandbox, started by the first call (the calls of a batch run on a thread pool: one start)."""
        with self._box_lock:
            if self._box is None:
                self._box = Sandbox(self.tools.limits, parallel=self.tools.parallel)
            return self._box

    def close(self) -> None:
        if self._box is not None:
            self._box.close()
            self._box = None

    def _add_metrics(self, episodes: list[Episode], eb: EpisodeBatch) -> None:
        self._metrics = episode_metrics(episodes, eb)


def call_end(tokenizer: Any, close: str) -> tuple[list[int], Any]:
    """How decoding sees a call's closing tag: one token's id (the organism's `</calc>`), or a check of
    a turn's last tokens decoded (a tag of several tokens, SmolLM2's `</tool_call>`)."""
    ids = tokenizer(close, add_special_tokens=False)["input_ids"]
    if len(ids) == 1:
        return [int(ids[0])], None
    if tokenizer.decode(ids, skip_special_tokens=False) != close:
        warnings.warn(f"the model's tokenizer cannot write {close!r} (it reads back as "
                      f"{tokenizer.decode(ids, skip_special_tokens=False)!r}): no call can end, every episode is "
                      "one turn (tools.syntax, or a model with the tool's tokens)", stacklevel=2)
    tail = len(ids) + 2

    def ends(tokens: list[int]) -> bool:
        return tokenizer.decode(tokens[-tail:], skip_special_tokens=False).endswith(close)
    return [], ends


def flatten(eb: EpisodeBatch, pad_token_id: int) -> tuple[GenerationBatch, torch.Tensor]:
    """Each row's turns laid end to end as one GenerationBatch (tool tokens: log-prob and entropy 0),
    and the [N, T] mask of the tokens the model sampled."""
    rows = []
    for turns in eb.turns:
        toks, lps, ents, mask = [], [], [], []
        for t in turns:
            sampled = t.role == "assistant"
            toks += t.tokens
            lps += t.logprobs if sampled else [0.0] * len(t.tokens)
            ents += t.entropy if sampled else [0.0] * len(t.tokens)
            mask += [sampled] * len(t.tokens)
        rows.append((toks, lps, ents, mask))
    n, width = len(rows), max((len(r[0]) for r in rows), default=0)
    tokens = torch.full((n, width), pad_token_id, dtype=torch.long)
    logprobs = torch.zeros((n, width), dtype=torch.float32)
    entropy = torch.zeros((n, width), dtype=torch.float32)
    loss_mask = torch.zeros((n, width), dtype=torch.bool)
    for i, (toks, lps, ents, mask) in enumerate(rows):
        k = len(toks)
        tokens[i, :k] = torch.as_tensor(toks, dtype=torch.long)
        logprobs[i, :k] = torch.as_tensor(lps, dtype=torch.float32)
        entropy[i, :k] = torch.as_tensor(ents, dtype=torch.float32)
        loss_mask[i, :k] = torch.as_tensor(mask, dtype=torch.bool)
    batch = GenerationBatch(tokens=tokens, logprobs=logprobs, entropy=entropy,
                            lengths=torch.as_tensor([len(r[0]) for r in rows], dtype=torch.long),
                            finished=torch.as_tensor([f == "stop" for f in eb.finish_reasons], dtype=torch.bool),
                            gen_time_s=eb.gen_time_s)
    return batch, loss_mask


AFTER_TOOL_TOKENS = 10
"""ARPO's window: the entropy of this many tokens after a tool result against the first turn's."""


def episode_metrics(episodes: list[Episode], eb: EpisodeBatch) -> dict[str, float]:
    """The step's `episodes/...` figures (docs/metrics.md)."""
    n = len(episodes)
    if not n:
        return {}
    calls = [c for ep in episodes for c in ep.tool_calls]
    model = np.array([ep.model_tokens for ep in episodes], dtype=float)
    tool = np.array([ep.tool_tokens for ep in episodes], dtype=float)
    out = {
        "episodes/turns": float(np.mean([sum(t.role == "assistant" for t in ep.turns) for ep in episodes])),
        "episodes/tool_calls": len(calls) / n,
        "episodes/call_rate": float(np.mean([len(ep.tool_calls) > 0 for ep in episodes])),
        "episodes/tool_error_rate": (float(np.mean([c.error is not None for c in calls])) if calls else 0.0),
        "episodes/tool_s": float(sum(c.seconds for c in calls)),
        "episodes/tool_wait_s": float(eb.tool_time_s),
        "episodes/model_tokens": float(model.mean()),
        "episodes/tool_tokens": float(tool.mean()),
        "episodes/turn_limit_rate": float(np.mean([r == "turns" for r in eb.finish_reasons])),
    }
    deltas = entropy_deltas(episodes, AFTER_TOOL_TOKENS)
    if deltas:
        out["episodes/entropy_after_tool_delta"] = float(np.median(deltas))
    return out


def entropy_deltas(episodes: list[Episode], k: int) -> list[float]:
    """Per assistant turn that follows a tool result: the mean entropy of its first `k` tokens minus the
    mean of the episode's first assistant turn's first `k` (ARPO's observation; nats)."""
    out = []
    for ep in episodes:
        turns = ep.response_turns
        first = next((t for t in turns if t.role == "assistant" and t.entropy), None)
        if first is None:
            continue
        base = float(np.mean(first.entropy[:k]))
        for prev, t in zip(turns, turns[1:]):
            if prev.role == "tool" and t.role == "assistant" and t.entropy:
                out.append(float(np.mean(t.entropy[:k])) - base)
    return out
