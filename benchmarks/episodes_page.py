"""`workbench bench episodes-page`: the Rollouts page's first view on a run of 1,000 episodes of 6 turns,
beside the same page on a run of 1,000 single-turn rollouts (today's page), and on a run of 1,000 episodes
allocated inside their groups (ARPO trees and GRPO-RoC drops: each group of 4 draws a tree of turns and a
dropped section), timed alternately.

    workbench bench episodes-page --json
    workbench bench episodes-page --episodes 5000 --repeats 9 --json

Three stores are written through the store's writer (one run each, 10 steps): one whose rollouts are
episodes (a prompt turn, then assistant / tool / assistant / tool / assistant: two calculator calls, every
turn with its token ids and the assistant turns with per-token entropy and log-probs), one of plain
single-turn rollouts with the same prompts, rewards and token counts, and ("allocated") the episodes again
with each group of 4 made an ARPO tree (#2 branched from #0 and #3 from #1 after the first tool result,
their first three turns their parent's, with a branch decision) and GRPO-RoC's decision (#1 and #3 dropped,
with a penalty and reason). Each page's script is run with
Streamlit's AppTest (`benchmarks.app_bench.time_pages`: a first run, then `repeats` rounds of a cold run,
data cache cleared, and a cached one), the two stores alternating. The page-time targets the dashboard's
pages keep (docs/dashboard.md): p50 <= 0.7 s, p95 <= 2 s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np


def _episode(rng: np.random.Generator, a: int, b: int, c: int) -> Any:
    from workbench.episodes import Episode, ToolCall, Turn

    def toks(n: int) -> list[int]:
        return [int(x) for x in rng.integers(4, 20, n)]

    def ent(n: int) -> list[float]:
        return [float(x) for x in rng.random(n)]

    prod = a * b
    total = prod + c
    turns = [Turn("user", f"{a}*{b}+{c}=", token_ids=toks(9))]
    for expr, value in ((f"{a}*{b}", prod), (f"{prod}+{c}", total)):
        turns.append(Turn("assistant", f"<calc>{expr}</calc>", token_ids=toks(9), entropy=ent(9), logprobs=ent(9),
                          finish_reason="tool_call", started_s=0.0, seconds=0.01,
                          tool_calls=[ToolCall("calculator", expr, str(value), seconds=0.0002)]))
        turns.append(Turn("tool", str(value), token_ids=toks(6), started_s=0.01, seconds=0.001))
    turns.append(Turn("assistant", str(total), token_ids=toks(6), entropy=ent(6), logprobs=ent(6),
                      finish_reason="stop", started_s=0.02, seconds=0.005))
    return Episode(turns)


ALLOCATED_BRANCH_AT = 15
"""Response position of the allocated store's branches: the first assistant turn (9 tokens) and its result (6)."""


def _allocate(row: dict[str, Any], ep: Any, parents: dict[int, Any]) -> Any:
    """Make `row` (of a group of 4) an ARPO branch or root and give it RoC's decision (module docstring);
    return its episode (a branch's first three turns are its parent's)."""
    from workbench.episodes import Episode

    idx = row["idx"]
    if idx >= 2:
        ep = Episode(parents[idx - 2].turns[:3] + ep.turns[3:])
        row.update(parent_idx=idx - 2, branch_at=ALLOCATED_BRANCH_AT, branch_entropy_before=0.31,
                   branch_entropy_after=0.27, branch_draw=0.42)
    parents[idx] = ep
    kept = idx % 2 == 0
    row.update(shape="episodes", filter_kept=kept, filter_penalty=0.0 if kept else 1.0,
               filter_reason="correct_low_penalty" if kept else "wrong_not_sampled")
    return ep


def build_store(path: Path, episodes: int, *, multi_turn: bool, steps: int = 10, seed: int = 0,
                allocated: bool = False) -> str:
    """A store at `path` with one run of `episodes` rollouts over `steps` steps (module docstring);
    `allocated`: the episodes as ARPO trees with GRPO-RoC's decisions."""
    from workbench.episodes import episode_rows
    from workbench.store import StepRecord, open_store

    rng = np.random.default_rng(seed)
    per_step = max(1, episodes // steps)
    with open_store(path) as st:
        rid = st.create_run("episodes-page" if multi_turn else "single-turn-page",
                            {"task": {"profile": "tools"}, "rollout": {"shape": "episodes" if multi_turn else
                                                                       "independent"}}, seed=seed)
        for step in range(1, steps + 1):
            rows, turns, calls, prompts, parents = [], [], [], {}, {}
            for i in range(per_step):
                a, b, c = (int(x) for x in rng.integers(10, 99, 3))
                pid = f"p{step}-{i // 4}"
                prompts[pid] = {"prompt_id": pid, "text": f"{a}*{b}+{c}=", "answer": str(a * b + c), "level": 5}
                ep = _episode(rng, a, b, c)
                key = {"stage": 0, "prompt_id": pid, "idx": i % 4}
                row: dict[str, Any] = dict(key)
                if allocated:
                    ep = _allocate(row, ep, parents)
                reward = float(rng.random() < 0.6)
                sampled = [t for t in ep.response_turns if t.role == "assistant"]
                row = {**row, **key, "response": "".join(t.text for t in ep.response_turns), "reward": reward,
                       "correct": reward > 0, "verdict": "correct" if reward else "wrong", "finish_reason": "stop",
                       "token_ids": [x for t in sampled for x in t.token_ids],
                       "token_entropy": [x for t in sampled for x in t.entropy], "advantage": reward - 0.6,
                       "length": ep.model_tokens, "policy_version": step - 1, "temperature": 1.0}
                if multi_turn:
                    t, c_ = episode_rows(ep, key)
                    turns += t
                    calls += c_
                    row.update(ep.summary())
                else:
                    row["response"] = ep.turns[-1].text
                rows.append(row)
            st.write_step(StepRecord(run_id=rid, step=step, metrics={"rollout/reward_mean": 0.6}, rollouts=rows,
                                     prompts=list(prompts.values()), turns=turns, tool_calls=calls))
        st.set_run_status(rid, "finished")
    return rid


def bench_episodes_page(store_dir: str, *, episodes: int = 1000, repeats: int = 5) -> dict[str, Any]:
    """Both stores built under `store_dir` (once), the Rollouts page timed on each (module docstring)."""
    from benchmarks.app_bench import time_pages

    root = Path(store_dir)
    stores = {}
    for label, multi, allocated in (("episodes", True, False), ("single_turn", False, False),
                                    ("allocated", True, True)):
        path = root / f"{label}-{episodes}"
        if not (path / "catalog.sqlite").exists():
            build_store(path, episodes, multi_turn=multi, allocated=allocated)
        stores[label] = str(path)
    times = time_pages(stores, repeats=repeats, pages=["rollouts"])
    ep, one, alloc = (times[k]["rollouts"] for k in ("episodes", "single_turn", "allocated"))
    meets = all(t["cold"]["median"] <= 700 and t["cold"]["p95"] <= 2000 for t in (ep, alloc))
    return {"episodes": episodes, "turns_per_episode": 6, "repeats": repeats, "load": list(os.getloadavg()),
            "rollouts_page": {"episodes": ep, "single_turn": one, "allocated": alloc},
            "cold_median_ratio": round(ep["cold"]["median"] / max(one["cold"]["median"], 1e-9), 3),
            "allocated_cold_median_ratio": round(alloc["cold"]["median"] / max(ep["cold"]["median"], 1e-9), 3),
            "targets": {"p50_ms": 700, "p95_ms": 2000}, "meets_targets": bool(meets)}
