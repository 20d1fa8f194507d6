"""`workbench organism build` and `workbench organism report`: the model organism's commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json, store_path

RecipeOpt = Annotated[
    Path | None,
    typer.Option("--recipe", help="A JSON file of OrganismRecipe fields (default: the built-in recipe).",
                 show_default=False),
]


def _recipe(path: Path | None):
    import json

    from workbench.errors import ConfigError
    from workbench.models.organism import OrganismRecipe

    if path is None:
        return OrganismRecipe()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--recipe: cannot read {path} as JSON: {exc}") from exc
    return OrganismRecipe.from_dict(data)


def register(app: typer.Typer) -> None:
    """Add the `organism` group (build, report) to the top-level app."""
    organism = typer.Typer(help="The model organism: a tiny LM on arithmetic, built locally in minutes.",
                           no_args_is_help=True)
    app.add_typer(organism, name="organism")

    @organism.command("build")
    def build(
        store: StoreOpt = None,
        force: Annotated[bool, typer.Option("--force", help="Rebuild even when cached.")] = False,
        recipe: RecipeOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        """Build the organism under the store (cached by its recipe's hash) and print its directory."""
        from workbench.models.organism import ensure_organism, read_meta

        path = ensure_organism(store_path(store), _recipe(recipe), force=force)
        meta = read_meta(path)
        if json_out:
            print_json({"path": str(path), **{k: meta[k] for k in ("hash", "build_s", "params", "final_loss")},
                        "weights_sha256": meta.get("weights_sha256"), "built_with": meta.get("built_with")})
        else:
            typer.echo(f"{path}  ({meta['params']:,} parameters, built in {meta['build_s']:.0f} s)")

    @organism.command("report")
    def report(
        json_out: JsonOpt = False,
        recipe: RecipeOpt = None,
        samples: Annotated[int, typer.Option("--samples", help="Samples per eval prompt.")] = 16,
        no_determinism: Annotated[
            bool, typer.Option("--no-determinism", help="Build once (skip the bit-identical check).")
        ] = False,
    ) -> None:
        """Build the organism (twice: determinism) and measure pass@1, pass@8 and their spread."""
        from workbench.models.report import organism_report

        result = organism_report(_recipe(recipe), check_determinism=not no_determinism, samples=samples)
        if json_out:
            print_json(result)
            return
        for key, value in result.items():
            typer.echo(f"{key:>20}: {value}")
