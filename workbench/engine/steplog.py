"""A step's rollouts as tensors, and the store rows built from them.

`Rollouts` holds every sequence generated in one step (all stages, plus reused off-policy responses)
as right-padded tensors with per-row metadata. `rollouts_table` turns it into the store's `rollouts`
Arrow table without a Python loop over tokens: list columns (token ids, per-token entropy) are built
from the flattened valid positions and their offsets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import torch

from workbench.rollout.shapes.arpo import DECISION_COLUMNS
from workbench.store.records import decision_array
from workbench.tasks.rewards import terms_array

log = logging.getLogger(__name__)

BRANCH_COLUMNS = DECISION_COLUMNS
"""ARPO's / AEPO's branch decision per row (the store's decision fields of the same names, packed into
rollouts.decision: `workbench.store.schema.DECISION_FIELDS`)."""


def _pad_to(x: torch.Tensor, width: int, value: float | int = 0) -> torch.Tensor:
    if x.shape[1] == width:
        return x
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)


@dataclass
class Rollouts:
    """Every sequence of one step, in generation order."""

    tokens: torch.Tensor
    """[N, T] int64, right-padded."""
    logprobs: torch.Tensor
    """[N, T] float32 sampling log-probabilities (0 past the length)."""
    entropy: torch.Tensor
    """[N, T] float32 entropy of the sampling distribution (0 past the length)."""
    lengths: torch.Tensor
    """[N] int64 generated tokens (EOS included)."""
    finished: torch.Tensor
    """[N] bool: ended with EOS."""
    prompt: np.ndarray
    """[N] index of each row's prompt in the task's training prompts."""
    stage: np.ndarray
    """[N] stage within the step."""
    policy_version: np.ndarray
    """[N] policy version that generated the row."""
    temperature: np.ndarray
    """[N] sampling temperature."""
    off_policy: np.ndarray
    """[N] bool: a reused response from an earlier step."""
    responses: list[str] = field(default_factory=list)
    rewards: np.ndarray | None = None
    verdicts: list[str] = field(default_factory=list)
    reward_terms: dict[str, np.ndarray] = field(default_factory=dict)
    """Term name -> [N] unweighted values (`workbench.tasks.rewards`); NaN where a row lacks the term."""
    correct: np.ndarray | None = None
    """[N] bool: the verifier's judgement (`VerifyResult.correct`); None: read from `verdicts`."""

    def correct_mask(self) -> np.ndarray:
        """[N] bool: which rows the verifier judged correct (never a threshold of the reward)."""
        if self.correct is not None:
            return np.asarray(self.correct, dtype=bool)
        return np.asarray([v == "correct" for v in self.verdicts], dtype=bool)
    workers: list[str] = field(default_factory=list)
    """[N] the worker that generated each row ("local", "ray-0", ...)."""
    version_start: np.ndarray | None = None
    """[N] policy version (training steps the generator's weights had seen) the row started under."""
    version_end: np.ndarray | None = None
    """[N] policy version of the row's last segment (= start unless a partial rollout was continued)."""
    segments: np.ndarray | None = None
    """[N] number of generation segments (1 unless a partial rollout was continued under new weights)."""
    shape: dict[str, np.ndarray] | None = None
    """The rollout shape's columns (`workbench.rollout.shapes.SHAPE_COLUMNS`: [N] each); None: every row
    sampled independently."""
    trainer_logprobs: torch.Tensor | None = None
    """[N, T] float32 the trainer's log-probabilities of the sampled tokens, from the forward pass of
    the update that trained the row (NaN rows: not in a forward pass); set by the policy update when
    `logging.token_logprobs` is on, else None."""

    loss_mask: torch.Tensor | None = None
    """[N, T] bool: the tokens the model sampled, the only ones the loss sees (episodes: never a tool
    result's); None: every token within the row's length."""
    episodes: list | None = None
    """[N] each row's `workbench.episodes.Episode` (None for a row that is not one); None: no episodes."""
    finish_reasons: list[str] | None = None
    """[N] why each row ended when it is not just stop / length (episodes: turns, tool_calls,
    model_tokens, total_tokens; `workbench.episodes.FINISH_REASONS`); None: from `finished`."""
    kept: np.ndarray | None = None
    """[N] bool: the row is kept for the update by a filter (GRPO-RoC, `workbench.rollout.roc`); a dropped row is
    stored, never trained on; None: every row kept."""
    filter_penalty: np.ndarray | None = None
    """[N] float: the filter's penalty score of each row (NaN: not scored)."""
    filter_reason: list | None = None
    """[N] why the filter kept or dropped each row (`workbench.rollout.roc.REASONS`; None: not filtered)."""
    branch: dict[str, np.ndarray] | None = None
    """ARPO / AEPO branching: `BRANCH_COLUMNS` -> [N] float (NaN: not a branch, or not AEPO's); None: no
    branching."""

    @property
    def n(self) -> int:
        return int(self.tokens.shape[0])

    def kept_mask(self) -> np.ndarray:
        """[N] bool: the rows a filter kept for the update (all of them without a filter)."""
        return np.ones(self.n, dtype=bool) if self.kept is None else np.asarray(self.kept, dtype=bool)

    def train_mask(self) -> torch.Tensor:
        """[N, T] bool: the tokens the loss sees (within the length, and sampled by the model)."""
        mask = self.mask()
        return mask if self.loss_mask is None else mask & _pad_to(self.loss_mask, mask.shape[1], False).bool()

    def model_tokens(self) -> torch.Tensor:
        """[N] int64 tokens the model sampled per row (episodes: tool results left out): what a token
        budget and the per-prompt statistics count."""
        return self.lengths if self.loss_mask is None else self.train_mask().sum(1).long()

    @staticmethod
    def empty() -> "Rollouts":
        """No rows: a step whose allocator granted nothing (a zero budget, say)."""
        z = torch.zeros((0, 0))
        i = np.zeros(0, dtype=np.int64)
        return Rollouts(tokens=z.long(), logprobs=z, entropy=z, lengths=torch.zeros(0, dtype=torch.long),
                        finished=torch.zeros(0, dtype=torch.bool), prompt=i, stage=i, policy_version=i,
                        temperature=np.zeros(0), off_policy=np.zeros(0, dtype=bool), rewards=np.zeros(0),
                        version_start=i, version_end=i, segments=i.astype(np.int32))

    @staticmethod
    def concat(parts: list["Rollouts"], pad_token_id: int) -> "Rollouts":
        width = max((p.tokens.shape[1] for p in parts), default=0)
        cat = lambda name, value=0: torch.cat([_pad_to(getattr(p, name), width, value) for p in parts])  # noqa: E731
        return Rollouts(
            tokens=cat("tokens", pad_token_id),
            logprobs=cat("logprobs"),
            entropy=cat("entropy"),
            lengths=torch.cat([p.lengths for p in parts]),
            finished=torch.cat([p.finished for p in parts]),
            prompt=np.concatenate([p.prompt for p in parts]),
            stage=np.concatenate([p.stage for p in parts]),
            policy_version=np.concatenate([p.policy_version for p in parts]),
            temperature=np.concatenate([p.temperature for p in parts]),
            off_policy=np.concatenate([p.off_policy for p in parts]),
            responses=[r for p in parts for r in p.responses],
            rewards=np.concatenate([p.rewards for p in parts]) if parts else np.zeros(0),
            verdicts=[v for p in parts for v in p.verdicts],
            reward_terms={k: np.concatenate([p.reward_terms.get(k, np.full(p.n, np.nan)) for p in parts])
                          for k in dict.fromkeys(k for p in parts for k in p.reward_terms)},
            correct=np.concatenate([p.correct_mask() for p in parts]) if parts else np.zeros(0, dtype=bool),
            workers=[w for p in parts for w in p.workers],
            version_start=_cat_or_none(parts, "version_start"), version_end=_cat_or_none(parts, "version_end"),
            segments=_cat_or_none(parts, "segments"), shape=_cat_shape(parts),
            loss_mask=(torch.cat([_pad_to(p.train_mask(), width, False) for p in parts])
                       if any(p.loss_mask is not None for p in parts) else None),
            episodes=([e for p in parts for e in (p.episodes or [None] * p.n)]
                      if any(p.episodes is not None for p in parts) else None),
            finish_reasons=([f for p in parts for f in (p.finish_reasons or p.default_finish())]
                            if any(p.finish_reasons is not None for p in parts) else None),
            **_cat_filter(parts),
        )

    def default_finish(self) -> list[str]:
        return ["stop" if f else "length" for f in self.finished.tolist()]

    def mask(self) -> torch.Tensor:
        return torch.arange(self.tokens.shape[1]).unsqueeze(0) < self.lengths.unsqueeze(1)


