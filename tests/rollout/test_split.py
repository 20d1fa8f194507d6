"""The Ray backend's pure parts: splitting a stage across workers, merging results, packing weights,
and the clear line for a cluster that cannot be reached (no Ray runtime needed)."""

import socket

import pytest
import torch

from workbench.errors import WorkbenchError
from workbench.rollout.base import GenerationBatch, group_seed
from workbench.rollout.ray_backend import RayOptions, connect, merge_batches, split_groups
from workbench.rollout.ray_worker import pack_state, unpack_state


def test_split_keeps_groups_together_and_balances_tokens():
    seeds = [5] * 8 + [6] * 8 + [7] * 2 + [8] * 2 + [9] * 4
    lengths = [4] * len(seeds)
    shares = split_groups(seeds, lengths, 10.0, 2)
    assert sorted(r for s in shares for r in s) == list(range(len(seeds)))
    for share in shares:  # a group never straddles workers
        assert all(seeds[r] not in {seeds[x] for x in other} for other in shares if other is not share for r in share)
    load = [sum(10 for _ in s) for s in shares]
    assert abs(load[0] - load[1]) <= 20  # 8+2 vs 8+2+4 rows at worst; LPT gives 12 vs 12
    assert [len(s) for s in shares] == [12, 12]
    assert all(s == sorted(s) for s in shares)
    assert split_groups(seeds, lengths, 10.0, 2) == shares  # deterministic
    assert split_groups(seeds, lengths, 10.0, 1) == [list(range(len(seeds)))]


def test_split_weighs_long_prompts_and_leaves_spare_workers_empty():
    shares = split_groups([1, 1, 2], [100, 100, 3], 1.0, 3)
    assert shares == [[0, 1], [2], []]
    with pytest.raises(WorkbenchError, match="2 seeds for 3 prompts"):
        split_groups([1, 2], [1, 1, 1], 1.0, 2)


def _batch(rows, width, value):
    n = len(rows)
    return GenerationBatch(tokens=torch.full((n, width), value), logprobs=torch.full((n, width), -0.5),
                           entropy=torch.full((n, width), 0.25), lengths=torch.full((n,), width),
                           finished=torch.ones(n, dtype=torch.bool), gen_time_s=0.1)


def test_merge_restores_row_order_and_names_workers():
    parts = [([0, 3], _batch([0, 3], 2, 7), "ray-0"), ([1, 2], _batch([1, 2], 4, 9), "ray-1")]
    out = merge_batches(parts, 4, pad_token_id=0, gen_time_s=1.0)
    assert out.tokens.tolist() == [[7, 7, 0, 0], [9, 9, 9, 9], [9, 9, 9, 9], [7, 7, 0, 0]]
    assert out.workers == ["ray-0", "ray-1", "ray-1", "ray-0"]
    assert out.lengths.tolist() == [2, 4, 4, 2] and out.logprobs[0, 2] == 0 and out.entropy[1, 3] == 0.25


def test_state_round_trip_keeps_dtypes():
    model = torch.nn.Linear(3, 2)
    state = unpack_state(pack_state(model.state_dict()))
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    bf = unpack_state(pack_state(model.to(torch.bfloat16).state_dict()))
    assert bf["weight"].dtype == torch.bfloat16 and torch.equal(bf["weight"], model.weight.detach())


def test_group_seed_depends_on_the_key_only():
    assert group_seed(0, 1, 0, 5) == group_seed(0, 1, 0, 5)
    assert len({group_seed(0, 1, 0, p) for p in range(100)} | {group_seed(0, 2, 0, 5), group_seed(0, 1, 1, 5)}) == 102
    assert 0 <= group_seed(2**40, 3, 1, 7) < 2**63


def test_unreachable_cluster_fails_in_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(WorkbenchError, match=rf"rollout.ray_address: cannot reach a Ray cluster at '127.0.0.1:{port}'") as e:
        connect(RayOptions(address=f"127.0.0.1:{port}", start_timeout_s=5))
    assert "\n" not in str(e.value)
    with pytest.raises(WorkbenchError, match="cannot reach a Ray cluster at 'nohost'"):
        connect(RayOptions(address="nohost", start_timeout_s=5))
