"""docs/configs.md, generated from the run config's dataclasses and their attribute docstrings
(`workbench config show --markdown`)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import fields, is_dataclass

from workbench.config import RunConfig, _toml_value, _type_name, split_fields
from workbench.docstrings import field_docs


def config_markdown() -> str:
    """Every field of a run config, documented from the dataclass docstrings (docs/configs.md)."""
    out = [
        "# Run configuration",
        "",
        "A run is configured by a TOML file whose tables mirror the dataclasses in `workbench/config.py`.",
        "Every field is optional (the default is shown); unknown keys and bad values are rejected before the",
        "run starts, with a message naming the field. Override any field on the command line with",
        "`--set table.field=value` (the value is read as TOML). `workbench config show [CONFIG]` prints the",
        "config in force. This page is generated: `workbench config show --markdown > docs/configs.md`.",
        "",
    ]
    top = field_docs(RunConfig)
    default = RunConfig()
    out += ["## Top level", "", "| field | default | meaning |", "|---|---|---|"]
    scalars, nested = split_fields(default)
    for f in scalars:
        out.append(f"| `{f.name}` | `{_toml_value(getattr(default, f.name))}` | {_md(top.get(f.name, ''))} |")
    for f in nested:
        sub = getattr(default, f.name)
        if isinstance(sub, dict):
            out += _foreign_tables(f.name, top.get(f.name, ""))
            continue
        docs = field_docs(type(sub))
        out += ["", f"## `[{f.name}]` — {top.get(f.name, '')}", "", "| field | default | meaning |", "|---|---|---|"]
        hints = typing.get_type_hints(type(sub))
        for g in fields(sub):
            v = getattr(sub, g.name)
            allowed = _type_name(hints[g.name])
            allowed = f" ({allowed})" if allowed.startswith("one of") else ""
            out.append(f"| `{g.name}` | `{_toml_value(v)}` | {_md(docs.get(g.name, ''))}{_md(allowed)} |")
    return "\n".join(out) + "\n"


def _foreign_tables(name: str, doc: str) -> list[str]:
    """Tables whose fields another part owns: the task kinds and the organism recipe."""
    from workbench.models.organism import OrganismRecipe
    from workbench.tasks import TASK_KINDS

    out = ["", f"## `[{name}]` — {doc}", ""]
    tables = [(f"kind = \"{kind}\"", cls) for kind, (cls, _) in TASK_KINDS.items()]
    for title, cls in tables:
        out += _dataclass_table(f"### `[task]` with {title}", cls)
    out += _dataclass_table("## `[model.organism]` — the organism's recipe (when model.path = \"organism\")",
                            OrganismRecipe)
    return out


def _dataclass_table(title: str, cls: type) -> list[str]:
    docs = field_docs(cls)
    out = ["", title, "", "| field | default | meaning |", "|---|---|---|"]
    for f in fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f"`{_toml_value(f.default) if not is_dataclass(f.default) else '(table)'}`"
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            v = f.default_factory()  # type: ignore[misc]
            default = "(table)" if is_dataclass(v) else f"`{_toml_value(v)}`"
        else:
            default = "(required)"
        out.append(f"| `{f.name}` | {_md(default)} | {_md(docs.get(f.name, ''))} |")
    return out


def _md(text: str) -> str:
    return text.replace("|", "\\|")