def _cat_shape(parts: list[Rollouts]) -> dict[str, np.ndarray] | None:
    """The parts' shape columns, "independent" rows (a reused response, say) filled in; None: no part
    has any."""
    if all(p.shape is None for p in parts):
        return None
    from workbench.rollout.shapes import SHAPE_COLUMNS, empty_columns

    cols = [p.shape if p.shape is not None else empty_columns(p.n, "independent") for p in parts]
    return {k: np.concatenate([c[k] for c in cols]) for k in SHAPE_COLUMNS}


def _cat_filter(parts: list[Rollouts]) -> dict:
    """The parts' filter columns (unfiltered parts: kept, no penalty, no reason); none if no part has any."""
    out: dict = {}
    if any(p.branch is not None for p in parts):
        out["branch"] = {k: np.concatenate([p.branch[k] if p.branch is not None else np.full(p.n, np.nan)
                                            for p in parts]) for k in BRANCH_COLUMNS}
    if all(p.kept is None for p in parts):
        return out
    return dict(out,kept=np.concatenate([p.kept_mask() for p in parts]),
                filter_penalty=np.concatenate([p.filter_penalty if p.filter_penalty is not None
                                               else np.full(p.n, np.nan) for p in parts]),
                filter_reason=[x for p in parts for x in (p.filter_reason or [None] * p.n)])


