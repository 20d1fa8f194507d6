"""Multi-turn decoding with tool calls, in process: rows of a batch pause at a tool call, the tools run in
parallel, the results are fed back and decoding resumes, each row keeping its key/value cache across turns.

How it works (one `torch.inference_mode` loop over a `DynamicCache`, as `HFBackend.decode`):
1. The prompts are prefilled once (a prompt asked for several times is prefilled once and copied out).
2. Every step feeds ONE token per row ([N, 1] forward), whatever the row is doing:
   - generating: the token it sampled from its last logits (recorded: log-prob, entropy);
   - feeding a tool result: the next token of the result's tokens (teacher-forced, not sampled, never
     trained on); after its last token the row's logits start the next assistant turn;
   - waiting for its tool, or done: a pad token with attention mask 0 (the column is invisible to it).
   Position ids advance only on real tokens, so a row sees exactly the positions it would see alone.
   Finished episodes leave the batch and its cache once at most `COMPACT_BELOW` of it is unfinished.
3. A sampled token in `call_end_ids` (or, for a closing tag of several tokens, a turn whose tokens
   `ends_call` accepts) ends the turn with a tool call: the turn's text goes to `run_tool`
   on a thread pool at once (the calculator's sandbox is a process of its own), and the row waits; the
   others go on decoding. When every live row waits, the loop blocks on the first result.
4. Sampling draws come from per-row streams indexed by the row's own count of sampled tokens
   (`GroupStreams` over the run's seeds), so a row's tokens never depend on how long another row's tool
   took: the same seed gives the same episode whatever the timing, and a one-turn episode draws exactly
   what `HFBackend.generate` draws.
5. Limits per episode (`EpisodeLimits`): tokens per turn, assistant turns, tool calls, model tokens,
   total tokens (model + tool); the first one reached ends the episode and names its finish reason.
6. With `branching` (ARPO, `Branching`; the episodes shape's `arpo_branch`, or `aepo_branch` with AEPO's rule):
   when a row has read a whole tool result and its group has slots left, the draw decides whether it branches; a branch is a copy of the
   row's turns and of its cache row (`batch_select_indices` on an index naming the row twice), diverging at
   the first token after the result, sampling from a stream of its own. The batch grows; `parents`,
   `branch_at` and `decisions` say how. Without it nothing of this runs.

The engine turns the result into `workbench.episodes.Episode` rows (`to_episodes`) and the loss mask
(sampled tokens only). vLLM and Ray run episodes by other means (not here; see docs/episodes.md).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor, wait, FIRST_COMPLETED
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from workbench.episodes import Episode, ToolCall, Turn
from workbench.errors import WorkbenchError
from workbench.rollout.base import SamplingParams
from workbench.rollout.branching import (BRANCH_STREAM, Branching, BranchTree, aepo_branches,  # noqa: F401
                                         branch_draw, branches, window_entropy)
from workbench.rollout.hf import GroupStreams, HFBackend, sample_tokens, sampling_logprobs, validate_sampling


@dataclass(frozen=True)
class EpisodeLimits:
    """What one episode may spend; the first limit reached ends it (its finish reason names it)."""

    turn_tokens: int = 16
    """Tokens the model may sample in one assistant turn (finish reason `length`)."""
    max_turns: int = 4
    """Assistant turns (finish reason `turns`)."""
    max_tool_calls: int = 3
    """Tool calls; one more ends the episode (finish reason `tool_calls`) instead of running."""
    max_model_tokens: int = 64
    """Tokens the model samples over the whole episode (finish reason `model_tokens`)."""
    max_total_tokens: int = 128
    """Model tokens plus tool-result tokens (finish reason `total_tokens`)."""

    def __post_init__(self) -> None:
        for name in ("turn_tokens", "max_turns", "max_model_tokens", "max_total_tokens"):
            if int(getattr(self, name)) < 1:
                raise WorkbenchError(f"episodes.{name} must be >= 1, got {getattr(self, name)}")
        if int(self.max_tool_calls) < 0:
            raise WorkbenchError(f"episodes.max_tool_calls must be >= 0, got {self.max_tool_calls}")


@dataclass
class RowTurn:
    """One turn of one row as decoded: sampled tokens (assistant) or fed tokens (tool)."""

    role: str
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    started_s: float = 0.0
    seconds: float = 0.0
    waited_s: float = 0.0
    finish_reason: str | None = None
    call: ToolCall | None = None
    result_s: float = 0.0
    """Tool turns: seconds from the call to its result reaching the loop (what the tool added to the
    episode); `seconds` runs on to the end of feeding the result, as the time lane shows it."""


@dataclass
class EpisodeBatch:
    """What `decode_episodes` returns: per row, its turns after the prompt and why the episode ended."""

    turns: list[list[RowTurn]]
    finish_reasons: list[str]
    gen_time_s: float
    tool_time_s: float
    """Wall seconds the loop spent blocked on tools with no row left to decode."""
    parents: list[int] = field(default_factory=list)
    """ARPO branching: each row's parent row (-1: a root, sampled whole); empty without branching."""
    branch_at: list[int] = field(default_factory=list)
    """ARPO branching: the response position (tokens after the prompt) a branch starts at (-1: a root)."""
    decisions: list[tuple[float, float, float, float] | None] = field(default_factory=list)
    """ARPO branching: per branch (entropy of the first turn, entropy of the turn before the branch
    point, the draw u, AEPO's consecutive rounds c: NaN under ARPO's rule); None for a root."""
    draws: int = 0
    """ARPO branching: branch draws made (after every tool result while the group had slots left)."""

    @property
    def model_tokens(self) -> list[int]:
        return [sum(len(t.tokens) for t in row if t.role == "assistant") for row in self.turns]


