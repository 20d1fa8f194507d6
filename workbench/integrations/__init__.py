"""Other engines' runs in: importers of verl, TRL, NeMo-RL and prime-rl rollout dumps and of any JSONL/Parquet
file through a field map (see docs/import.md), and `--follow` for a run that is training now.

    from workbench.integrations import import_path
    report = import_path(store, "verl", "outputs/rollouts", name="my-verl-run", options={"val_dir": ...})

Each import is a run with `source` = the format and status `imported` (read-only for control). Live
logging from TRL's trainer is `workbench.integrations.trl` (a separate module).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from workbench.errors import DataError
from workbench.registry import Registry

if TYPE_CHECKING:
    from workbench.store.protocols import ImportStore


@dataclass(frozen=True)
class ImportOption:
    """An option of `workbench import` (`--flag TEXT`): what it means and how its text is read."""

    flag: str
    help: str
    parse: Callable[[str], Any]
    """Text -> the value stored in the import's options (raises DataError naming the flag)."""


def _folder(text: str) -> str:
    return str(Path(text).resolve())


def _map(text: str) -> dict[str, str]:
    from workbench.integrations.jsonl import parse_map

    return parse_map(text)


def _weights(text: str) -> dict[str, float]:
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not key.strip():
            raise DataError(f"--reward-weights {item!r}: expected column=weight (for example correct=1.0)")
    return out


def _rule(text: str) -> str:
    from workbench.correctness import parse_rule

    return parse_rule(text).text


OPTIONS: dict[str, ImportOption] = {
    "val_dir": ImportOption("--val-dir", "the trainer.validation_data_dir folder (imported as evals)", _folder),
    "map": ImportOption("--map", "field=key pairs, e.g. prompt=question,response=completion,reward=score,step=iter",
                        _map),
    "reward_weights": ImportOption("--reward-weights", "reward column=weight pairs (GRPOConfig.reward_weights); "
                                   "default: every float column besides step/advantage, weight 1", _weights),
    "tokenizer": ImportOption("--tokenizer", "a local Hugging Face tokenizer folder; response lengths in tokens "
                              "are counted by re-tokenising the text", _folder),
    "correct_if": ImportOption("--correct-if", "when a rollout counts as correct where the dump logs no verdict "
                               "(verl `acc`): reward OP NUMBER, e.g. 'reward>=1' (default 'reward>=0.5'); kept in "
                               "the run's config", _rule),
}
"""Option name (the key in an import's `options`) -> its flag, help and parser."""


@dataclass(frozen=True)
class FormatEntry:
    """An import format's entry in `FORMATS`: the module of workbench.integrations that reads it
    (imported when asked for; it provides `common.Format`), what its PATH is, the options it reads and
    those it needs."""

    module: str
    path: str
    options: tuple[str, ...] = ("correct_if",)
    required: tuple[str, ...] = ()


FORMATS: Registry[FormatEntry] = Registry("import format", error=DataError, label="formats", sort=False)
"""Format name -> its `FormatEntry`; `workbench import` reads its choices, path help and options from here."""
FORMATS.add("verl", FormatEntry("verl", "the trainer.rollout_data_dir folder",
                           ("val_dir", "tokenizer", "correct_if")))
FORMATS.add("trl", FormatEntry("trl_files", "the output_dir or its completions/ folder",
                          ("reward_weights", "tokenizer", "correct_if")))
FORMATS.add("nemo-rl", FormatEntry("nemo_rl", "the logger's folder"))
FORMATS.add("prime-rl", FormatEntry("prime_rl", "the run's output folder (holding rollouts/ and metrics.jsonl)"))
FORMATS.add("jsonl", FormatEntry("jsonl", "a file or folder", ("map", "tokenizer", "correct_if"), required=("map",)))


def _entry(name: str) -> FormatEntry:
    return FORMATS.get(name.replace("_", "-").lower())


def get_format(name: str) -> Any:
    """The module reading format `name` ("nemo_rl" = "nemo-rl"); DataError listing the formats otherwise."""
    return importlib.import_module(f"workbench.integrations.{_entry(name).module}")


def import_options(fmt: str, flags: dict[str, str | None]) -> dict[str, Any]:
    """An import's options from the text of its flags (option name -> text, None: not given), each read
    by its parser; DataError for a flag format `fmt` does not read or a required one left out."""
    entry, options = _entry(fmt), {}
    for key, text in flags.items():
        if text is None:
            continue
        opt = OPTIONS[key]
        if key not in entry.options:
            reads = ", ".join(OPTIONS[k].flag for k in entry.options) or "none"
            raise DataError(f"{opt.flag}: the {fmt} format does not read it (its options: {reads})")
        options[key] = opt.parse(text)
    for key in entry.required:
        if key not in options:
            raise DataError(f"{OPTIONS[key].flag} is required for the {fmt} format: {OPTIONS[key].help}")
    return options


def importer(store: ImportStore, fmt: str, path: str | Path, *, name: str | None = None,
             options: dict[str, Any] | None = None, skip_bad: bool = False) -> Any:
    """The `Importer` of `path` in format `fmt` into its run (created on first import)."""
    from workbench.integrations.common import Importer

    return Importer(store, get_format(fmt), path, name=name, options=options, skip_bad=skip_bad)


def import_path(store: ImportStore, fmt: str, path: str | Path, *, name: str | None = None,
                options: dict[str, Any] | None = None, skip_bad: bool = False) -> dict[str, Any]:
    """Import every step file of `path` not imported yet into its run (created on first import);
    returns the report (run_id, steps_imported, rollouts, skipped, parse_s, write_s, ...)."""
    imp = importer(store, fmt, path, name=name, options=options, skip_bad=skip_bad)
    return imp.run_once().as_dict(imp.problems)


__all__ = ["FORMATS", "OPTIONS", "FormatEntry", "ImportOption", "get_format", "import_options", "import_path", "importer"]
