"""A logging SDK any training loop can call: its steps and rollouts go into a workbench store, where
the dashboard, notebooks, guards (alerts) and `workbench replay` read them like any other run.

    import workbench

    run = workbench.init(store="store", name="my-grpo", config={"lr": 1e-6})
    for step in range(steps):
        ...                                   # generate, score, update
        run.log_rollouts(step, prompts=prompts, responses=responses, rewards=rewards,
                         token_ids=ids, token_entropy=entropy, advantages=adv)
        run.log_step(step, {"train/loss": loss, "train/grad_norm": gn})
    run.finish()

- Non-blocking: a call builds the rows (Arrow, no per-token Python) and returns; a background writer
  commits whole steps, several per transaction when they come faster than the store commits (group
  commit). Its queue is bounded (back-pressure: a call waits while it is full); nothing is dropped
  silently (`workbench/sdk/writer.py`).
- A step is handed to the writer when a call names a later step, or on `flush()` / `finish()`.
- Crash-safe: each commit is one DuckLake transaction, so a killed trainer loses at most the steps not
  yet committed and the store stays readable. `init` with the same name (or `run_id`) continues the run:
  calls for steps the store already holds are skipped (a trainer restarted from an older checkpoint
  writes no step twice), `run.last_step` says where the store is.
- Several processes of one job: each rank calls `init` with the same name (or `run_id`; default rank and
  world size from $RANK / $WORLD_SIZE as torchrun sets them). Rank 0 creates the run and writes each
  step's `steps` row (its metrics); every rank writes its own rollouts (`worker` = `rank-<r>`, `idx` from
  r x 1,000,000). Step summaries (reward mean, ...) are computed from the rollouts only in a
  single-process run; with several ranks, log them with `log_step`.
- Rank 0 runs the default guards over each committed step, alert only (as for imported runs).
- Bad input (lengths that disagree, a NaN reward, text that is not UTF-8, a step that goes backwards) and
  a store that fails a commit are warnings (`SdkWarning`, recorded as `events` rows of kind
  `sdk_bad_input`), never an exception into the trainer; `init(on_error="raise")` raises them instead.
- Episodes (multi-turn rollouts with tool calls) are not in the store yet; `log_rollouts` takes one-turn
  rollouts. An episode logger would go beside it, building its rows in `rows.py`'s way.

See docs/sdk.md and examples/sdk_torch_loop.py.
"""

from workbench.sdk.run import SOURCE, Run, SdkWarning, init

__all__ = ["SOURCE", "Run", "SdkWarning", "init"]
