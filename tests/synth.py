"""A small store filled through the store's writer API with synthetic but consistent rows (two runs,
a few steps, evaluations, a budget and allocator change), for page tests that need no engine."""

from __future__ import annotations

import random

from workbench.store import StepRecord, open_store

PROMPTS = [(f"p{i:02d}", f"{i}+{i + 1}=", str(2 * i + 1)) for i in range(8)]
EVAL_PROMPTS = [(f"e{i:02d}", f"{i}*3=", str(3 * i)) for i in range(4)]
HOSTILE_RESPONSE = "<script>alert(1)</script>"


def _rollout(rng, prompt_id, answer, stage, idx, step, hostile=False):
    right = rng.random() < 0.3 + 0.05 * step
    text = answer if right else str(int(answer) + rng.choice([-1, 1]))
    if hostile:
        text, right = HOSTILE_RESPONSE, False
    ents = [round(rng.random() * 2, 3) for _ in text] + [0.05]
    return {"stage": stage, "prompt_id": prompt_id, "idx": idx, "policy_version": step,
            "response": text, "token_ids": [ord(c) % 18 for c in text] + [2], "token_entropy": ents,
            "reward": 1.0 if right else 0.0, "verdict": "correct" if right else "wrong",
            "finish_reason": "eos", "length": len(text) + 1, "logprob_sum": -rng.random() * 3,
            "entropy_mean": sum(ents) / len(ents), "entropy_max": max(ents),
            "advantage": 0.0, "temperature": 1.0, "off_policy": False, "used_in_update": True}


def fill(path, *, runs=("uniform", "multistage"), steps=6, n=4, seed=0, entropy_quantiles=True) -> list[str]:
    """Write the runs into the store at `path`; returns their ids (oldest first). Without
    `entropy_quantiles` the steps lack the engine's `rollout/entropy_p*` metrics (runs logged before
    the engine wrote them)."""
    rng = random.Random(seed)
    ids = []
    with open_store(path) as store:
        for r, allocator in enumerate(runs):
            cfg = {"allocator": {"name": allocator, "params": {}}, "steps": steps}
            run_id = store.create_run(f"synth-{allocator}", cfg, seed=r, status="running")
            ids.append(run_id)
            prompts = [{"prompt_id": p, "split": "train", "level": 1, "text": t, "answer": a, "metadata": {}}
                       for p, t, a in PROMPTS]
            prompts += [{"prompt_id": p, "split": "eval", "level": 1, "text": t, "answer": a, "metadata": {}}
                        for p, t, a in EVAL_PROMPTS]
            store.add_prompts(run_id, prompts)
            alpha = {p: 1.0 for p, _, _ in PROMPTS}
            beta = {p: 1.0 for p, _, _ in PROMPTS}
            for step in range(steps):
                budget = 32 if step < steps // 2 else 16
                alloc_name = allocator if step < steps - 1 else "uniform"
                chosen = PROMPTS[(step * 4) % 8:(step * 4) % 8 + 4]
                rollouts, allocs, stats = [], [], []
                for j, (pid, _, ans) in enumerate(chosen):
                    hostile = r == 0 and step == steps - 1 and j == 0
                    k = n if budget == 32 else n // 2
                    group = [_rollout(rng, pid, ans, 0, i, step, hostile and i == 0) for i in range(k)]
                    mean = sum(g["reward"] for g in group) / k
                    for g in group:
                        g["advantage"] = g["reward"] - mean
                    rollouts += group
                    allocs.append({"stage": 0, "prompt_id": pid, "allocator": alloc_name, "asked": k, "granted": k,
                                   "reason": f"uniform share of {budget}", "predicted_pass": alpha[pid] / (alpha[pid] + beta[pid]),
                                   "alpha_before": alpha[pid], "beta_before": beta[pid], "budget_kind": "rollouts",
                                   "budget": budget, "budget_left": budget - k * (j + 1), "used_in_update": True})
                    c = sum(1 for g in group if g["reward"] >= 0.5)
                    alpha[pid] += c
                    beta[pid] += k - c
                    stats.append({"prompt_id": pid, "alpha": alpha[pid], "beta": beta[pid],
                                  "pass_mean": alpha[pid] / (alpha[pid] + beta[pid]), "visits": step + 1,
                                  "rollouts": k, "correct": c, "easy_streak": 0, "hard_streak": 0,
                                  "last_step": step, "last_pass": c / k})
                rewards = [g["reward"] for g in rollouts]
                metrics = {"rollout/count": len(rollouts), "rollout/prompts": len(chosen),
                           "rollout/tokens_generated": sum(g["length"] for g in rollouts),
                           "rollout/reward_mean": sum(rewards) / len(rewards), "rollout/reward_std": 0.4,
                           "rollout/entropy_mean": 0.9 - 0.05 * step, "rollout/entropy_p10": 0.3,
                           "rollout/entropy_p90": 1.5, "rollout/zero_signal_frac": 0.25,
                           "train/loss": 0.1, "alloc/budget_kind": "rollouts", "alloc/budget": budget,
                           "alloc/allocator": alloc_name, "alloc/params": {}, "policy_version": step,
                           "timing_s/generate": 0.2, "timing_s/verify": 0.01, "timing_s/train": 0.5,
                           "timing_s/log": 0.05, "timing_s/step": 0.8}
                if not entropy_quantiles:
                    metrics = {k: v for k, v in metrics.items() if not k.startswith("rollout/entropy_p")}
                evals = []
                if step % 2 == 0:
                    evals = [{"prompt_id": p, "level": 1, "samples": 8, "correct": min(8, step + i),
                              "greedy_correct": True, "mean_length": 3.0} for i, (p, _, _) in enumerate(EVAL_PROMPTS)]
                store.write_step(StepRecord(run_id, step, metrics, rollouts, allocs, stats, evals))
            store.set_run_status(run_id, "finished" if r else "running")
    return ids