def _cat_or_none(parts: list[Rollouts], name: str) -> np.ndarray | None:
    values = [getattr(p, name) for p in parts]
    return None if any(v is None for v in values) else np.concatenate(values)


def _list_array(values: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, dtype: pa.DataType) -> pa.Array:
    flat = values[mask].numpy()
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths.numpy(), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(flat, dtype))


def _trainer_array(values: torch.Tensor | None, mask: torch.Tensor, lengths: torch.Tensor) -> pa.Array:
    """`Rollouts.trainer_logprobs` as a list column: null for the rows the update did not compute."""
    n = len(lengths)
    if values is None:
        return pa.nulls(n, pa.list_(pa.float32()))
    values = values.cpu().float()
    lists = _list_array(torch.nan_to_num(values), mask, lengths, pa.float32())
    missing = values[:, 0].isnan().numpy() if values.shape[1] else np.ones(n, dtype=bool)
    return pa.ListArray.from_arrays(lists.offsets, lists.values, mask=pa.array(missing))


def _parent_as_idx(parent: np.ndarray, idx: np.ndarray, prompt: np.ndarray, stage: np.ndarray) -> np.ndarray:
    """A tree row's parent, given by the shape as a slot of its stage's group (the k-th row of the prompt in
    that stage), as the parent row's `idx` in the step (a prompt's rows of a stage are consecutive in `idx`:
    stages are concatenated in order). The same numbers in a one-stage step; -1 stays -1."""
    first: dict[tuple[int, int], int] = {}
    for i, key in enumerate(zip(np.asarray(prompt).tolist(), np.asarray(stage).tolist())):
        first.setdefault(key, int(idx[i]))
    out = parent.copy()
    for i in np.flatnonzero(parent >= 0):
        out[i] = first[(int(prompt[i]), int(stage[i]))] + int(parent[i])
    return out


