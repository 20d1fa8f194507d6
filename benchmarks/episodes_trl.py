"""The engine's episodes against TRL 1.16's `GRPOTrainer(tools=[...])` on SmolLM2-135M-Instruct with the
calculator (configs/smollm2-tools.toml): the two halves, each timing its steps (docs/episodes-smollm2.md,
"Against TRL", has the figures and the two commands that ran them one after the other; a command that
alternates them in rounds is not built yet).

TRL parses calls only through a chat template it knows (docs/episodes-smollm2.md, "Against TRL"), so both
sides use one: a copy of the converted SmolLM2 directory (weights linked, not copied) whose
`chat_template.jinja` is TRL's own `qwen2_5.jinja` (SmolLM2 and Qwen 2.5 share the ChatML tokens). The
same questions (the config's task template), the same calculator (our sandbox's, which TRL calls as a
Python function), the same calls per episode (`tools.max_calls` = `max_tool_calling_iterations`), the same
batch (prompts x episodes), tokens per turn (`max_completion_length` = `sampling.max_new_tokens`),
temperature, learning rate and clipping, on the CPU with the same torch threads. What differs: TRL renders
the tool list into the system turn (the engine's prompt describes the tool in the user turn only), and
Qwen's tool turn has a newline either side of the result. Each side runs `WARMUP + steps` steps; the
figure is the median of the timed steps' wall times.
"""

from __future__ import annotations

import contextlib
import io
import time
from pathlib import Path
from typing import Any

WARMUP = 1
"""Steps of each run not timed (the first also pays the set-up)."""
CONFIG = "configs/smollm2-tools.toml"


def shared_template_dir(model_dir: Path, out: Path) -> Path:
    """`model_dir` with TRL's Qwen 2.5 chat template (its files linked; the template written)."""
    import trl

    out.mkdir(parents=True, exist_ok=True)
    for f in model_dir.iterdir():
        if f.name != "chat_template.jinja" and not (out / f.name).exists():
            (out / f.name).symlink_to(f.resolve())
    template = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"
    (out / "chat_template.jinja").write_text(template.read_text(encoding="utf-8"), encoding="utf-8")
    return out


def engine_step_times(cfg: Any, store: Path) -> list[dict[str, Any]]:
    """One engine run of `cfg`: each step's wall time (less its evaluation and checkpoint) and metrics."""
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


def trl_step_times(cfg: Any, model_dir: Path, out: Path, steps: int) -> tuple[list[float], dict[str, Any]]:
    """TRL's GRPOTrainer with the calculator on `cfg`'s workload: each timed step's wall time, and its
    tool counters."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from workbench.models import load_model
    from workbench.tasks import get_task
    from workbench.tools import Sandbox

    model, tokenizer = load_model(str(model_dir))
    task = get_task(dict(cfg.task))
    prompts = {p.id: p for p in task.train_prompts()}
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p.text}], "pid": p.id} for p in prompts.values()])
    box = Sandbox(cfg.tools.limits)

    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression and return its value.

        Args:
            expression: the expression, e.g. 37*48
        """
        return box.call("calculator", {"expression": expression}, cfg.tools.limits).text

    def reward(prompts, completions, pid, **_: Any) -> list[float]:  # noqa: ANN001 - TRL's signature
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [task.verify(t, by_id[i]).reward for t, i in zip(texts, pid)]

    by_id = prompts
    marks: list[float] = []
    logs: list[dict[str, Any]] = []

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            marks.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            logs_seen.append(dict(logs or {}))

    logs_seen = logs
    from benchmarks.real_trl import grpo_kwargs

    args = GRPOConfig(**grpo_kwargs(cfg, out, steps + WARMUP), max_tool_calling_iterations=cfg.tools.max_calls)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=tokenizer, callbacks=[Timer()], tools=[calculator])
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.train()
    finally:
        torch.use_deterministic_algorithms(deterministic)
        box.close()
    tools = {k: v for log in logs for k, v in log.items() if "tool" in k}
    return [b - a for a, b in zip([t0] + marks[:-1], marks)][WARMUP:], tools
