"""The control benchmark's script and summary (the live run itself is measured by the command)."""

from benchmarks.control_bench import script, summarise
from workbench.control.commands import validate
from workbench.control.protocol import COMMANDS
from workbench.errors import ControlError


def test_script_covers_every_kind_with_invalid_ones():
    cmds = script()
    assert len(cmds) >= 20
    assert {c for c, _, _ in cmds} >= set(COMMANDS)
    assert {how for _, _, how in cmds} == {"api", "raw", "refused"}
    assert cmds[-1] == ("stop", {}, "api")
    # what must be refused by the API's shape checks is; what goes through the API validates
    for command, args, how in cmds:
        if how == "api":
            validate(command, args)
        if how == "refused" and command == "set_budget":
            try:
                validate(command, args)
            except ControlError:
                pass
            else:
                raise AssertionError(f"{command} {args} should be invalid")


def test_summarise():
    recs = [
        {"command": "set_budget", "status": "applied", "apply_s": 1.0, "apply_steps": 1},
        {"command": "set_budget", "status": "rejected", "apply_s": 3.0, "apply_steps": 0},
        {"command": "pause", "status": "applied", "apply_s": 2.0, "apply_steps": 1},
        {"command": "set_budget", "status": "refused"},
    ]
    out = summarise(recs)
    assert out["commands"] == 4 and out["applied"] == 2 and out["rejected"] == 1
    assert out["refused_before_insert"] == 1
    assert out["p50_apply_s"] == 2.0 and out["max_apply_s"] == 3.0
    assert out["max_apply_steps"] == 1 and out["min_apply_steps"] == 0
    assert out["kinds"] == ["pause", "set_budget"]
