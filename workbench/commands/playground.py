"""`workbench sample RUN --checkpoint STEP --prompt ... -n 8`: sample a run's checkpoint as the
dashboard's Playground does (workbench/playground/sample.py), with each sample's verdict and reward."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json, store_handle


def register(app: typer.Typer) -> None:
    """Add this part's commands to the top-level app."""

    @app.command("sample")
    def sample_cmd(
        run_id: str = typer.Argument(..., help="The run whose checkpoint to sample."),
        checkpoint: int = typer.Option(0, "--checkpoint", help="The step of the checkpoint (or weights-only "
                                       "snapshot); 0: the initial model."),
        prompt: Optional[str] = typer.Option(None, "--prompt", help="A typed prompt."),
        prompt_file: Optional[Path] = typer.Option(None, "--prompt-file", help="A typed prompt read from a file."),
        prompt_id: Optional[str] = typer.Option(None, "--prompt-id", help="A prompt of the run's task (train or "
                                                "held-out) by id."),
        answer: Optional[str] = typer.Option(None, "--answer", help="A typed prompt's reference answer "
                                             "(default: the task's prompt of the same text, else no verdict)."),
        n: int = typer.Option(8, "-n", "--samples", help="Samples to draw."),
        seed: int = typer.Option(0, "--seed", help="The sampling seed (the same seed gives the same tokens "
                                 "here and in the Playground)."),
        temperature: Optional[float] = typer.Option(None, "--temperature", help="Default: the run's."),
        top_p: Optional[float] = typer.Option(None, "--top-p", help="Default: the run's."),
        top_k: Optional[int] = typer.Option(None, "--top-k", help="Default: the run's."),
        max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="Default: the run's."),
        threads: int = typer.Option(1, "--threads", help="Torch threads (the Playground's worker uses 1)."),
        store: StoreOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Sample a run's checkpoint: responses with verdicts, reward terms and the prompt's pass@k."""
        from workbench.errors import ConfigError
        from workbench.playground.sample import Limits, SampleRequest, sample_run

        if prompt_file is not None:
            if prompt is not None:
                raise ConfigError("prompt: give --prompt or --prompt-file, not both")
            try:
                prompt = prompt_file.read_text(errors="replace")
            except OSError as exc:
                raise ConfigError(f"--prompt-file: cannot read {prompt_file}: {exc.strerror}") from None
        request = SampleRequest(run_id=run_id, checkpoint=checkpoint, prompt=prompt, prompt_id=prompt_id,
                                answer=answer, n=n, seed=seed, temperature=temperature, top_p=top_p, top_k=top_k,
                                max_new_tokens=max_new_tokens)
        limits = Limits()
        request.check(limits)  # one line before the store or a model is opened
        handle = store_handle(store)
        with handle.open(read_only=True) as st:
            result = sample_run(st, request, limits, threads=threads)
        if as_json:
            print_json(result)
            return
        typer.echo(f"run {run_id} checkpoint {result['checkpoint']} ({result['source']}), prompt "
                   f"{result['prompt_id']}: {result['correct']}/{result['n']} correct in {result['seconds']:.2f} s")
        for s in result["samples"]:
            typer.echo(f"  [{s['index']}] {s['verdict']:<10} reward {s['reward']:+.3f}  {s['text']!r}")
        for k, row in result["pass_at_k"].items():
            typer.echo(f"  pass@{k} {row['value']:.3f}  (95% interval {row['low']:.3f} to {row['high']:.3f})")