def fill_imported(path, *, source="verl", steps=5, prompts_per_step=4, n=4, seed=1, sparse=(), evals=True) -> str:
    """One run as an importer writes it (`workbench import`): `runs.source` set, status "imported",
    step metrics computed from the rollouts (the engine's columns — loss, grad norm, timings,
    allocator, budget — null), rollouts without token ids or entropies but with per-token logprobs,
    its prompts, evaluations when `evals`, and NO allocations nor prompt_stats. Prompts in `sparse`
    appear only in steps 0 and steps - 1 (visits far apart). Returns the run id."""
    rng = random.Random(seed)
    cfg = {"source": source, "imported_from": "rollout dumps", "steps": steps}
    with open_store(path) as store:
        run_id = store.create_run(f"{source}-import", cfg, seed=0, source=source, status="imported")
        store.add_prompts(run_id, [{"prompt_id": p, "split": "train", "level": None, "text": t, "answer": a,
                                    "metadata": {}} for p, t, a in PROMPTS]
                          + [{"prompt_id": p, "split": "eval", "level": 1, "text": t, "answer": a, "metadata": {}}
                             for p, t, a in EVAL_PROMPTS])
        dense = [p for p in PROMPTS if p[0] not in sparse]
        for step in range(steps):
            chosen = [p for p in PROMPTS if p[0] in sparse and step in (0, steps - 1)]
            chosen += [dense[(step * prompts_per_step + j) % len(dense)] for j in range(prompts_per_step)]
            rows, zero = [], 0
            for pid, _, ans in chosen:
                group = []
                for i in range(n):
                    right = rng.random() < 0.2 + 0.1 * step
                    text = ans if right else str(int(ans) + 1)
                    group.append({"stage": 0, "prompt_id": pid, "idx": i, "response": text,
                                  "reward": 1.0 if right else 0.0, "verdict": "correct" if right else "wrong",
                                  "length": len(text), "token_logprobs": [-rng.random() for _ in text]})
                zero += len({g["reward"] for g in group}) == 1
                rows += group
            rewards = [r["reward"] for r in rows]
            mean = sum(rewards) / len(rewards)
            metrics = {"rollout/count": len(rows), "rollout/prompts": len(chosen),
                       "rollout/tokens_generated": sum(r["length"] for r in rows),
                       "rollout/reward_mean": mean,
                       "rollout/reward_std": (sum((x - mean) ** 2 for x in rewards) / len(rewards)) ** 0.5,
                       "rollout/zero_signal_frac": zero / len(chosen)}
            ev = []
            if evals and step % 2 == 0:
                ev = [{"prompt_id": p, "level": 1, "samples": 4, "correct": min(4, step // 2 + i),
                       "greedy_correct": None, "mean_length": 2.0} for i, (p, _, _) in enumerate(EVAL_PROMPTS)]
            store.write_step(StepRecord(run_id, step, metrics, rows, [], [], ev))
    return run_id
