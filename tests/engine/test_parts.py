"""Engine parts without a model: the sampler, the rollouts table against a plain loop, checkpoints."""

from __future__ import annotations

import numpy as np
import torch

from workbench.engine.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from workbench.engine.sampler import PromptSampler
from workbench.engine.steplog import Rollouts, rollouts_table


def test_sampler_covers_each_epoch_and_resumes_exactly():
    s = PromptSampler(10, seed=3)
    first = s.draw(10)
    assert sorted(first) == list(range(10))
    second = s.draw(10)
    assert sorted(second) == list(range(10)) and second != first  # reshuffled per epoch
    s2 = PromptSampler(10, seed=3)
    s2.draw(7)
    state = s2.state_dict()
    cont = s2.draw(9)
    s3 = PromptSampler(10, seed=3)
    s3.load_state_dict(state)
    assert s3.draw(9) == cont
    assert PromptSampler(10, seed=4).draw(10) != first


def _random_rollouts(n=6, t=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, t + 1, (n,), generator=g)
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    tokens = torch.where(mask, torch.randint(4, 18, (n, t), generator=g), torch.zeros(n, t, dtype=torch.long))
    ent = torch.where(mask, torch.rand(n, t, generator=g), torch.zeros(n, t))
    logp = torch.where(mask, -torch.rand(n, t, generator=g), torch.zeros(n, t))
    return Rollouts(tokens=tokens, logprobs=logp, entropy=ent, lengths=lengths,
                    finished=lengths < t, prompt=np.arange(n) % 3, stage=np.zeros(n, dtype=np.int32),
                    policy_version=np.full(n, 2), temperature=np.ones(n), off_policy=np.zeros(n, bool),
                    responses=[f"r{i}" for i in range(n)], rewards=np.arange(n) % 2 * 1.0,
                    verdicts=["correct" if i % 2 else "wrong" for i in range(n)])


def test_rollouts_table_matches_a_plain_loop():
    r = _random_rollouts()
    table = rollouts_table("run", 7, r, prompt_ids=["a", "b", "c"], idx=np.arange(6), advantage=np.linspace(-1, 1, 6),
                           used=np.ones(6, bool)).to_pylist()
    for i, row in enumerate(table):
        n = int(r.lengths[i])
        assert row["token_ids"] == r.tokens[i, :n].tolist()
        assert np.allclose(row["token_entropy"], r.entropy[i, :n].tolist())
        assert row["length"] == n and row["step"] == 7 and row["prompt_id"] == "abc"[i % 3]
        assert np.isclose(row["logprob_sum"], float(r.logprobs[i, :n].sum()))
        assert np.isclose(row["entropy_mean"], float(r.entropy[i, :n].mean()) if n else 0.0)
        assert np.isclose(row["entropy_max"], float(r.entropy[i, :n].max()) if n else 0.0)
        assert row["finish_reason"] == ("stop" if n < 5 else "length")


def test_concat_pads_and_keeps_order():
    a, b = _random_rollouts(3, 4, 1), _random_rollouts(2, 6, 2)
    c = Rollouts.concat([a, b], pad_token_id=0)
    assert c.tokens.shape == (5, 6)
    assert torch.equal(c.tokens[:3, :4], a.tokens) and torch.equal(c.tokens[3:], b.tokens)
    assert c.responses == a.responses + b.responses


def test_checkpoints_keep_the_newest(tmp_path):
    for step in (2, 4, 6, 8):
        save_checkpoint(tmp_path, step, {"x": torch.tensor([step])}, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000006.pt", "step-000008.pt"]
    st = load_checkpoint(latest_checkpoint(tmp_path))
    assert st["step"] == 8 and int(st["x"]) == 8


def test_a_store_handle_names_the_local_folder(tmp_path):
    """A run given an open Store keeps its checkpoints in that store's directory (not a folder named
    after the Store's repr); a Store over a shared catalog has no folder until one is given, and says so."""
    import pytest

    from workbench.errors import StoreError
    from workbench.store import StoreHandle, open_store

    with open_store(tmp_path / "s") as st:
        assert st.handle == StoreHandle.at(tmp_path / "s")
        assert st.handle.folder() == (tmp_path / "s").absolute() and st.handle.child_env() == {}
    with open_store(catalog=f"sqlite:{tmp_path / 'c.sqlite'}", data_path=str(tmp_path / "d")) as st:
        with pytest.raises(StoreError, match="no local folder"):
            st.handle.folder()
        given = st.handle.at_home(tmp_path / "node")
    with given.open() as st:  # the same catalog and data path, with a folder
        assert st.handle.folder() == tmp_path / "node" and st.location.data_path.startswith(str(tmp_path / "d"))


def test_set_lr_changes_the_optimiser_and_the_schedule_from_its_step():
    import pytest

    from workbench.allocators import make_allocator
    from workbench.config import RunConfig
    from workbench.engine.control import LiveSettings
    from workbench.engine.setup import lr_lambda
    from workbench.errors import ConfigError

    cfg = RunConfig.from_dict({"steps": 10, "optim": {"lr": 1e-3, "warmup_steps": 4, "schedule": "linear",
                                                      "min_lr_ratio": 0.0}})
    param = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.AdamW([param], lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg, 10))
    live = LiveSettings(budget_kind="rollouts", budget=8, allocator=make_allocator("uniform", {}, seed=0),
                        temperature=1.0, eval_every=0, seed=0)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ConfigError, match="^optim.lr: "):
            live.set_lr(bad)  # nothing bound yet, and nothing changed
    live.bind_optimizer(opt, sched)
    opt.step(), sched.step(), opt.step(), sched.step()  # two steps into the warm-up: 3/4 of the peak next
    live.set_lr(2e-3)
    assert opt.param_groups[0]["lr"] == pytest.approx(2e-3 * 3 / 4)
    opt.step(), sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(2e-3)  # the schedule goes on from the new peak
    state = sched.state_dict()
    assert state["base_lrs"] == [2e-3]  # and a checkpoint keeps it