def episode_rows_of(run_id: str, step: int, r: Rollouts, *, prompt_ids: list[str],
                    idx: np.ndarray) -> tuple[list[dict], list[dict]]:
    """The step's `turns` and `tool_calls` rows (episodes; none for other rows), keyed as their rollouts."""
    from workbench.episodes import episode_rows

    turns: list[dict] = []
    calls: list[dict] = []
    for i, ep in enumerate(r.episodes or []):
        if ep is None:
            continue
        t, c = episode_rows(ep, {"run_id": run_id, "step": step, "stage": int(r.stage[i]),
                                 "prompt_id": prompt_ids[int(r.prompt[i])], "idx": int(idx[i])})
        turns += t
        calls += c
    return turns, calls


def rollouts_table(
    run_id: str,
    step: int,
    r: Rollouts,
    *,
    prompt_ids: list[str],
    idx: np.ndarray,
    advantage: np.ndarray,
    used: np.ndarray,
    token_ids: bool = True,
    token_entropy: bool = True,
    token_logprobs: bool = False,
    staleness: np.ndarray | None = None,
    is_weight: np.ndarray | None = None,
) -> pa.Table:
    """The `rollouts` rows of one step (one per sequence), columns as in the store's schema.

    `staleness` [N] (versions behind the trainer when consumed) and `is_weight` [N] (mean importance
    weight, NaN: not in the update) are the asynchronous pipeline's; absent, they are left null.
    `token_logprobs` writes the behaviour log-probs per token and the trainer's (`r.trainer_logprobs`;
    null for a row the update did not compute)."""
    n = r.n
    tokens = r.tokens.cpu()
    # episodes: token_ids, token_entropy and length are the model's tokens (every assistant turn's, in
    # order), as the store documents them; the tool results are in `turns` (and in `response`, the text
    # the verifier read)
    mask = r.train_mask()
    lengths = r.model_tokens().cpu().long()
    sampled = mask
    ent = r.entropy.cpu().float()
    lengths_f = lengths.clamp(min=1).float()
    ent_mean = (ent * sampled).sum(1) / lengths_f
    ent_max = torch.where(sampled, ent, torch.zeros_like(ent)).amax(1) if ent.shape[1] else torch.zeros(n)
    logprob_sum = (r.logprobs.cpu().float() * sampled).sum(1)
    finish = np.asarray(r.finish_reasons if r.finish_reasons is not None else r.default_finish(), dtype=object)
    cols = {
        "run_id": pa.array([run_id] * n, pa.string()),
        "step": pa.array(np.full(n, step, dtype=np.int64)),
        "stage": pa.array(r.stage.astype(np.int32)),
        "prompt_id": pa.array([prompt_ids[i] for i in r.prompt], pa.string()),
        "idx": pa.array(idx.astype(np.int32)),
        "policy_version": pa.array(r.policy_version.astype(np.int64)),
        "response": pa.array(r.responses, pa.string()),
        "token_ids": _list_array(tokens, mask, lengths, pa.int32()) if token_ids
        else pa.nulls(n, pa.list_(pa.int32())),
        "token_entropy": _list_array(ent, mask, lengths, pa.float32()) if token_entropy
        else pa.nulls(n, pa.list_(pa.float32())),
        "reward": pa.array(np.asarray(r.rewards, dtype=np.float64)),
        "reward_terms": terms_array(r.reward_terms, n),
        "verdict": pa.array(r.verdicts, pa.string()),
        "correct": pa.array(r.correct_mask(), pa.bool_()),
        "finish_reason": pa.array(finish.tolist(), pa.string()),
        "length": pa.array(lengths.numpy().astype(np.int32)),
        "logprob_sum": pa.array(logprob_sum.numpy().astype(np.float64)),
        "entropy_mean": pa.array(ent_mean.numpy().astype(np.float64)),
        "entropy_max": pa.array(ent_max.numpy().astype(np.float64)),
        "advantage": pa.array(advantage.astype(np.float64)),
        "temperature": pa.array(r.temperature.astype(np.float64)),
        "off_policy": pa.array(r.off_policy.astype(bool)),
        "used_in_update": pa.array(used.astype(bool)),
    }
    if r.episodes is not None:  # episodes (issue #40): the counts beside the turns
        summary = [ep.summary() if ep is not None else None for ep in r.episodes]
        for name in ("turns", "tool_calls", "tool_errors", "tool_tokens"):
            cols[name] = pa.array([x[name] if x is not None else None for x in summary], pa.int32())
    decided: dict[str, object] = {}
    if r.kept is not None:  # a filter (GRPO-RoC): kept or dropped, the penalty, the reason
        cols["filter_kept"] = pa.array(r.kept_mask(), pa.bool_())
        decided["filter_penalty"] = np.asarray(r.filter_penalty, dtype=np.float64)
        decided["filter_reason"] = list(r.filter_reason or [None] * n)
    if r.branch is not None:  # ARPO / AEPO: the decision that made a branch
        decided.update({name: np.asarray(r.branch[name], dtype=np.float64) for name in BRANCH_COLUMNS})
    if decided:
        cols["decision"] = decision_array(decided, n)
    if token_logprobs:
        cols["token_logprobs"] = _list_array(r.logprobs.cpu().float(), mask, lengths, pa.float32())
        cols["token_trainer_logprobs"] = _trainer_array(r.trainer_logprobs, mask, lengths)
    for name, values, typ in (("version_start", r.version_start, pa.int32()), ("version_end", r.version_end, pa.int32()),
                              ("segments", r.segments, pa.int32()), ("staleness", staleness, pa.int32()),
                              ("is_weight_mean", is_weight, pa.float32())):
        if values is not None:
            cols[name] = pa.array(np.asarray(values), typ, from_pandas=True)  # NaN -> null
    if r.shape is not None:  # rollout shapes (issue #32): -1 -> null
        cols["shape"] = pa.array(list(r.shape["shape"]), pa.string())
        cols["draft_mode"] = pa.array(list(r.shape["draft_mode"]), pa.string())  # None -> null
        for name in ("reused_tokens", "draft_tokens", "draft_rejected_at", "parent_idx", "branch_at"):
            v = np.asarray(r.shape[name], dtype=np.int64)
            v = _parent_as_idx(v, idx, r.prompt, r.stage) if name == "parent_idx" else v
            cols[name] = pa.array(v.astype(np.int32), pa.int32(), mask=v < 0)
    return pa.table(cols)


