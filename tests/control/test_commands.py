"""Validation of control commands: canonical shapes, every bad value rejected naming the field."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workbench.control.commands import (
    LIMITS,
    STAGE_COMMANDS,
    Limits,
    applies_at,
    validate,
)
from workbench.control.protocol import COMMANDS
from workbench.errors import ControlError


@pytest.mark.parametrize("command", ["pause", "resume", "stop", "checkpoint"])
def test_argless_commands(command):
    assert validate(command, None) == {}
    assert validate(command, {}) == {}
    with pytest.raises(ControlError, match=f"{command}: amount: unknown argument"):
        validate(command, {"amount": 3})


def test_unknown_command_lists_the_known_ones():
    with pytest.raises(ControlError, match="unknown command 'explode'.*set_budget"):
        validate("explode", {})


def test_budget_canonical():
    assert validate("set_budget", {"amount": 256}) == {"kind": "rollouts", "amount": 256}
    assert validate("set_budget", {"kind": "tokens", "amount": 4096.0}) == {"kind": "tokens", "amount": 4096}


@pytest.mark.parametrize(
    "args, field",
    [
        ({}, "amount"),
        ({"amount": 0}, "amount"),
        ({"amount": -5}, "amount"),
        ({"amount": 2.5}, "amount"),
        ({"amount": "many"}, "amount"),
        ({"amount": True}, "amount"),
        ({"amount": LIMITS.max_rollouts + 1}, "amount"),
        ({"kind": "dollars", "amount": 5}, "kind"),
        ({"amount": 5, "stage": 2}, "stage"),
    ],
)
def test_budget_rejections_name_the_field(args, field):
    with pytest.raises(ControlError, match=f"^set_budget: {field}: "):
        validate("set_budget", args)


def test_token_budget_has_its_own_limit():
    limits = Limits(max_rollouts=10, max_tokens=1000)
    assert validate("set_budget", {"kind": "tokens", "amount": 1000}, limits=limits)["amount"] == 1000
    with pytest.raises(ControlError, match=r"\[1, 10\]"):
        validate("set_budget", {"amount": 11}, limits=limits)


@pytest.mark.parametrize("bad", [0, -1.0, 0.0, 10.5, math.nan, math.inf, "hot", None, False])
def test_temperature_rejections(bad):
    with pytest.raises(ControlError, match="^set_temperature: temperature: "):
        validate("set_temperature", {"temperature": bad})


def test_temperature_ok():
    assert validate("set_temperature", {"temperature": 1}) == {"temperature": 1.0}
    assert validate("set_temperature", {"temperature": 10.0}) == {"temperature": 10.0}


@pytest.mark.parametrize("bad", [0, -1e-4, 0.0, 1001.0, math.nan, math.inf, "fast", None, True])
def test_lr_rejections(bad):
    with pytest.raises(ControlError, match="^set_lr: lr: "):
        validate("set_lr", {"lr": bad})


def test_lr_ok():
    assert validate("set_lr", {"lr": 1}) == {"lr": 1.0}
    assert validate("set_lr", {"lr": 5e-5}) == {"lr": 5e-5}
    with pytest.raises(ControlError, match="^set_lr: rate: unknown argument"):
        validate("set_lr", {"lr": 1e-4, "rate": 2})


def test_eval_interval():
    assert validate("set_eval_interval", {"every": 0}) == {"every": 0}
    assert validate("set_eval_interval", {"every": 25}) == {"every": 25}
    for bad in (-1, 1.5, "10", None):
        with pytest.raises(ControlError, match="^set_eval_interval: every: "):
            validate("set_eval_interval", {"every": bad})


def test_allocator_params_shape():
    assert validate("set_allocator_params", {"params": {"k": 2}}) == {"params": {"k": 2}}
    for bad in ({}, {"params": {}}, {"params": [1, 2]}, {"params": "k=2"}):
        with pytest.raises(ControlError, match="^set_allocator_params: params: "):
            validate("set_allocator_params", bad)


def test_args_must_be_an_object():
    with pytest.raises(ControlError, match="set_budget: args: must be an object"):
        validate("set_budget", [256])


def test_boundaries():
    assert STAGE_COMMANDS == {"set_temperature"}
    for command in COMMANDS:
        assert applies_at(command, "step")
        assert applies_at(command, "stage") == (command == "set_temperature")
    with pytest.raises(ControlError, match="boundary"):
        applies_at("pause", "epoch")


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_budget_accepts_exactly_the_range(amount):
    ok = 1 <= amount <= LIMITS.max_rollouts
    if ok:
        assert validate("set_budget", {"amount": amount})["amount"] == amount
    else:
        with pytest.raises(ControlError):
            validate("set_budget", {"amount": amount})


def test_parse_params():
    from workbench.control.commands import parse_params

    got = parse_params(["k=4", "mode=greedy", "p = 0.5", "on=true", "w=[1, 2]", 'name="x=y"'])
    assert got == {"k": 4, "mode": "greedy", "p": 0.5, "on": True, "w": [1, 2], "name": "x=y"}
    for bad in (["k"], ["=3"]):
        with pytest.raises(ControlError, match="expected name=value"):
            parse_params(bad)


def test_set_allocator_validated_by_its_config():
    from workbench.allocators import available_allocators

    assert validate("set_allocator", {"name": "multistage", "params": {"n": 4, "n_max": 16}}) == {
        "name": "multistage",
        "params": {"n": 4, "n_max": 16},
    }
    assert validate("set_allocator", {"name": "uniform"}) == {"name": "uniform", "params": {}}
    with pytest.raises(ControlError, match="name: unknown allocator 'nope'.*uniform"):
        validate("set_allocator", {"name": "nope"})
    assert "uniform" in available_allocators()


@pytest.mark.parametrize(
    "params, text",
    [
        ({"m": 3}, "unknown parameter"),
        ({"n": "x"}, "must be an integer"),
        ({"n": -3}, r"\[1, "),
    ],
)
def test_set_allocator_bad_params_name_field(params, text):
    with pytest.raises(ControlError, match=f"^set_allocator: params: allocator 'uniform': .*{text}"):
        validate("set_allocator", {"name": "uniform", "params": params})


def test_set_allocator_params_merged_with_the_allocator_in_force():
    got = validate("set_allocator_params", {"params": {"n": 4}}, allocator="uniform", allocator_params={"n": 8})
    assert got == {"params": {"n": 4}}
    with pytest.raises(ControlError, match="set_allocator_params: params: allocator 'uniform'"):
        validate("set_allocator_params", {"params": {"n": 0}}, allocator="uniform")
    with pytest.raises(ControlError, match="schedule"):
        validate("set_allocator_params", {"params": {"schedule": "bogus"}}, allocator="multistage")


def test_set_staleness_shape():
    assert validate("set_staleness", {"eta": 0}) == {"eta": 0}
    assert validate("set_staleness", {"eta": 2}) == {"eta": 2}
    for bad in (-1, 1.5, "1", True, 10_000):
        with pytest.raises(ControlError, match="^set_staleness: eta: "):
            validate("set_staleness", {"eta": bad})
    with pytest.raises(ControlError, match="^set_staleness: extra: unknown argument"):
        validate("set_staleness", {"eta": 1, "extra": 2})
