"""Live logging from TRL's `GRPOTrainer` into a workbench store, so the Run page shows a TRL run while
it trains.

    from workbench.integrations.trl import WorkbenchGRPOTrainer, with_workbench
    trainer = WorkbenchGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
                                   store="store", run_name="my-trl-run")
    trainer.train()                       # status running -> finished (failed on an exception)
    MyTrainer = with_workbench(MyGRPOSubclass)   # the same for a user's own subclass

What is captured, and where (TRL 1.16, read in `trl/trainer/grpo_trainer.py`):
1. Completions are taken where TRL scores them: `_calculate_rewards` sees the prompts, completion texts,
   completion token ids and returns every reward function's value per completion; right after,
   `_generate_and_score_completions` returns the advantages, masks and (when TRL has them) the
   behaviour log-probs (`sampling_per_token_logps` from vLLM, else `old_per_token_logps`).
   TrainerCallbacks never see completions.
2. Per-token entropy is computed by TRL in its loss (`_get_per_token_logps_and_entropies(...,
   compute_entropy=True)`) and not kept. A row-id tensor travels with each generation batch through
   TRL's shuffle and split, so the entropies (and log-probs) of the first update that uses each
   completion are caught there and mapped back to their completion.
3. One store step per optimizer step, numbered as TRL's `global_step`. A generation batch's
   completions belong to the step it was generated for, written once; a step is ready when it has
   ended, TRL has logged it (if it logs that step), and every completion of it has been through the
   loss. Ready steps go to a background thread when the next update starts (as the engine's
   StepWriter: TRL's generation is a Python loop the writer's Python work would slow), which commits
   them with `Store.write_steps` (several whole steps per transaction when they queue up) and
   heart-beats the run; `train()` returns after the last commit.

`python -m benchmarks.trl_overhead` measures the overhead (docs/trl.md).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbench.errors import WorkbenchError
from workbench.integrations.trl_writer import HEARTBEAT_S, GenerationBatch, TrainStep, StepWriter

TESTED_TRL = ("1.16",)
"""TRL major.minor versions this module is tested with (it reads private methods of GRPOTrainer)."""


def check_trl_version(version: str | None = None) -> str:
    """The installed TRL version, if tested; else WorkbenchError naming installed and tested versions."""
    if version is None:
        try:
            import trl
        except ImportError as exc:
            raise WorkbenchError("workbench.integrations.trl needs TRL: install the trl extra "
                                 "(pip install -e '.[trl]')") from exc
        version = trl.__version__
    if ".".join(version.split(".")[:2]) not in TESTED_TRL:
        tested = ", ".join(v + ".x" for v in TESTED_TRL)
        raise WorkbenchError(f"workbench.integrations.trl is tested with TRL {tested}; "
                             f"TRL {version} is installed (it hooks GRPOTrainer internals that change between "
                             f"versions). Install a tested version, e.g. pip install 'trl=={TESTED_TRL[-1]}.*'")
    return version


def prompt_id(text: str) -> str:
    """The stable id of a prompt text (BLAKE2b, 8-byte digest, hex), the importers' rule (`common.prompt_ids`)."""
    import polars as pl

    from workbench.integrations.common import prompt_ids

    return str(prompt_ids(pl.Series([text]))[0])


def _text(x: Any) -> str:
    """A prompt or completion as text: strings as they are, chat messages as `role: content` lines."""
    if isinstance(x, str):
        return x
    if isinstance(x, list):
        lines = []
        for m in x:
            if isinstance(m, dict):
                content = m.get("content", "")
                if isinstance(content, list):
                    content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
                lines.append(f"{m.get('role', '?')}: {content}")
            else:
                lines.append(str(m))
        return "\n".join(lines)
    return str(x)


TRL_TO_STEP = {"loss": "train/loss", "grad_norm": "train/grad_norm", "learning_rate": "train/lr", "kl": "train/kl",
               "clip_ratio/region_mean": "train/clip_frac", "entropy": "rollout/entropy_mean"}
"""TRL's logged names -> our step metric names (every numeric TRL value is also kept as `trl/<name>`)."""


