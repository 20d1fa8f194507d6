"""Synthetic training steps with realistic shapes and content, for the store benchmark and tests.

Each step: 32 prompts x 16 rollouts = 512 rollouts of 200 tokens; token ids Zipf-like over a 32k
vocabulary, per-token entropies exponential with mean ~0.3, response text decoded from the ids with a
synthetic word list; rewards drawn from each prompt's hidden pass rate. Arrays are built with numpy
and Arrow offsets (no per-row Python), and a few token blocks are reused across steps so building a
million rollouts costs seconds, not minutes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from workbench.correctness import DEFAULT
from workbench.store.records import StepRecord

VOCAB = 32_000


@dataclass(frozen=True)
class Shape:
    """How a synthetic run looks."""

    prompts_per_step: int = 32
    rollouts_per_prompt: int = 16
    tokens: int = 200
    prompt_pool: int = 7_500
    entropy_mean: float = 0.3
    blocks: int = 8

    @property
    def rollouts_per_step(self) -> int:
        return self.prompts_per_step * self.rollouts_per_prompt


class SyntheticRun:
    """Generates the StepRecords of one synthetic run (deterministic for a seed)."""

    def __init__(self, run_id: str, shape: Shape = Shape(), seed: int = 0) -> None:
        self.run_id, self.shape = run_id, shape
        self.rng = np.random.default_rng(seed)
        ranks = np.arange(1, VOCAB + 1, dtype=np.float64)
        self._p = 1.0 / (ranks + 2.7) ** 1.1
        self._p /= self._p.sum()
        self.pass_rate = self.rng.beta(0.6, 0.6, size=shape.prompt_pool)
        words = [f"w{i:x}" if i % 7 else f" t{i}" for i in range(VOCAB)]
        self._words = pa.array(words)
        self._blocks = [self._block() for _ in range(shape.blocks)]

    def _block(self) -> tuple[pa.Array, pa.Array, pa.Array, np.ndarray]:
        n, t = self.shape.rollouts_per_step, self.shape.tokens
        ids = self.rng.choice(VOCAB, size=n * t, p=self._p).astype(np.int32)
        ent = self.rng.exponential(self.shape.entropy_mean, size=n * t).astype(np.float32)
        offsets = pa.array(np.arange(0, n * t + 1, t, dtype=np.int32))
        token_ids = pa.ListArray.from_arrays(offsets, pa.array(ids))
        token_entropy = pa.ListArray.from_arrays(offsets, pa.array(ent))
        text = pc.binary_join(pa.ListArray.from_arrays(offsets, self._words.take(pa.array(ids))), "")
        return token_ids, token_entropy, text, ent.reshape(n, t)

    def step(self, step: int) -> StepRecord:
        """The StepRecord of `step`."""
        s, rng = self.shape, self.rng
        n, k = s.rollouts_per_step, s.rollouts_per_prompt
        prompts = rng.choice(s.prompt_pool, size=s.prompts_per_step, replace=False)
        token_ids, token_entropy, text, ent = self._blocks[step % s.blocks]
        rewards = (rng.random(n) < np.repeat(self.pass_rate[prompts], k)).astype(np.float32)
        correct = DEFAULT(rewards)  # 0/1 rewards: the default rule is the verdict
        groups = rewards.reshape(-1, k)
        adv = ((groups - groups.mean(1, keepdims=True)) / (groups.std(1, keepdims=True) + 1e-6)).ravel()
        prompt_ids = pa.array([f"p{p:05d}" for p in prompts]).take(pa.array(np.repeat(np.arange(len(prompts)), k)))
        rollouts = pa.table({
            "stage": pa.array(np.zeros(n, np.int32)), "prompt_id": prompt_ids,
            "idx": pa.array(np.tile(np.arange(k, dtype=np.int32), s.prompts_per_step)),
            "policy_version": pa.array(np.full(n, step, np.int32)), "response": text,
            "token_ids": token_ids, "token_entropy": token_entropy, "reward": pa.array(rewards),
            "verdict": pc.if_else(pa.array(correct), "correct", "wrong"), "correct": pa.array(correct),
            "finish_reason": pa.array(np.full(n, "stop", dtype=object), pa.string()),
            "length": pa.array(np.full(n, s.tokens, np.int32)),
            "logprob_sum": pa.array(-ent.sum(1) * 1.3), "entropy_mean": pa.array(ent.mean(1)),
            "entropy_max": pa.array(ent.max(1)), "advantage": pa.array(adv.astype(np.float32)),
            "temperature": pa.array(np.ones(n, np.float32)),
            "off_policy": pa.array(np.zeros(n, bool)), "used_in_update": pa.array(np.ones(n, bool)),
        })
        return StepRecord(self.run_id, step, self._metrics(step, rewards, ent),
                          rollouts, self._allocations(step, prompts), self._prompt_stats(step, prompts, groups))

    def _metrics(self, step: int, rewards: np.ndarray, ent: np.ndarray) -> dict:
        return {"policy_version": step, "rollouts": len(rewards), "prompts": self.shape.prompts_per_step,
                "tokens_generated": int(ent.size), "rollout/reward_mean": float(rewards.mean()),
                "rollout/reward_std": float(rewards.std()), "rollout/entropy_mean": float(ent.mean()),
                "train/loss": float(self.rng.normal()), "train/lr": 1e-5, "allocator": "uniform",
                "budget_kind": "rollouts", "budget": len(rewards), "timing_s/step": 1.0}

    def _allocations(self, step: int, prompts: np.ndarray) -> list[dict]:
        k = self.shape.rollouts_per_prompt
        return [{"stage": 0, "prompt_id": f"p{p:05d}", "allocator": "uniform", "asked": k, "granted": k,
                 "reason": "uniform share", "predicted_pass": float(self.pass_rate[p]),
                 "alpha_before": 1.0, "beta_before": 1.0, "budget_kind": "rollouts",
                 "budget": self.shape.rollouts_per_step, "budget_left": 0, "used_in_update": True}
                for p in prompts]

    def _prompt_stats(self, step: int, prompts: np.ndarray, groups: np.ndarray) -> list[dict]:
        k = self.shape.rollouts_per_prompt
        return [{"prompt_id": f"p{p:05d}", "alpha": 1.0 + float(g.sum()), "beta": 1.0 + k - float(g.sum()),
                 "pass_mean": float(g.mean()), "visits": 1, "rollouts": k, "correct": int(DEFAULT(g).sum()),
                 "easy_streak": 0, "hard_streak": 0, "last_step": step, "last_pass": float(g.mean())}
                for p, g in zip(prompts, groups)]
