"""`workbench bench real-model ...`: the real model (SmolLM2-135M-Instruct) measured, one JSON object
each (benchmarks/real_model.py, docs/real-model.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workbench.commands.common import StoreOpt, print_json, store_path
from workbench.commands.engine import SetOpt

real = typer.Typer(help="The real model (SmolLM2-135M-Instruct): step-0 pass rates, GSM8K, log-prob "
                   "agreement, speed, TRL. Each prints one JSON object.", no_args_is_help=True)


@real.command("step0")
def bench_step0(
    store: StoreOpt = None,
    samples: Annotated[int, typer.Option("--samples", help="Samples per held-out prompt.")] = 8,
    prompts: Annotated[int, typer.Option("--prompts", help="Held-out prompts (0: all).")] = 0,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed.")] = 0,
    set_: SetOpt = None,
) -> None:
    """Held-out pass@1 and pass@8 of the untrained model on configs/smollm2.toml's task (90% intervals)."""
    from benchmarks.real_model import step0

    print_json(step0(store_path(store), samples=samples, prompts=prompts, seed=seed, overrides=list(set_ or [])))


@real.command("gsm8k")
def bench_gsm8k(
    data: Annotated[Path, typer.Argument(help="A GSM8K-format JSONL (question, answer ending '#### x').")],
    store: StoreOpt = None,
    items: Annotated[int, typer.Option("--items", help="First N rows.")] = 16,
    samples: Annotated[int, typer.Option("--samples", help="Samples per row.")] = 4,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Response length cap.")] = 256,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed.")] = 0,
) -> None:
    """GSM8K pass@1 (and pass@k for k <= samples) of the untrained model, chat template, math verifier."""
    from benchmarks.real_model import gsm8k

    print_json(gsm8k(store_path(store), data, items=items, samples=samples, max_new_tokens=max_new_tokens,
                     seed=seed))


@real.command("agreement")
def bench_agreement(
    store: StoreOpt = None,
    prompts: Annotated[int, typer.Option("--prompts", help="Train prompts.")] = 4,
    samples: Annotated[int, typer.Option("--samples", help="Samples per prompt.")] = 4,
    set_: SetOpt = None,
) -> None:
    """Behaviour log-probs at generation vs the trainer's of the same tokens: |diff| and k3 KL."""
    from benchmarks.real_model import agreement

    print_json(agreement(store_path(store), prompts=prompts, samples=samples, overrides=list(set_ or [])))


@real.command("speed")
def bench_speed(
    store: StoreOpt = None,
    steps: Annotated[int, typer.Option("--steps", help="Training steps timed.")] = 3,
    repeats: Annotated[int, typer.Option("--repeats", help="Rollout-vs-bare pairs after the warm-up.")] = 2,
    set_: SetOpt = None,
) -> None:
    """Rollout phase vs bare model.generate, step time by phase, peak resident memory."""
    from benchmarks.real_model import speed

    print_json(speed(store_path(store), steps=steps, repeats=repeats, overrides=list(set_ or [])))


@real.command("trl")
def bench_trl(
    store: StoreOpt = None,
    steps: Annotated[int, typer.Option("--steps", help="Timed steps per side (after one warm-up step).")] = 2,
    rounds: Annotated[int, typer.Option("--rounds", help="Alternations of the engine and TRL.")] = 1,
    set_: SetOpt = None,
) -> None:
    """The engine against TRL's GRPOTrainer on SmolLM2: rollouts/s side by side (the `trl` extra)."""
    from benchmarks.real_trl import trl_vs_engine

    print_json(trl_vs_engine(store_path(store), steps=steps, rounds=rounds, overrides=list(set_ or [])))


@real.command("async")
def bench_real_async(
    store: StoreOpt = None,
    steps: Annotated[int, typer.Option("--steps", help="Steps per run (the first 2 and the last are not "
                                       "timed).")] = 5,
    set_: SetOpt = None,
) -> None:
    """The asynchronous pipeline at eta = 1 against the synchronous loop (1 and 2 torch threads) on
    SmolLM2: rollouts/s, speed-up, the phase-time bound (as `bench async` reports for the organism)."""
    from benchmarks.async_bench import bench_async
    from workbench.models.sources import SMOLLM2_CONFIG

    out = bench_async(steps=steps, etas=[1], profiles=["default"], overrides=list(set_ or []),
                      cache=store_path(store), partial=False, config=SMOLLM2_CONFIG)
    print_json({**out, "organism": None, "model": "smollm2"})


def register(bench: typer.Typer) -> None:
    """Add the `bench real-model` group."""
    bench.add_typer(real, name="real-model")
