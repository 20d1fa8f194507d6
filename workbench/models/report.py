"""`workbench organism report`: build the organism (twice, to check determinism) and measure what
RL will start from: pass@1 and pass@8 at temperature 1 on the held-out eval prompts, per level, and
the share of prompts whose pass rate is strictly between 0 and 1.

pass@k is the unbiased estimator 1 - C(n-c, k) / C(n, k) with n samples of which c are correct.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from workbench.models.organism import OrganismRecipe, build_organism, weights_digest


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate_organism(
    path: str | Path, recipe: OrganismRecipe, samples: int = 16, seed: int = 0, temperature: float = 1.0
) -> dict[str, Any]:
    """Sample `samples` answers per eval prompt and summarise pass rates (see module docstring)."""
    import torch

    from workbench.models.loading import load_model
    from workbench.models.sampling import sample_ids
    from workbench.tasks import ArithmeticTask

    model, tok = load_model(path)
    task = ArithmeticTask(recipe.task)
    prompts = task.eval_prompts()
    ids = [tok(p.text)["input_ids"] for p in prompts]
    gen = torch.Generator().manual_seed(seed)
    width = max(len(p.answer) for p in prompts) + 2
    start = time.perf_counter()
    outs = sample_ids(model, [i for i in ids for _ in range(samples)], eos_id=tok.eos_token_id,
                      pad_id=tok.pad_token_id, max_new_tokens=width, temperature=temperature, generator=gen)
    greedy = sample_ids(model, ids, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                        max_new_tokens=width, temperature=0)
    gen_s = time.perf_counter() - start
    by_level: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    rates, p1, p8, greedy_ok = [], [], [], 0
    for i, p in enumerate(prompts):
        texts = tok.batch_decode(outs[i * samples : (i + 1) * samples], skip_special_tokens=True)
        c = sum(bool(task.verify(t, p).correct) for t in texts)
        rates.append(c / samples)
        p1.append(pass_at_k(samples, c, 1))
        p8.append(pass_at_k(samples, c, min(8, samples)))
        g = bool(task.verify(tok.decode(greedy[i], skip_special_tokens=True), p).correct)
        greedy_ok += g
        by_level[p.level].append((p1[-1], p8[-1], float(g)))
    mean = lambda xs: round(sum(xs) / len(xs), 4)  # noqa: E731
    return {
        "eval_prompts": len(prompts),
        "samples_per_prompt": samples,
        "frac_intermediate": mean([0.0 < r < 1.0 for r in rates]),
        "pass1": mean(p1),
        "pass8": mean(p8),
        "greedy": round(greedy_ok / len(prompts), 4),
        "pass1_by_level": {str(k): mean([x[0] for x in v]) for k, v in sorted(by_level.items())},
        "pass8_by_level": {str(k): mean([x[1] for x in v]) for k, v in sorted(by_level.items())},
        "greedy_by_level": {str(k): mean([x[2] for x in v]) for k, v in sorted(by_level.items())},
        "eval_gen_s": round(gen_s, 2),
    }


def organism_report(recipe: OrganismRecipe | None = None, *, check_determinism: bool = True,
                    samples: int = 16, keep_dir: str | Path | None = None) -> dict[str, Any]:
    """Build (twice when `check_determinism`), evaluate, and return the report dict."""
    recipe = recipe or OrganismRecipe()
    with tempfile.TemporaryDirectory(prefix="organism-report-") as tmp:
        first = Path(keep_dir) if keep_dir is not None else Path(tmp) / "a"
        meta = build_organism(first, recipe)
        report: dict[str, Any] = {k: meta[k] for k in ("build_s", "build_cpu_s", "params", "hash", "weights_sha256",
                                                       "built_with")}
        if check_determinism:
            second = build_organism(Path(tmp) / "b", recipe)
            report["deterministic"] = weights_digest(first) == weights_digest(Path(tmp) / "b")
            report["build2_s"] = second["build_s"]
        report.update(evaluate_organism(first, recipe, samples=samples))
        report["pass8_minus_pass1"] = round(report["pass8"] - report["pass1"], 4)
        report["warm_start_loss"] = meta["final_loss"]
    return report
