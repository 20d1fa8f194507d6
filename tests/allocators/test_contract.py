"""Contract tests, parametrised over every registered allocator."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest

from workbench.allocators import (
    Allocator,
    Budget,
    StepContext,
    available_allocators,
    get_allocator,
    make_allocator,
    register_allocator,
)
from workbench.allocators._config import field_docs
from workbench.allocators.registry import shipped_allocators
from workbench.errors import ConfigError

from .conftest import drive

NAMES = shipped_allocators()  # not the test-only ones other test modules register


def test_the_ten_are_registered():
    assert set(NAMES) == {
        "uniform", "dynamic_sampling", "selective", "multistage", "until_correct",
        "knapsack", "rank_proportional", "uncertainty", "value_tracker", "adaptive_stop",
    }


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "budget",
    [Budget("rollouts", 0), Budget("rollouts", 1), Budget("rollouts", 7), Budget("rollouts", 50),
     Budget("rollouts", 1000), Budget("tokens", 900, tokens_per_rollout=16.0), Budget("tokens", 10, tokens_per_rollout=16.0)],
    ids=lambda b: f"{b.kind}{b.amount}",
)
def test_budget_never_exceeded(name, budget):
    _, outs, _ = drive(name, budget=budget, steps=5)
    for o in outs:
        assert o.rollouts <= budget.rollouts_left()
        for _, g in o.grants:
            assert g.n >= 0 and g.reason.strip()
    if budget.rollouts_left() < 1:
        assert all(o.rollouts == 0 for o in outs)


@pytest.mark.parametrize("name", NAMES)
def test_spends_something_and_gives_reasons(name):
    _, outs, _ = drive(name, steps=3)
    assert sum(o.rollouts for o in outs) > 0
    for o in outs:
        assert all(g.reason.strip() for _, g in o.grants)
        assert set(o.used_in_update) == set(o.results)


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_for_a_seed(name):
    _, a, _ = drive(name, steps=5, seed=3)
    _, b, _ = drive(name, steps=5, seed=3)
    assert [o.grants for o in a] == [o.grants for o in b]


@pytest.mark.parametrize("name", NAMES)
def test_empty_candidates(name):
    alloc = make_allocator(name, {}, seed=0)
    ctx = StepContext(0, 0, Budget("rollouts", 100), [], {}, np.random.default_rng(0), lambda k: [], 8)
    assert sum(g.n for g in alloc.begin_step(ctx)) == 0
    ctx = dataclasses.replace(ctx, stage=1)
    assert sum(g.n for g in alloc.next_stage(ctx, {})) == 0


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip(name):
    alloc, _, stats = drive(name, steps=6, seed=1)
    state = json.loads(json.dumps(alloc.state_dict()))
    fresh = make_allocator(name, {}, seed=1)
    fresh.load_state_dict(state)
    assert json.loads(json.dumps(fresh.state_dict())) == state
    _, a, _ = drive(name, alloc=alloc, stats=copy.deepcopy(stats), steps=2, start_step=6, seed=1)
    _, b, _ = drive(name, alloc=fresh, stats=copy.deepcopy(stats), steps=2, start_step=6, seed=1)
    assert [o.grants for o in a] == [o.grants for o in b]


@pytest.mark.parametrize("name", NAMES)
def test_config_fields_documented_and_validated(name):
    cls = get_allocator(name)
    fields = [f.name for f in dataclasses.fields(cls.Config)]
    docs = field_docs(cls.Config)
    assert set(docs) == set(fields), f"undocumented: {set(fields) - set(docs)}"
    with pytest.raises(ConfigError, match="bogus"):
        make_allocator(name, {"bogus": 1})
    first = fields[0]
    with pytest.raises(ConfigError, match=first):
        make_allocator(name, {first: "not a number"})
    with pytest.raises(ConfigError, match=first):
        make_allocator(name, {first: -5})


@pytest.mark.parametrize("name", NAMES)
def test_module_docstring_cites_paper_and_rule(name):
    import sys

    doc = sys.modules[get_allocator(name).__module__].__doc__
    assert "Paper:" in doc and "\n1. " in doc and "\n2. " in doc


def test_registry_refuses_duplicates_and_lists_names():
    with pytest.raises(ValueError, match="already registered"):
        @register_allocator("uniform")
        class Again(Allocator):  # noqa: F841
            Config = get_allocator("uniform").Config

            def begin_step(self, ctx):
                return []

    with pytest.raises(ConfigError, match="knapsack"):
        get_allocator("knapsak")


def test_make_allocator_types():
    a = make_allocator("multistage", {"n": 4.0, "n_max": 16, "schedule": "hardness"}, seed=2)
    assert a.config.n == 4 and isinstance(a.config.n, int) and a.seed == 2
    assert make_allocator("adaptive_stop", {"confidence": 1}).config.confidence == 1.0
    with pytest.raises(ConfigError, match="schedule"):
        make_allocator("multistage", {"schedule": "both"})
    with pytest.raises(ConfigError, match="n_max"):
        make_allocator("multistage", {"n": 8, "n_max": 4})
    with pytest.raises(ConfigError, match="reuse"):
        make_allocator("until_correct", {"reuse": 1})
    with pytest.raises(ConfigError, match="n"):
        make_allocator("uniform", {"n": 2.5})
    with pytest.raises(ConfigError, match="mapping"):
        make_allocator("uniform", ["n", 2])  # type: ignore[arg-type]


def test_set_params_keeps_state_and_rejects_bad_fields():
    alloc, _, _ = drive("selective", steps=4)
    state = alloc.state_dict()
    alloc.set_params({"p_step": 0.02})
    assert alloc.config.p_step == 0.02 and alloc.state_dict() == state
    with pytest.raises(ConfigError, match="p_step"):
        alloc.set_params({"p_step": 3})
    with pytest.raises(ConfigError, match="nope"):
        alloc.set_params({"nope": 1})
    assert alloc.config.p_step == 0.02


def test_the_checker_catches_a_greedy_allocator():
    """The contract harness itself can fail: an allocator that ignores the budget is caught."""
    from workbench.allocators import Grant

    class Greedy(Allocator):
        name = "greedy"
        Config = get_allocator("uniform").Config

        def begin_step(self, ctx):
            return [Grant(c.prompt_id, 1000, "all of it") for c in ctx.candidates]

    with pytest.raises(AssertionError, match="granted"):
        drive("greedy", alloc=Greedy(), steps=1)

    class Mute(Greedy):
        def begin_step(self, ctx):
            return [Grant(c.prompt_id, 1, " ") for c in ctx.candidates]

    with pytest.raises(AssertionError, match="reason"):
        drive("mute", alloc=Mute(), steps=1)


@pytest.mark.parametrize("name", [n for n in NAMES if not get_allocator(n).reads_history])
def test_an_allocator_that_says_it_reads_no_history_decides_the_same_without_it(name):
    """`reads_history = False` (exact speculative rollouts trust it: workbench.config.shapes.history_warning):
    the same grants and the same groups in the update whether the prompts come fresh or with a history of
    earlier rewards."""
    from .conftest import seen_stats

    rng = np.random.default_rng(5)
    history = {f"p{i:03d}": seen_stats(f"p{i:03d}", int(c), 8, easy_streak=int(c == 8), hard_streak=int(c == 0),
                                       last_pass=c / 8) for i, c in enumerate(rng.integers(0, 9, 64))}
    _, fresh, _ = drive(name, steps=3, seed=2)
    _, told, _ = drive(name, steps=3, seed=2, stats=history)
    assert [[(s, g.prompt_id, g.n) for s, g in o.grants] for o in fresh] == \
        [[(s, g.prompt_id, g.n) for s, g in o.grants] for o in told]
    assert [o.used_in_update for o in fresh] == [o.used_in_update for o in told]


def test_the_allocators_that_read_earlier_rewards_say_so():
    assert {n for n in NAMES if get_allocator(n).reads_history} == {
        "selective", "until_correct", "knapsack", "rank_proportional", "value_tracker", "adaptive_stop"}
