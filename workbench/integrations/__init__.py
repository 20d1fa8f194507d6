"""Other engines' runs in: importers of verl, TRL and NeMo-RL rollout dumps and of any JSONL/Parquet
file through a field map (see docs/import.md), and `--follow` for a run that is training now.

    from workbench.integrations import import_path
    report = import_path(store, "verl", "outputs/rollouts", name="my-verl-run", options={"val_dir": ...})

Each import is a run with `source` = the format and status `imported` (read-only for control). Live
logging from TRL's trainer is `workbench.integrations.trl` (a separate module).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from workbench.errors import DataError
from workbench.registry import Registry

FORMATS: Registry[str] = Registry("import format", error=DataError, label="formats", sort=False)
"""Format name -> module of workbench.integrations that reads it (imported when asked for)."""
FORMATS.add("verl", "verl")
FORMATS.add("trl", "trl_files")
FORMATS.add("nemo-rl", "nemo_rl")
FORMATS.add("jsonl", "jsonl")


def get_format(name: str) -> Any:
    """The module reading format `name` ("nemo_rl" = "nemo-rl"); DataError listing the formats otherwise."""
    return importlib.import_module(f"workbench.integrations.{FORMATS.get(name.replace('_', '-').lower())}")


def import_path(store: Any, fmt: str, path: str | Path, *, name: str | None = None,
                options: dict[str, Any] | None = None, skip_bad: bool = False) -> dict[str, Any]:
    """Import every step file of `path` not imported yet into its run (created on first import);
    returns the report (run_id, steps_imported, rollouts, skipped, parse_s, write_s, ...)."""
    from workbench.integrations.common import Importer

    imp = Importer(store, get_format(fmt), path, name=name, options=options, skip_bad=skip_bad)
    report = imp.run_once()
    return report.as_dict(imp.problems)


__all__ = ["FORMATS", "get_format", "import_path"]
