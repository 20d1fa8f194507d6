"""`workbench verify`: judge one response with a verifier, under its time limit (the bad-input corpus
that feeds it and the other commands bad inputs, `workbench bench badinput`, is in
benchmarks/badinput.py; docs/reliability.md, section R3)."""

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


def register(app: typer.Typer) -> None:
    """Add `workbench verify`."""
    app.command("verify")(verify_cmd)
