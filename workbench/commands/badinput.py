"""Commands of the bad-input corpus: `workbench verify` (judge one response with a verifier, under its
time limit) and `workbench bench badinput` (run the whole corpus of bad inputs; see
workbench/experiments/badinput.py and docs/reliability.md, section R3)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from workbench.commands.common import JsonOpt, print_json


def verify_cmd(
    response: Annotated[Optional[str], typer.Argument(help="The response text (or use --response-file).")] = None,
    reference: Annotated[str, typer.Option("--reference", "-r", help="The reference answer.")] = "",
    method: Annotated[str, typer.Option("--method", help='"math", "exact" or a user verifier "module:function".')] = "math",
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="Time limit of the verification (seconds).")] = 5.0,
    response_file: Annotated[Optional[Path], typer.Option("--response-file", help="Read the response from this file.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Judge one response against a reference with a verifier, as a run would (same time limit): prints
    the reward and the verdict (`verifier_error: ...` when the verifier failed or ran out of time)."""
    import time

    from workbench.errors import ConfigError, DataError
    from workbench.tasks.verifiers import Verifier

    if (response is None) == (response_file is None):
        raise ConfigError("verify: give the response as an argument or with --response-file, not both")
    if response_file is not None:
        try:
            response = response_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DataError(f"--response-file {response_file}: does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise DataError(f"--response-file {response_file}: cannot read it as UTF-8 text ({exc})") from None
    if not timeout_s > 0:
        raise ConfigError(f"--timeout-s: {timeout_s!r} is not allowed (a number > 0)")
    verifier = Verifier(method, timeout_s)
    t0 = time.perf_counter()
    result = verifier(response or "", reference)
    seconds = time.perf_counter() - t0
    if as_json:
        print_json({"reward": result.reward, "verdict": result.verdict, "seconds": round(seconds, 3),
                    "response_chars": len(response or "")})
    else:
        typer.echo(f"reward {result.reward:g}  verdict {result.verdict}  ({seconds:.2f} s)")


def bench_badinput_cmd(
    as_json: JsonOpt = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the per-case table of docs/reliability.md.")] = False,
    jobs: Annotated[int, typer.Option("--jobs", help="Cases run at the same time.")] = 2,
    only: Annotated[Optional[list[str]], typer.Option("--only", help="Run only this case id or category (repeatable).")] = None,
    cases: Annotated[Optional[Path], typer.Option("--cases", help="The manifest (default: tests/bad_inputs/cases.toml).")] = None,
    live: Annotated[bool, typer.Option("--live/--no-live", help="Keep a paused organism run live through the corpus and check it keeps going.")] = True,
    fork: Annotated[bool, typer.Option("--fork/--spawn", help="Fork each case from a process that imported the workbench once (fast), or spawn a fresh interpreter per case.")] = True,
) -> None:
    """Feed every bad input of the corpus to the real `workbench` commands (subprocesses): each must fail
    with one clear line naming the field, row or path, exit non-zero, never hang, write nothing, and
    leave a live run running. Prints cases, clear_errors, crashes, hangs and one entry per case."""
    from workbench.experiments.badinput import markdown_table, run_corpus

    def progress(r) -> None:  # noqa: ANN001
        if not as_json and not markdown:
            typer.echo(f"  {r.status:<8} {r.seconds:6.1f} s  {r.id}: {r.message[:110]}", err=True)

    out = run_corpus(cases, jobs=jobs, only=list(only or []) or None, live=live, fork=fork, progress=progress)
    if markdown:
        typer.echo(markdown_table(out), nl=False)
    elif as_json:
        print_json(out)
    else:
        summary = {k: v for k, v in out.items() if k != "results"}  # the per-case list: --json
        for k, v in summary.items():
            typer.echo(f"{k}: {v}")
    if not out["passed"]:
        raise typer.Exit(1)


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add `workbench verify` and `workbench bench badinput`."""
    app.command("verify")(verify_cmd)
    bench.command("badinput")(bench_badinput_cmd)