ToolRunner = Callable[[str], ToolCall]
"""Runs the call that ends an assistant turn's text (parsing included); never raises: a failure is a
ToolCall with its `error` set, which the model sees as the result."""
ResultTokens = Callable[[ToolCall], list[int]]
"""The tokens of a tool result as the model reads them (the chat template's tool turn)."""


def _uniform_table(seeds: Sequence[int] | None, n: int, steps: int) -> torch.Tensor | None:
    if seeds is None:
        return None
    streams = GroupStreams(seeds)
    return torch.stack([streams.draw(k) for k in range(steps)]) if steps else torch.zeros((0, n))


def decode_episodes(backend: HFBackend, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *,
                    limits: EpisodeLimits, call_end_ids: Sequence[int], run_tool: ToolRunner,
                    result_tokens: ResultTokens, seeds: Sequence[int] | None = None,
                    generator: torch.Generator | None = None, max_workers: int = 8,
                    ends_call: Callable[[list[int]], bool] | None = None,
                    branching: "Branching | None" = None) -> EpisodeBatch:
    """Sample one episode per prompt (token ids, BOS included); see the module docstring. With
    `branching` (ARPO, seeds required) rows branch after tool results and the batch grows."""
    validate_sampling(sampling)
    if seeds is not None and len(seeds) != len(prompts):
        raise WorkbenchError(f"decode_episodes: {len(seeds)} seeds for {len(prompts)} prompts (one per prompt)")
    model = backend.model
    was_training = model.training
    model.eval()
    start = time.perf_counter()
    try:
        with torch.inference_mode(), ThreadPoolExecutor(max_workers=max_workers) as pool:
            loop = _Loop(backend, prompts, sampling, limits, set(int(i) for i in call_end_ids), run_tool,
                         result_tokens, _uniform_table(seeds, len(prompts), limits.max_model_tokens), generator, pool)
            loop.ends_call = ends_call
            if branching is not None:
                if seeds is None:
                    raise WorkbenchError("decode_episodes: ARPO branching needs the rows' seeds")
                loop.tree = BranchTree(branching, list(seeds), loop)
            loop.run()
    finally:
        model.train(was_training)
    out = EpisodeBatch(turns=loop.turns, finish_reasons=loop.finish, gen_time_s=time.perf_counter() - start,
                       tool_time_s=loop.blocked_s)
    if loop.tree is not None:
        out.parents, out.branch_at, out.decisions = loop.tree.parents, loop.tree.branch_at, loop.tree.decisions
        out.draws = loop.tree.draws
    return out


GEN, FEED, WAIT, DONE = range(4)