class _WorkbenchMixin:
    """Hooks a GRPOTrainer (see the module docstring); made into classes by `with_workbench`."""

    def __init__(self, *args: Any, store: Any = None, run_name: str | None = None, answer_column: str = "answer",
                 heartbeat_s: float = HEARTBEAT_S, **kwargs: Any) -> None:
        check_trl_version()
        if store is None:
            raise WorkbenchError("WorkbenchGRPOTrainer: store= is required (a store directory or an open Store)")
        super().__init__(*args, **kwargs)
        if self.accelerator.num_processes > 1:
            raise WorkbenchError(f"WorkbenchGRPOTrainer: {self.accelerator.num_processes} processes; live logging "
                                 "is tested single-process only (write TRL's completions files and import them)")
        from transformers import TrainerCallback

        outer = self

        class _StepHook(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
                outer._wb_step_end(state.global_step, bool(control.should_log))
                if outer._wb_writer is not None and outer._wb_writer.stop_requested:
                    control.should_training_stop = True  # a `stop` from the dashboard or CLI

        self.add_callback(_StepHook())
        self._wb_store_arg, self._wb_answer_column, self._wb_heartbeat_s = store, answer_column, heartbeat_s
        self._wb_run_name = run_name or getattr(self.args, "run_name", None) or Path(self.args.output_dir).name
        self._wb_writer: StepWriter | None = None
        self.workbench_run_id: str | None = None
        self.workbench_writer_stats: dict[str, Any] = {}
        self._wb_reset()

    # -- lifecycle ----------------------------------------------------------------------------
    def train(self, *args: Any, **kwargs: Any):
        from workbench.store import Store, open_store

        own = not isinstance(self._wb_store_arg, Store)
        # one DuckDB thread, as the engine's: more fight torch's threads on a small machine
        store = open_store(self._wb_store_arg, threads=1) if own else self._wb_store_arg
        self._wb_reset()
        try:
            run_id = store.create_run(self._wb_run_name, self._wb_config(), int(self.args.seed), status="running",
                                      source="trl")
        except BaseException:
            if own:
                store.close()
            raise
        self.workbench_run_id = run_id
        self._wb_writer = StepWriter(store, run_id, self._wb_static(), self._wb_heartbeat_s)
        status, error, trained = "finished", None, False
        try:
            result = super().train(*args, **kwargs)
            trained = True
            if self._wb_writer is not None and self._wb_writer.stop_requested:
                status = "stopped"
            return result
        except KeyboardInterrupt:
            status, error = "stopped", "interrupted (KeyboardInterrupt)"
            raise
        except BaseException as exc:
            status, error = "failed", f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500]
            raise
        finally:
            writer, self._wb_writer = self._wb_writer, None
            write_error: WorkbenchError | None = None
            try:
                self._wb_release(writer, final=True)
            except WorkbenchError as exc:
                write_error = exc
            try:
                writer.close()
            except WorkbenchError as exc:
                write_error = write_error or exc
            self.workbench_writer_stats = {"steps_written": writer.steps_written, "writer_cpu_s": writer.cpu_s}
            if write_error is not None and status == "finished":
                status, error = "failed", str(write_error).splitlines()[0][:500]
            try:
                store.set_run_status(run_id, status, error=error)
            finally:
                if own:
                    store.close()
            if write_error is not None and trained:
                raise write_error  # noqa: B012 - training itself succeeded: the failed write is the error

    def _wb_reset(self) -> None:
        self._wb_batches: list[GenerationBatch] = []
        self._wb_steps: list[TrainStep] = []
        self._wb_ready: list[tuple[int, list[GenerationBatch], dict[str, Any]]] = []
        self._wb_rows = 0
        self._wb_scored: dict[str, Any] | None = None
        self._wb_capture: list | None = None
        self._wb_t = {"generate": 0.0, "verify": 0.0, "log": 0.0, "mark": time.perf_counter()}

    def _wb_config(self) -> dict[str, Any]:
        import trl

        args = self.args.to_dict() if hasattr(self.args, "to_dict") else {}
        model = getattr(getattr(self.model, "config", None), "_name_or_path", None)
        return {"source": "trl", "trl_version": trl.__version__, "model": {"path": model},
                "reward_funcs": list(self.reward_func_names), "reward_weights": self.reward_weights.tolist(),
                "allocator": {"name": "uniform", "params": {"n": int(self.num_generations)}},
                "sampling": {"temperature": float(self.args.temperature)}, "trl_args": args}

    def _wb_static(self) -> dict[str, Any]:
        worker = f"vllm-{self.args.vllm_mode}" if self.use_vllm else "local"
        return {"num_generations": int(self.num_generations), "eos_token_ids": list(self.eos_token_ids),
                "temperature": float(self.args.temperature), "reward_funcs": list(self.reward_func_names),
                "worker": worker}

    # -- capture ------------------------------------------------------------------------------
    def _generate(self, prompts: list):
        t0 = time.perf_counter()
        try:
            return super()._generate(prompts)
        finally:
            if self.model.training:
                self._wb_t["generate"] += time.perf_counter() - t0

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001
        t0 = time.perf_counter()
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        t1 = time.perf_counter()
        if self._wb_writer is not None and self.model.training:
            col = self._wb_answer_column
            self._wb_scored = dict(
                prompts=[_text(p) for p in prompts], responses=[_text(c) for c in completions],
                answers=[None if x.get(col) is None else str(x.get(col)) for x in inputs],
                token_ids=[list(map(int, ids)) for ids in completion_ids_list],
                rewards_per_func=rewards_per_func.detach().float().cpu())
            self._wb_t["log"] += time.perf_counter() - t1
            self._wb_t["verify"] += t1 - t0
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):  # noqa: ANN001
        output = super()._generate_and_score_completions(inputs)
        scored, self._wb_scored = self._wb_scored, None
        if self._wb_writer is None or scored is None or not self.model.training:
            return output
        t0 = time.perf_counter()
        n = len(scored["prompts"])
        rpf = scored["rewards_per_func"]
        rewards = (rpf * self.reward_weights.float().unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rpf).all(dim=1)] = torch.nan
        lengths = [len(t) for t in scored["token_ids"]]
        behaviour = output.get("sampling_per_token_logps")
        if behaviour is None:
            behaviour = output.get("old_per_token_logps")
        logprobs: list[np.ndarray | None] = [None] * n
        if behaviour is not None:
            b = behaviour.detach().float().cpu().numpy()
            logprobs = [b[i, :k] for i, k in enumerate(lengths)]
        batch = GenerationBatch(step=self.state.global_step + 1, first_row=self._wb_rows,
                       policy_version=self.state.global_step, prompts=scored["prompts"],
                       responses=scored["responses"], answers=scored["answers"], token_ids=scored["token_ids"],
                       rewards=rewards.numpy(), rewards_per_func=rpf.numpy(),
                       advantages=output["advantages"].detach().float().cpu().numpy(),
                       group=np.arange(n) // int(self.num_generations), logprobs=logprobs)
        self._wb_batches.append(batch)
        output["_wb_rows"] = torch.arange(self._wb_rows, self._wb_rows + n)
        self._wb_rows += n
        self._wb_t["log"] += time.perf_counter() - t0
        return output

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._wb_capture is not None:
            self._wb_capture.append((out[0].detach(), out[1].detach() if out[1] is not None else None))
        return out

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001
        rows = inputs.get("_wb_rows") if isinstance(inputs, dict) else None
        if rows is None or self._wb_writer is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if self._wb_ready:  # the update's large kernels run without the GIL: commit while they run
            ready, self._wb_ready = self._wb_ready, []
            for item in ready:
                self._wb_writer.put(*item)
        self._wb_capture = []
        try:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            captured, self._wb_capture = self._wb_capture, None
        t0 = time.perf_counter()
        self._wb_first_pass(rows, inputs["completion_mask"], captured[0] if len(captured) == 1 else None)
        self._wb_t["log"] += time.perf_counter() - t0
        return loss

    def _wb_first_pass(self, rows: torch.Tensor, mask: torch.Tensor, captured) -> None:  # noqa: ANN001
        logps = ent = None
        if captured is not None:
            logps = captured[0].float().cpu().numpy()
            ent = captured[1].float().cpu().numpy() if captured[1] is not None else None
        used = (mask.sum(dim=1) > 0).cpu().numpy()
        by_start = {b.first_row: b for b in self._wb_batches}
        starts = sorted(by_start)
        for j, r in enumerate(rows.tolist()):
            pos = int(np.searchsorted(starts, r, side="right")) - 1
            b = by_start[starts[pos]] if pos >= 0 else None
            if b is None or r - b.first_row >= len(b.prompts) or b.seen[r - b.first_row]:
                continue  # a later pass over a completion (num_iterations > 1): already handed over
            i = r - b.first_row
            b.seen[i], b.used[i] = True, bool(used[j])
            b.off_policy[i] = self.state.global_step + 1 > b.step
            k = len(b.token_ids[i])
            if ent is not None:
                b.entropy[i] = ent[j, :k]
            if b.logprobs[i] is None and logps is not None and b.step == self.state.global_step + 1:
                b.logprobs[i] = logps[j, :k]  # TRL keeps no old log-probs when the policy has not moved

    # -- steps --------------------------------------------------------------------------------
    def _wb_step_end(self, step: int, will_log: bool) -> None:
        if self._wb_writer is None:
            return
        now = time.perf_counter()
        t = self._wb_t
        metrics = {"timing_s/step": now - t["mark"], "timing_s/generate": t["generate"], "timing_s/verify": t["verify"],
                   "timing_s/log": t["log"]}
        self._wb_t = {"generate": 0.0, "verify": 0.0, "log": 0.0, "mark": now}
        self._wb_steps.append(TrainStep(step, logged=not will_log, metrics=metrics))
        self._wb_release(self._wb_writer)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        super().log(logs, start_time)
        if self._wb_writer is None or not self.model.training or "loss" not in logs:
            return
        pending = [s for s in self._wb_steps if s.step == self.state.global_step and not s.logged]
        if pending:
            s = pending[0]
            s.logged = True
            for key, value in logs.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value):
                    s.metrics[f"trl/{key}"] = float(value)
                    if key in TRL_TO_STEP:
                        s.metrics.setdefault(TRL_TO_STEP[key], float(value))
            self._wb_release(self._wb_writer)

    def _wb_release(self, writer: StepWriter | None, final: bool = False) -> None:
        """Make ready, in step order, each step that has ended, been logged and whose completions have
        all been through the loss; ready steps go to the writer when the next update starts (generation
        is a Python loop that the writer's Python work would slow) or at the end of training, with
        everything left."""
        if writer is None:
            return
        if final:
            ended = {s.step for s in self._wb_steps}
            for st in sorted({b.step for b in self._wb_batches} - ended):
                self._wb_steps.append(TrainStep(st, logged=True))  # generated, but the step never ended
        while self._wb_steps:
            s = self._wb_steps[0]
            mine = [b for b in self._wb_batches if b.step == s.step]
            logged = s.logged or len(self._wb_steps) > 1  # TRL logs a step before the next one ends
            if not final and (not logged or not all(b.seen.all() for b in mine)):
                return
            self._wb_steps.pop(0)
            self._wb_batches = [b for b in self._wb_batches if b.step != s.step]
            self._wb_ready.append((s.step, mine, s.metrics))
        if final:
            ready, self._wb_ready = self._wb_ready, []
            for item in ready:
                writer.put(*item)


def with_workbench(trainer_cls: type) -> type:
    """A subclass of `trainer_cls` (GRPOTrainer or a subclass of it) that logs to a workbench store;
    it takes `store=` (a directory or an open Store), `run_name=`, `answer_column=` ("answer": the
    dataset column stored as each prompt's reference answer, if present) besides the trainer's own
    arguments."""
    check_trl_version()
    from trl import GRPOTrainer

    if not (isinstance(trainer_cls, type) and issubclass(trainer_cls, GRPOTrainer)):
        raise WorkbenchError(f"with_workbench: {trainer_cls!r} is not a subclass of trl.GRPOTrainer")
    if issubclass(trainer_cls, _WorkbenchMixin):
        return trainer_cls
    return type(f"Workbench{trainer_cls.__name__}", (_WorkbenchMixin, trainer_cls),
                {"__module__": trainer_cls.__module__, "__doc__": trainer_cls.__doc__})


def __getattr__(name: str) -> Any:
    if name == "WorkbenchGRPOTrainer":  # built on first use, so importing this module does not import TRL
        from trl import GRPOTrainer

        cls = with_workbench(GRPOTrainer)
        cls.__module__ = __name__
        globals()[name] = cls
        return cls
    raise AttributeError(name)
