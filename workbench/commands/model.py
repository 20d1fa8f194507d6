"""`workbench model show|convert|remove`: the built-in model sources ("organism", "smollm2") and a
user's directory, as `workbench.models.sources` resolves them."""

from __future__ import annotations

from typing import Annotated

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json, store_path

SourceArg = Annotated[str, typer.Argument(help='"smollm2", "organism" or a model directory.')]


def register(app: typer.Typer) -> None:
    """Add the `model` group (show, convert, remove) to the top-level app."""
    model = typer.Typer(help="Model sources: the organism, SmolLM2-135M-Instruct (converted once), your own directory.",
                        no_args_is_help=True)
    app.add_typer(model, name="model")

    @model.command("show")
    def show(source: SourceArg = "smollm2", store: StoreOpt = None, json_out: JsonOpt = False) -> None:
        """Where a source's directory is (or would be), whether it is there, its size and metadata."""
        from workbench.models.sources import source_info

        info = source_info(source, store_path(store))
        if json_out:
            print_json(info)
            return
        for key, value in info.items():
            typer.echo(f"{key:>10}: {value}")

    @model.command("convert")
    def convert(
        source: SourceArg = "smollm2",
        store: StoreOpt = None,
        force: Annotated[bool, typer.Option("--force", help="Convert again even when cached.")] = False,
        json_out: JsonOpt = False,
    ) -> None:
        """Make a built-in source's local directory under the store (SmolLM2: de-quantise its GGUF once,
        about a minute; the organism: build it) and print where it is."""
        from workbench.errors import ConfigError
        from workbench.models.sources import SMOLLM2, ensure_smollm2, model_dir, source_info

        if source == SMOLLM2:
            typer.echo("Converting SmolLM2-135M-Instruct (4-bit GGUF -> float32 safetensors) into the store's "
                       "models/ (about a minute on 2 CPU cores; cached for later runs).", err=True)
            path = ensure_smollm2(store_path(store), force=force)
        elif source == "organism":
            path = model_dir(source, store_path(store))
        else:
            raise ConfigError(f"model convert: {source!r} is not a built-in source (smollm2, organism)")
        info = source_info(source, store_path(store))
        if json_out:
            print_json(info)
        else:
            typer.echo(f"{path}  ({info.get('bytes', 0) / 1e6:.0f} MB)")

    @model.command("remove")
    def remove(source: SourceArg = "smollm2", store: StoreOpt = None) -> None:
        """Delete a built-in source's cached directory from the store (the next run converts or builds
        it again). A directory of your own is never deleted."""
        from workbench.models.sources import remove_source

        path = remove_source(source, store_path(store))
        typer.echo(f"removed {path}" if path else f"{source}: nothing cached in this store")