COMPACT_BELOW = 0.85
"""Finished episodes leave the working batch (and its cache) once the unfinished share falls to this or
below, sooner than `HFBackend.decode`'s default (0.5): an episode's tail is longer (tool waits, results
fed a token a step), so a finished row kept in the batch costs more steps, and copying the cache out is
cheap beside them (measured: docs/episodes.md, decode speed). A backend's `compact_below = 0` still
keeps every row; a backend's higher share wins."""


class _Loop:
    """The state of one `decode_episodes` call (one row per episode)."""

    def __init__(self, backend, prompts, sampling, limits, call_end, run_tool, result_tokens, uniforms,
                 generator, pool) -> None:
        self.b, self.sampling, self.limits = backend, sampling, limits
        self.call_end, self.run_tool, self.result_tokens = call_end, run_tool, result_tokens
        self.uniforms, self.generator, self.pool = uniforms, generator, pool
        self.eos = set(backend.eos_token_ids)
        n = len(prompts)
        self.t0 = time.perf_counter()
        self.state = [GEN] * n
        self.turns: list[list[RowTurn]] = [[RowTurn("assistant", started_s=0.0)] for _ in range(n)]
        self.finish: list[str] = [""] * n
        self.sampled = [0] * n  # model tokens so far (also each row's index into its uniforms)
        self.fed = [0] * n  # tool-result tokens so far
        self.calls = [0] * n
        self.pending: dict[int, Future] = {}
        self.waiting_since: dict[int, float] = {}
        self.chunk: dict[int, list[int]] = {}
        self.feeding: list[int] = []  # output rows in FEED, in the order they got their results
        self.blocked_s = 0.0
        self.ends_call: Callable[[list[int]], bool] | None = None
        self.steps = 0  # decoding steps (forward passes) so far
        self.tree: BranchTree | None = None
        self.extra_uniforms: dict[int, torch.Tensor] = {}  # rows born by branching: their own streams
        state = backend._prefill(prompts)
        self.cache, self.logits, self.mask, self.next_pos = state.cache, state.logits, state.mask, state.next_pos
        self.rows = list(range(n))  # working-batch row -> output row

    def _now(self) -> float:
        return time.perf_counter() - self.t0

    def run(self) -> None:
        sink = getattr(self.b, "progress", None)  # the Live page's rollouts in flight (workbench.store.inflight)
        if sink is not None:
            sink.begin(len(self.state), self.limits.max_total_tokens)
        try:
            self._run(sink)
        finally:
            if sink is not None:
                sink.end(self.steps, *self._progress())

    def _progress(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each row's tokens so far (turns end to end), their count and whether the episode is over."""
        seqs = [[tok for turn in row for tok in turn.tokens] for row in self.turns]
        width = max((len(x) for x in seqs), default=0)
        tokens = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, x in enumerate(seqs):
            tokens[i, :len(x)] = torch.as_tensor(x, dtype=torch.long)
        return (tokens, torch.as_tensor([len(x) for x in seqs]),
                torch.as_tensor([s == DONE for s in self.state]))

    def _run(self, sink) -> None:  # noqa: ANN001 - a ProgressSink or None
        while True:
            self.steps += 1
            if sink is not None and getattr(sink, "due", lambda: True)():
                sink.tick(self.steps, *self._progress())
            live = [r for r in self.rows if self.state[r] != DONE]
            if not live:
                return
            self._collect_results(block=all(self.state[r] == WAIT for r in live))
            tokens = self._step_tokens()
            if all(self.state[r] == DONE for r in self.rows):
                return
            self._maybe_compact()
            if tokens:  # nothing to feed: every live row waits for its tool (blocks next round)
                self._forward(tokens)
            if self.tree is not None:
                self.tree.branch()

    # -- one step ------------------------------------------------------------------------------------
    def _step_tokens(self) -> dict[int, int]:
        """Sample for generating rows, take the next result token for feeding rows; {out row: token fed}."""
        rows, state = self.rows, self.state
        gen = [i for i, r in enumerate(rows) if state[r] == GEN]
        fed: dict[int, int] = {}
        if gen:
            out_rows = [rows[i] for i in gen]
            logp = sampling_logprobs(self.logits[gen] if len(gen) < len(rows) else self.logits, self.sampling)
            uniform = None
            if self.uniforms is not None:
                n0 = self.uniforms.shape[1]
                if not self.extra_uniforms:
                    uniform = self.uniforms[[self.sampled[r] for r in out_rows], out_rows]
                else:  # ARPO branches draw from their own streams
                    uniform = torch.stack([self.uniforms[self.sampled[r], r] if r < n0 else
                                           self.extra_uniforms[r][self.sampled[r]] for r in out_rows])
            tok = sample_tokens(logp, self.sampling.top_k == 1, self.generator, uniform)
            lp = logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
            ent = torch.special.entr(logp.exp()).sum(-1)
            # one conversion per step, not one per row and value
            for r, t, p, e in zip(out_rows, tok.tolist(), lp.tolist(), ent.tolist()):
                fed[r] = self._sampled(r, t, p, e)
        for r in sorted(self.feeding):  # in the working batch's order (rows only grow at its end)
            chunk = self.chunk[r]
            fed[r] = chunk.pop(0)
            self.fed[r] += 1
            self.turns[r][-1].tokens.append(fed[r])
            if not chunk:
                turn = self.turns[r][-1]
                turn.seconds = self._now() - turn.started_s
                if self.fed[r] + self.sampled[r] >= self.limits.max_total_tokens:
                    self._end(r, "total_tokens")
                else:
                    self.state[r] = GEN
                    self.turns[r].append(RowTurn("assistant", started_s=self._now()))
                    if self.tree is not None:  # ARPO: a branch point, decided after this step's forward
                        self.tree.points.append(r)
        self.feeding = [r for r in self.feeding if state[r] == FEED]
        return {r: t for r, t in fed.items() if t is not None}

    def _sampled(self, r: int, tok: int, lp: float, ent: float) -> int | None:
        """Record row r's sampled token and move its state; returns the token to feed (None: none)."""
        turn, lim = self.turns[r][-1], self.limits
        turn.tokens.append(tok)
        turn.logprobs.append(lp)
        turn.entropy.append(ent)
        self.sampled[r] += 1
        if tok in self.eos:
            self._end(r, "stop")
            return None
        if tok in self.call_end or (self.ends_call is not None and self.ends_call(turn.tokens)):
            turn.finish_reason = "tool_call"
            turn.seconds = self._now() - turn.started_s
            over = ("model_tokens" if self.sampled[r] >= lim.max_model_tokens else
                    "total_tokens" if self.sampled[r] + self.fed[r] >= lim.max_total_tokens else
                    "tool_calls" if self.calls[r] >= lim.max_tool_calls else None)
            if over is not None:  # no room left to read a result and answer: the call is not run
                self._end(r, over)
                return None
            self.calls[r] += 1
            text = self.b.tokenizer.decode(turn.tokens, skip_special_tokens=False)
            self.waiting_since[r] = self._now()  # before the call starts: its turn holds all of it
            self.pending[r] = self.pool.submit(self._call, text)
            self.state[r] = WAIT
            return tok
        if len(turn.tokens) >= lim.turn_tokens:  # first: a one-turn episode ends as a rollout does
            self._end(r, "length")
        elif self.sampled[r] >= lim.max_model_tokens:
            self._end(r, "model_tokens")
        elif self.sampled[r] + self.fed[r] >= lim.max_total_tokens:
            self._end(r, "total_tokens")
        return tok

    def _call(self, text: str) -> ToolCall:
        try:
            return self.run_tool(text)
        except Exception as exc:  # a tool runner must not raise; if one does, the model sees it
            return ToolCall(name="?", arguments=text, result=f"error: {type(exc).__name__}: {exc}",
                            error="raised")

    def _collect_results(self, block: bool) -> None:
        if not self.pending:
            return
        if block:
            t = time.perf_counter()
            wait(list(self.pending.values()), return_when=FIRST_COMPLETED)
            self.blocked_s += time.perf_counter() - t
        for r in [r for r, f in self.pending.items() if f.done()]:
            call = self.pending.pop(r).result()
            self.turns[r][-1].call = call
            chunk = [int(t) for t in self.result_tokens(call)]
            now = self._now()
            # from the call to its result reaching the loop: the sandbox's round trip, and up to one
            # decoding step before the loop collects it (feeding the result adds to `seconds` later)
            started = self.waiting_since.pop(r)
            tool = RowTurn("tool", started_s=started, seconds=now - started, result_s=now - started)
            tool.call = call
            self.turns[r].append(tool)
            n_assistant = sum(t.role == "assistant" for t in self.turns[r])
            if not chunk:
                chunk = [self.b.pad_token_id]
            if n_assistant >= self.limits.max_turns:
                tool.tokens = chunk
                self._end(r, "turns")
            else:
                self.chunk[r] = chunk
                self.state[r] = FEED
                self.feeding.append(r)

    def _end(self, r: int, reason: str) -> None:
        self.state[r] = DONE
        self.finish[r] = reason
        turn = self.turns[r][-1]
        if turn.role == "assistant":
            turn.finish_reason = turn.finish_reason or reason
            turn.seconds = self._now() - turn.started_s

    def _maybe_compact(self) -> None:
        keep = [i for i, r in enumerate(self.rows) if self.state[r] != DONE]
        below = self.b.compact_below and max(self.b.compact_below, COMPACT_BELOW)
        if len(keep) <= below * len(self.rows) and len(keep) < len(self.rows):
            index = torch.tensor(keep, dtype=torch.long, device=self.b.device)
            self.cache.batch_select_indices(index)
            self.rows = [self.rows[i] for i in keep]
            self.logits, self.mask, self.next_pos = self.logits[index], self.mask[index], self.next_pos[index]

    def grow(self, sources: list[int], rows: list[int]) -> None:
        """Append copies of working rows `sources` (cache, logits, mask, position) as output rows `rows`."""
        index = torch.tensor(list(range(len(self.rows))) + sources, dtype=torch.long, device=self.b.device)
        self.cache.batch_select_indices(index)
        self.logits, self.mask, self.next_pos = self.logits[index], self.mask[index], self.next_pos[index]
        self.rows = self.rows + rows

    def _forward(self, fed: dict[int, int]) -> None:
        """One [N, 1] forward: the fed tokens, a pad with mask 0 for every other row. Only a row that was
        fed a token reads its logits next (a waiting row's are read after its result is fed), so the
        new logits replace the old for every row, as in `HFBackend.decode`."""
        dev, pad = self.b.device, self.b.pad_token_id
        tok = torch.tensor([[fed.get(r, pad)] for r in self.rows], dtype=torch.long, device=dev)
        # `fed` may name a row that just finished and left the batch (its last result token): count by row
        flags = [r in fed for r in self.rows]
        if all(flags):
            real = self.mask.new_ones((len(self.rows), 1))
        else:
            real = torch.tensor(flags, dtype=self.mask.dtype, device=dev).unsqueeze(1)
        self.mask = torch.cat([self.mask, real], dim=1)
        self.logits = self.b._forward(tok, self.mask, self.next_pos.unsqueeze(-1), self.cache)
        self.next_pos = self.next_pos + real.squeeze(1)


def to_episodes(batch: EpisodeBatch, prompt_texts: Sequence[str], prompt_ids: Sequence[Sequence[int]],
                decode: Callable[[list[int]], str]) -> list[Episode]:
    """The batch's episodes in the store's format: the prompt as a user turn, then the decoded turns; tool
    turns carry their call's result text, and the assistant turn that called carries the call."""
    out = []
    for i, row in enumerate(batch.turns):
        turns = [Turn("user", prompt_texts[i], token_ids=list(prompt_ids[i]))]
        for t in row:
            if t.role == "assistant":
                turns.append(Turn("assistant", decode(t.tokens), token_ids=t.tokens, entropy=t.entropy,
                                  logprobs=t.logprobs, finish_reason=t.finish_reason, started_s=t.started_s,
                                  seconds=t.seconds, tool_calls=[t.call] if t.call is not None else []))
            else:
                turns.append(Turn("tool", t.call.result if t.call else "", token_ids=t.tokens,
                                  started_s=t.started_s, seconds=t.seconds))
        turns[-1].finish_reason = batch.finish_reasons[i] if turns[-1].role == "assistant" else None
        out.append(Episode(turns))
    return out
