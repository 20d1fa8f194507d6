"""`workbench bench episodes-trl`: the engine's episodes against TRL 1.16's `GRPOTrainer(tools=[...])` on the
same model, task, tool, chat template and limits, whole GRPO steps on both sides, alternated in rounds.

    workbench bench episodes-trl --json                                   # 2 rounds x 2 timed steps a side
    workbench bench episodes-trl --rounds 3 --steps 1 --prompts 2 --episodes 4 --threads 2 --json

What is the same on both sides (configs/smollm2-tools-warm.toml; docs/episodes-smollm2.md, "Against TRL"):

1. The model: SmolLM2-135M taught to call the calculator (`model.path = "smollm2-tools"`), loaded from the
   same directory, with the same chat template (Qwen 2.5's, TRL's own `qwen2_5.jinja`).
2. The prompt, token for token: the question as a user turn, the calculator's schema rendered by that
   template into the system turn (the engine: `model.chat_tools`; TRL: the Python function's schema, built
   from its docstring). Checked every run (`same_prompt_tokens`, `same_tool_schema`).
3. The tool: our calculator in its sandbox; TRL calls it through a Python function of the same name.
4. The calls and results: Hermes calls in `<tool_call>` JSON, results fed as the template's tool turn
   (the engine: `tools.syntax = "qwen"` + `tools.result_template`; TRL: its response parser and
   `_get_tool_suffix_ids`). Tool tokens are never trained on (the engine's loss mask, TRL's `tool_mask`).
5. The limits: tool calls per episode (`tools.max_calls` = `max_tool_calling_iterations`), tokens per
   episode, model and tool tokens together (`rollout.episodes.max_total_tokens` = `max_completion_length`,
   also each turn's cap), the batch (prompts x episodes), temperature, learning rate, clipping, no KL.
6. The timing: the wall time of a whole GRPO step (generate with tools, reward, loss, backward, optimizer
   step; the engine also writes the step to its store). `WARMUP` steps of each run are not timed.

What differs: the engine decodes each turn on from its KV cache and feeds tool results into it, TRL
re-encodes prompt + completion + result for every turn (no cache between turns); TRL runs with its default
gradient checkpointing; without a KL term the engine skips the rows of groups whose rewards all agree (a
step where all do has no update: `engine_steps_without_update`), TRL does not: `--set algorithm.kl_coef=0.001`
(TRL's `beta` follows it) makes both train on every row and keep a reference model. Episodes per second =
episodes per step / median step seconds.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

WARMUP = 1
"""Steps of each run not timed (the first also pays the set-up: loading, first forward)."""
CONFIG = "configs/smollm2-tools-warm.toml"


def engine_steps(cfg: Any, store: Path) -> list[dict[str, Any]]:
    """One engine run of `cfg`: each timed step's wall time (less any evaluation and checkpoint) and metrics."""
    from workbench.engine import run

    marks: list[dict[str, Any]] = []
    last = [time.perf_counter()]

    def on_step(step: int, m: dict[str, Any]) -> None:
        now = time.perf_counter()
        if step > 0:
            extra = m.get("timing_s/eval", 0.0) + m.get("timing_s/checkpoint", 0.0)
            marks.append({"wall_s": now - last[0] - extra, **m})
        last[0] = now

    run(cfg, store=str(store), on_step=on_step)
    return marks[WARMUP:]


def trl_tool(name: str, call: Callable[[dict[str, Any]], str]) -> Callable[..., str]:
    """The tool `name` as the Python function TRL takes: its schema (from the signature and docstring)
    equals `workbench.tools.tool_specs([name])[0]`; `call(arguments)` runs it."""
    import inspect

    from workbench.tools import tool_specs

    spec = tool_specs([name])[0]["function"]
    params = spec["parameters"]["properties"]

    def tool(**arguments: str) -> str:
        return call(arguments)

    tool.__name__ = tool.__qualname__ = name
    args = "\n".join(f"    {k}: {v['description']}" for k, v in params.items())
    tool.__doc__ = f"{spec['description']}\n\nArgs:\n{args}\n"
    tool.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, annotation=str) for k in params])
    tool.__annotations__ = {k: str for k in params}
    return tool