class StepWriter:
    """Hands the engine's steps to the store.

    With `background=False` every `write` commits its step at once (`Store.write_step`). With
    `background=True` a writer thread commits while the loop goes on, grouping the steps that arrive
    during a commit into the next transaction, up to `commit_max_rows` rollouts (group commit, see
    `workbench.store.group`). Each step is held back until `release()`, which the loop calls when the
    next step's policy update starts: generation is a Python loop of small torch calls that the
    writer thread's Python work (GIL) slowed ~2x, while the update's large kernels run without the
    GIL. The next `write`, `flush` or `close` releases it too, and the writer does by itself after
    `commit_interval_s`. A step carrying evaluation rows is flushed at once.

    `flush()` blocks until every step handed over is committed and re-raises a failed commit; the loop
    flushes before every checkpoint (a checkpoint never covers an uncommitted step), on pause, stop and
    at the end.
    """

    def __init__(self, store, run_id: str, *, background: bool = False, commit_max_rows: int = 16384,
                 commit_interval_s: float = 1.0, commit_spacing_s: float = 0.0, hold: bool = True,
                 nice: int = 0, max_queued_steps: int = 256, status_dir: str | None = None) -> None:
        from workbench.store.group import GroupWriter

        self.store, self.run_id, self.hold = store, run_id, hold
        self.status_dir = status_dir
        self._group = GroupWriter(store, commit_max_rows=commit_max_rows, commit_interval_s=commit_interval_s,
                                  commit_spacing_s=commit_spacing_s, name=f"writer-{run_id}",
                                  nice=nice, max_queued_steps=max_queued_steps,
                                  listener=self._outage) if background else None
        self._stats = self._group
        self._lags: list[float] = []
        self._cpu_taken = 0.0

    def _outage(self, what: str, info: dict) -> None:
        """The writer's news of an outage of the store (see `workbench.store.group`): the run's status
        file while it lasts (`workbench.store.outage`), an event in the store when it ends."""
        from workbench.store.outage import clear_status, write_status

        bound = self._group.max_queued_steps if self._group is not None else 0
        if what != "end":
            if self.status_dir is not None:
                write_status(self.status_dir, self.run_id, state=what, since=info["since"],
                             queued_steps=info.get("queued_steps", 0), bound=bound, error=info.get("error"))
            return
        if self.status_dir is not None:
            clear_status(self.status_dir, self.run_id)
        data = {"start": info["start"].isoformat(), "end": info["end"].isoformat(),
                "seconds": round(info["seconds"], 1), "steps_queued": info["steps_queued"],
                "paused": info["paused"], "bound": bound, "error": info.get("error")}
        message = (f"store unreachable for {info['seconds']:.0f} s (from {info['start']:%H:%M:%S} to "
                   f"{info['end']:%H:%M:%S} UTC): up to {info['steps_queued']} steps queued in memory"
                   + (f", paused at the bound of {bound}" if info["paused"] else "") + "; all committed")
        try:
            self.store.add_event(self.run_id, "warning", "store_outage", message, data=data)
        except Exception as exc:  # noqa: BLE001 - the steps are committed; the record of the outage is not vital
            log.warning("could not record the store outage of run %s: %s", self.run_id, exc)

    @property
    def outage(self) -> dict | None:
        """The writer's outage in progress (since, queued_steps, paused, error), or None."""
        return self._group.outage if self._group is not None else None

    @property
    def lags(self) -> list[float]:
        """Seconds from each step's `write` to the end of its commit."""
        return self._stats.lags if self._stats is not None else self._lags

    @property
    def commits(self) -> list[tuple[int, int, float]]:
        """(steps, rollouts, seconds) of each background commit."""
        return self._stats.commits if self._stats is not None else []

    def write(self, step: int, metrics: dict, rollouts: pa.Table | None, allocations: list[dict],
              prompt_stats: list[dict], evals: list[dict], prompts: list[dict],
              events: list[dict] | None = None, episodes: tuple[list[dict], list[dict]] | None = None) -> None:
        import time

        from workbench.store import StepRecord

        record = StepRecord(
            run_id=self.run_id, step=step, metrics=metrics,
            rollouts=rollouts if rollouts is not None else [], allocations=allocations,
            prompt_stats=prompt_stats, evals=evals, prompts=prompts, events=events or [],
            turns=episodes[0] if episodes else [], tool_calls=episodes[1] if episodes else [],
        )
        if self._group is None:
            t = time.monotonic()
            self.store.write_step(record)
            self._lags.append(time.monotonic() - t)
            return
        self._group.submit(record, hold=self.hold and not evals)
        if evals:  # an evaluation is flushed at once
            self._group.flush()

    def take_cpu_s(self) -> float | None:
        """The writer thread's CPU seconds since the last call (its commits of earlier steps: what logging
        costs off the critical path); None without a background writer."""
        if self._group is None:
            return None
        cpu, self._cpu_taken = self._group.cpu_s - self._cpu_taken, self._group.cpu_s
        return cpu

    def release(self) -> None:
        """Hand the step written last to the writer now (background mode; no-op otherwise)."""
        if self._group is not None:
            self._group.release()

    def flush(self, *, through_outage: bool = True) -> bool:
        """Block until every step handed over is committed (True); re-raise a failed commit. With
        `through_outage=False`, False at once while the store is unreachable (see GroupWriter.flush)."""
        if self._group is not None:
            return self._group.flush(through_outage=through_outage)
        return True

    def close(self) -> None:
        """Flush and stop the writer thread."""
        if self._group is not None:
            group, self._group = self._group, None
            group.close()
