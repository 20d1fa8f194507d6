"""`workbench export`: a run's rollouts out as SFT, rejection-sampling and preference sets (the SDK's
benchmarks, `workbench bench sdk` and `bench export`, are in benchmarks/commands/sdk.py). Thin: parse, call
one library function, print."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json, store_path


def export_cmd(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The run to export from.")],
    out: Annotated[Path, typer.Argument(help="A folder (new or empty) for data.jsonl / data.parquet, card.json, README.md.")],
    kind: Annotated[str, typer.Option("--kind", help="sft (every selected rollout, chat messages) | rejection "
                                      "(best --k correct per prompt, deduplicated) | pairs (a correct and a wrong "
                                      "response of one group, --k per group).")] = "sft",
    fmt: Annotated[str, typer.Option("--format", help="jsonl | parquet | both.")] = "jsonl",
    k: Annotated[int, typer.Option("--k", help="rejection: responses per prompt; pairs: pairs per group.")] = 1,
    step_min: Annotated[Optional[int], typer.Option("--step-min")] = None,
    step_max: Annotated[Optional[int], typer.Option("--step-max")] = None,
    verdict: Annotated[Optional[str], typer.Option("--verdict", help="Only rollouts with this verdict (correct, wrong, ...).")] = None,
    reward_min: Annotated[Optional[float], typer.Option("--reward-min")] = None,
    reward_max: Annotated[Optional[float], typer.Option("--reward-max")] = None,
    entropy_min: Annotated[Optional[float], typer.Option("--entropy-min", help="On the rollout's mean token entropy.")] = None,
    entropy_max: Annotated[Optional[float], typer.Option("--entropy-max")] = None,
    prompt_id: Annotated[Optional[str], typer.Option("--prompt", help="One prompt id.")] = None,
    tool_calls_min: Annotated[Optional[int], typer.Option("--tool-calls-min", help="Episodes with at least this many tool calls.")] = None,
    tool_calls_max: Annotated[Optional[int], typer.Option("--tool-calls-max")] = None,
    tool_errors_min: Annotated[Optional[int], typer.Option("--tool-errors-min", help="Episodes with at least this many failed tool calls.")] = None,
    tool_errors_max: Annotated[Optional[int], typer.Option("--tool-errors-max")] = None,
    tool_error: Annotated[Optional[str], typer.Option("--tool-error", metavar="KIND", help="Episodes with a tool call "
                                                      "that failed with this kind (timeout, syntax, ...: "
                                                      "workbench.episodes.TOOL_ERRORS).")] = None,
    sql: Annotated[Optional[str], typer.Option("--sql", help="One more SQL condition over the rollouts' columns, "
                                               "e.g. \"length < 512 AND finish_reason = 'stop'\".")] = None,
    no_tokens: Annotated[bool, typer.Option("--no-tokens", help="Leave out token ids and log-probs.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace what OUT holds.")] = False,
    memory_limit: Annotated[str, typer.Option("--memory-limit", help="DuckDB's memory limit for the export "
                                              "(the sets that rank rows spill to disk past it).")] = "512MB",
    threads: Annotated[int, typer.Option("--threads", help="DuckDB threads reading the store.")] = 2,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Export a run's selected rollouts as an SFT, rejection-sampling or preference set, with a card."""
    from workbench.export import export_run
    from workbench.store import open_store

    filters = {"step_min": step_min, "step_max": step_max, "verdict": verdict, "reward_min": reward_min,
               "reward_max": reward_max, "entropy_min": entropy_min, "entropy_max": entropy_max, "prompt_id": prompt_id,
               "tool_calls_min": tool_calls_min, "tool_calls_max": tool_calls_max,
               "tool_errors_min": tool_errors_min, "tool_errors_max": tool_errors_max}
    with open_store(store_path(store), read_only=True, threads=threads) as s:
        card = export_run(s, run_id, out, kind=kind, fmt=fmt, filters=filters, sql=sql, k=k, tokens=not no_tokens,
                          overwrite=overwrite, tool_error=tool_error, memory_limit=memory_limit)
    if as_json:
        print_json(card)
        return
    c = card["counts"]
    sys.stdout.write(f"{card['kind']}: {c['rows']} rows (steps {c['steps'][0]}..{c['steps'][1]}) into {out}, "
                     f"{card['rows_per_s']} rows/s\n")
    if card.get("reimport"):
        sys.stdout.write(f"import it back: {card['reimport']}\n")


def register(app: typer.Typer) -> None:
    """Add `workbench export`."""
    app.command("export")(export_cmd)