def prompt_check(cfg: Any, tokenizer: Any, text: str, tool: Callable[..., str]) -> dict[str, bool]:
    """Whether both sides render the same prompt tokens and the same tool schema."""
    from transformers.utils import get_json_schema

    from workbench.engine.setup import chat_tools, encode_prompts
    from workbench.tasks.base import Prompt

    ours = encode_prompts(tokenizer, [Prompt(id="p", text=text, answer="")], True, chat_tools(cfg))[0]
    theirs = tokenizer.apply_chat_template([{"role": "user", "content": text}], tools=[tool], tokenize=False,
                                           add_generation_prompt=True)
    theirs_ids = tokenizer(theirs, add_special_tokens=False)["input_ids"]
    return {"same_prompt_tokens": list(ours) == list(theirs_ids),
            "same_tool_schema": [get_json_schema(tool)] == (chat_tools(cfg) or [])}


def trl_steps(cfg: Any, model_dir: Path, out: Path, steps: int) -> tuple[list[float], list[dict[str, Any]], dict]:
    """TRL's GRPOTrainer(tools=[calculator]) on `cfg`'s workload: each timed step's wall time, its logs,
    and the prompt check."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from benchmarks.real_trl import grpo_kwargs
    from workbench.config import task_config
    from workbench.models import load_model
    from workbench.tasks import get_task
    from workbench.tools import Sandbox

    model, tokenizer = load_model(str(model_dir))
    task = get_task(task_config(cfg.task))
    prompts = {p.id: p for p in task.train_prompts()}
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p.text}], "pid": p.id} for p in prompts.values()])
    box = Sandbox(cfg.tools.limits)
    tools = [trl_tool(n, functools.partial(lambda n, a: box.call(n, a, cfg.tools.limits).text, n))
             for n in cfg.tools.enabled]
    checks = prompt_check(cfg, tokenizer, next(iter(prompts.values())).text, tools[0])

    def reward(prompts, completions, pid, **_: Any) -> list[float]:  # noqa: ANN001 - TRL's signature
        # the answer is the last assistant turn (an episode that ends on a tool result has none)
        texts = [c[-1]["content"] if c and c[-1]["role"] == "assistant" else "" for c in completions]
        return [task.verify(t, by_id[i]).reward for t, i in zip(texts, pid)]

    by_id = prompts
    marks: list[float] = []
    logs: list[dict[str, Any]] = []

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            marks.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            if logs and "tools/call_frequency" in logs:
                seen.append(dict(logs))

    seen = logs
    # beta follows algorithm.kl_coef: with a KL term both sides train on every row (the engine otherwise
    # skips the rows of groups whose rewards all agree, TRL never does) and both keep a reference model
    kwargs = {**grpo_kwargs(cfg, out, steps + WARMUP), "beta": cfg.algorithm.kl_coef}
    args = GRPOConfig(**kwargs, max_tool_calling_iterations=cfg.tools.max_calls)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=tokenizer, callbacks=[Timer()], tools=tools)
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)  # TRL as its users run it
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints its logs; our stdout is JSON
            trainer.train()
    finally:
        torch.use_deterministic_algorithms(deterministic)
        box.close()
    checks["gradient_checkpointing"] = bool(args.gradient_checkpointing)
    return [b - a for a, b in zip([t0] + marks[:-1], marks)][WARMUP:], logs[WARMUP:], checks


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def bench_episodes_trl(store_dir: str, *, config: str = CONFIG, rounds: int = 2, steps: int = 2, prompts: int = 2,
                       episodes: int = 4, threads: int = 2, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Episodes/s of the engine and of TRL's GRPOTrainer(tools=[...]), alternated `rounds` times (module
    docstring); one JSON-able dict."""
    import torch

    from benchmarks.engine_bench import missing_peer
    from workbench.config import load_config
    from workbench.errors import ConfigError
    from workbench.models.sources import run_model_dir

    absent = missing_peer()
    if absent is not None:
        raise ConfigError(f"bench episodes-trl: {absent} is not installed (pip install -e '.[trl]')")
    cfg = load_config(config, ["eval.at_start=false", "eval.every=0", "checkpoint.every=0", f"steps={steps + WARMUP}",
                               f"allocator.prompts_per_step={prompts}", f"allocator.params.n={episodes}",
                               f"allocator.budget={prompts * episodes}", f"model.threads={threads}", *overrides])
    if cfg.rollout.shape != "episodes" or not cfg.model.chat_tools:
        raise ConfigError(f"bench episodes-trl: {config} must set rollout.shape = \"episodes\" and model.chat_tools = "
                          "true (TRL renders the tools into the prompt)")
    model_dir = run_model_dir(cfg, store_dir)  # the warm start is built into the store's models/ when missing
    per_step = prompts * episodes
    ours: list[dict[str, Any]] = []
    theirs: list[float] = []
    trl_logs: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    load = [round(os.getloadavg()[0], 1)]
    root = Path(tempfile.mkdtemp(prefix="workbench-episodes-trl-"))
    try:
        (root / "store").mkdir()
        (root / "store" / "models").symlink_to((Path(store_dir) / "models").resolve())
        for r in range(rounds):
            order = ("engine", "trl") if r % 2 == 0 else ("trl", "engine")
            for side in order:
                torch.set_num_threads(threads)
                if side == "engine":
                    ours += engine_steps(cfg.replace(seed=cfg.seed + r), root / "store")
                else:
                    times, logs, checks = trl_steps(cfg.replace(seed=cfg.seed + r), model_dir, root / f"trl-{r}", steps)
                    theirs += times
                    trl_logs += logs
                load.append(round(os.getloadavg()[0], 1))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return _report(cfg, model_dir, per_step, rounds, ours, theirs, trl_logs, checks, load, threads)


