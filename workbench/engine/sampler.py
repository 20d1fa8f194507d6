"""The prompt sampler: epoch-shuffled, seeded, its position checkpointed.

Each epoch is a permutation of the training prompts drawn from (seed, epoch) alone, so the order is
reproducible from the state `{"epoch", "pos"}` without storing the permutation.
"""

from __future__ import annotations

import numpy as np


class PromptSampler:
    """Draws prompt indices without replacement within an epoch, then reshuffles."""

    def __init__(self, n: int, seed: int) -> None:
        if n < 1:
            raise ValueError("the sampler needs at least one prompt")
        self.n, self.seed = n, seed
        self.epoch, self.pos = 0, 0
        self._perm = self._permutation(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch, 0x5A3]).permutation(self.n)

    def draw(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            if self.pos >= self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
            take = min(k - len(out), self.n - self.pos)
            out.extend(int(i) for i in self._perm[self.pos:self.pos + take])
            self.pos += take
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos, "n": self.n, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["n"] != self.n:
            raise ValueError(f"checkpoint sampler covers {state['n']} prompts, this task has {self.n}")
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
        self._perm = self._permutation(self.epoch)
