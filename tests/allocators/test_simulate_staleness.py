"""The simulator's staleness (the asynchronous pipeline's eta): the allocator's statistics fold in a
step's rewards eta steps late, the rollouts are sampled by the policy of eta steps before, and
staleness 0 is the simulator as it was; `workbench bench async-allocators` on a profile's warm start."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.allocators import simulate as sim
from workbench.allocators.simulate import SimConfig, simulate_one

SMALL = SimConfig(population=64, prompts_per_step=8, steps=6, budget_factor=1.0)


@pytest.mark.parametrize("eta", [0, 2])
def test_statistics_fold_in_each_step_eta_steps_late(monkeypatch, eta):
    events = []
    drive, fold = sim.drive_step, sim.fold
    monkeypatch.setattr(sim, "drive_step", lambda alloc, **kw: (events.append(("drive", kw["step"])),
                                                                 drive(alloc, **kw))[1])
    monkeypatch.setattr(sim, "fold", lambda stats, on_policy, step: (events.append(("fold", step)),
                                                                     fold(stats, on_policy, step))[1])
    simulate_one("uniform", None, dataclasses.replace(SMALL, staleness=eta), seed=0)
    folded_by = {}  # step folded -> the drives done before it
    for i, (kind, step) in enumerate(events):
        if kind == "fold":
            folded_by[step] = max(s for k, s in events[:i] if k == "drive")
    assert folded_by == {s: s + eta for s in range(SMALL.steps - eta)}


def test_stale_sampling_learns_later_than_fresh():
    """The same seed, every prompt drawn every step (so a lag of two steps is a lag for each prompt):
    with the policy two steps behind, steps 1 and 2 still sample the starting policy, so their groups
    differ from the synchronous run's and so does what is learned from them."""
    every = dataclasses.replace(SMALL, population=8, steps=6, lr_prompt=2.0, drift=0.0)
    fresh = simulate_one("uniform", None, every, seed=1)
    stale = simulate_one("uniform", None, dataclasses.replace(every, staleness=2), seed=1)
    assert fresh["curve"][:2] == stale["curve"][:2]  # step 0 samples the starting policy either way
    assert fresh["curve"] != stale["curve"]


def test_staleness_is_checked():
    from workbench.errors import ConfigError

    with pytest.raises(ConfigError, match="staleness"):
        SimConfig(staleness=-1)
