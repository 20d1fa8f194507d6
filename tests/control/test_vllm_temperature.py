"""A run that samples with vLLM takes only the temperatures vLLM samples at ([0.01, 2]): at load, at
`ctl temperature` (the API) and when the engine applies a command written straight to the store."""

import pytest

from workbench.config import load_config
from workbench.control.api import set_temperature
from workbench.control.apply import apply_pending
from workbench.errors import ConfigError, ControlError
from workbench.control.commands import control_limits

VLLM_RUNS = [{"backend": "vllm"}, {"backend": "ray", "worker_backend": "vllm"}]


@pytest.mark.parametrize("rollout", VLLM_RUNS)
@pytest.mark.parametrize("bad", [2.5, 10.0, 0.005])
def test_load_refuses_what_vllm_would_not_do(rollout, bad):
    over = [f'rollout.{k}="{v}"' for k, v in rollout.items()] + [f"sampling.temperature={bad}"]
    with pytest.raises(ConfigError, match=r"^sampling\.temperature: .* with rollout backend 'vllm' "
                                          r"\(a number in \[0\.01, 2\]") as e:
        load_config(None, over)
    assert "\n" not in str(e.value)


def test_load_keeps_the_range_of_other_backends():
    assert load_config(None, ["sampling.temperature=5.0"]).sampling.temperature == 5.0
    for t in (0.01, 2.0):
        assert load_config(None, ['rollout.backend="vllm"', f"sampling.temperature={t}"]).sampling.temperature == t


def _run(store, rollout):
    return store.create_run("vllm-temp", {"allocator": {"name": "uniform", "params": {"n": 8}}, "rollout": rollout},
                            0, status="running")


@pytest.mark.parametrize("rollout", VLLM_RUNS)
def test_ctl_temperature_refuses_outside_vllms_range(store, rollout):
    run = _run(store, rollout)
    for bad in (2.01, 0.009):
        with pytest.raises(ControlError, match=rf"run {run}: set_temperature: temperature: {bad} is not allowed "
                                               r"with rollout backend 'vllm'") as e:
            set_temperature(store, run, bad)
        assert "\n" not in str(e.value)
    assert set_temperature(store, run, 0.01) > 0 and set_temperature(store, run, 2.0) > 0


def test_ctl_temperature_of_an_hf_run_is_unchanged(store):
    assert set_temperature(store, _run(store, {"backend": "hf"}), 5.0) > 0


def test_the_engine_rejects_a_raw_command_above_two(store, engine):
    """A command written to the store without the API's checks is rejected where the engine applies it."""
    run = _run(store, {"backend": "vllm"})
    store.add_control(run, "set_temperature", {"temperature": 3.0}, who="raw")
    store.add_control(run, "set_temperature", {"temperature": 0.01}, who="raw")
    engine.control_limits = control_limits({"backend": "vllm"})
    outcomes = apply_pending(store, run, engine, step=1, boundary="stage")
    assert [o["status"] for o in outcomes] == ["rejected", "applied"]
    assert "must be in" in outcomes[0]["reason"] and engine.calls == [("set_temperature", (0.01,))]
    assert control_limits({"backend": "hf"}) is None