def _report(cfg: Any, model_dir: Path, per_step: int, rounds: int, ours: list[dict[str, Any]], theirs: list[float],
            trl_logs: list[dict[str, Any]], checks: dict[str, Any], load: list[float], threads: int) -> dict[str, Any]:
    """The JSON of `bench_episodes_trl`."""
    ours_s, theirs_s = _median([m["wall_s"] for m in ours]), _median(theirs)
    calls_ours = _median([m.get("episodes/tool_calls", 0.0) for m in ours])
    calls_theirs = _median([log["tools/call_frequency"] for log in trl_logs])
    both = bool(calls_ours) and bool(calls_theirs)
    out: dict[str, Any] = {
        "model": model_dir.name, "episodes_per_step": per_step, "rounds": rounds, "threads": threads,
        "limits": {"max_total_tokens": cfg.rollout.episodes.max_total_tokens,
                   "turn_tokens": cfg.sampling.max_new_tokens,
                   "max_tool_calls": cfg.tools.max_calls, "max_turns": cfg.rollout.episodes.max_turns,
                   "temperature": cfg.sampling.temperature, "kl_coef": cfg.algorithm.kl_coef},
        **checks,
        "steps_timed": {"engine": len(ours), "trl": len(theirs)},
        "engine_step_s": [round(m["wall_s"], 2) for m in ours], "trl_step_s": [round(s, 2) for s in theirs],
        "engine_episodes_per_s": round(per_step / ours_s, 4) if ours_s else None,
        "trl_episodes_per_s": round(per_step / theirs_s, 4) if theirs_s else None,
        "ratio_vs_trl": round(theirs_s / ours_s, 2) if ours_s and theirs_s else None,
        "tool_calls_per_episode": {"engine": calls_ours, "trl": calls_theirs},
        "tool_calls_on_both_sides": both,
        "model_tokens_per_episode": {"engine": _median([m.get("episodes/model_tokens", 0.0) for m in ours]),
                                     "trl": _median([log.get("completions/mean_length", 0.0) for log in trl_logs])},
        "reward_mean": {"engine": _median([m.get("rollout/reward_mean", 0.0) for m in ours]),
                        "trl": _median([log.get("reward", 0.0) for log in trl_logs])},
        "tool_failure_rate": {"engine": _median([m.get("episodes/tool_error_rate", 0.0) for m in ours]),
                              "trl": _median([log.get("tools/failure_frequency", 0.0) for log in trl_logs])},
        "engine_steps_without_update": sum(1 for m in ours if m.get("train/optimizer_steps", 1) == 0),
        "engine_phase_s": {k: _median([m.get(f"timing_s/{k}", 0.0) for m in ours])
                           for k in ("generate", "train", "log")},
        "load_average_1min": load, "trl_version": __import__("trl").__version__,
    }
    if not both:
        out["WARNING"] = ("no tool call on at least one side: this compares single-turn GRPO, not the tool loops "
                          f"(tool calls per episode: engine {calls_ours}, TRL {calls_theirs})")
    return out
