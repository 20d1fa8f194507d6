"""The run config as text, from its dataclasses and their attribute docstrings: TOML with the docs as
comments (`to_toml`, what `workbench config show` prints and what launched runs are given) and
docs/configs.md (`config_markdown`, `workbench config show --markdown`)."""

from __future__ import annotations

import dataclasses
import json
import textwrap
import typing
from dataclasses import fields, is_dataclass
from typing import Any

from workbench.checks import type_name
from workbench.config import RunConfig
from workbench.docstrings import field_docs


def config_markdown() -> str:
    """Every field of a run config, documented from the dataclass docstrings (docs/configs.md)."""
    out = [
        "# Run configuration",
        "",
        "A run is configured by a TOML file whose tables mirror the dataclasses in `workbench/config/`.",
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
    hints = typing.get_type_hints(RunConfig)
    for f in scalars:  # arrays of tables ([[guards]]): their entries' fields
        args = typing.get_args(hints[f.name])
        if len(args) == 2 and args[1] is Ellipsis and is_dataclass(args[0]):
            out += _dataclass_table(f"## `[[{f.name}]]` — {_md(top.get(f.name, ''))}", args[0])
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
            allowed = type_name(hints[g.name])
            allowed = f" ({allowed})" if allowed.startswith("one of") else ""
            out.append(f"| `{g.name}` | `{_toml_value(v)}` | {_md(docs.get(g.name, ''))}{_md(allowed)} |")
        for title, cls in getattr(type(sub), "DOC_TABLES", []):  # a section's own sub-tables (reward terms)
            out += _dataclass_table(title, cls, cls.__doc__ or "")
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


def _dataclass_table(title: str, cls: type, intro: str = "") -> list[str]:
    docs = field_docs(cls)
    out = ["", title, ""] + ([" ".join(intro.split()), ""] if intro else []) + [
        "| field | default | meaning |", "|---|---|---|"]
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


def split_fields(cfg: RunConfig) -> tuple[list[Any], list[Any]]:
    """The run config's top-level fields, and its tables (dataclass or dict values), in field order."""
    scalars, tables = [], []
    for f in fields(RunConfig):
        value = getattr(cfg, f.name)
        (tables if is_dataclass(value) or isinstance(value, dict) else scalars).append(f)
    return scalars, tables


def to_toml(cfg: RunConfig) -> str:
    """The config as TOML (what `workbench config show` prints), comments from the docstrings.
    `load_config` of the output gives the same config back."""
    docs = field_docs(RunConfig)
    lines: list[str] = []
    scalars, sections = split_fields(cfg)
    for f in scalars:
        lines += _toml_field(f.name, getattr(cfg, f.name), docs.get(f.name, ""))
    for f in sections:
        sub = getattr(cfg, f.name)
        lines += [""] + [f"# {line}" for line in textwrap.wrap(docs.get(f.name, ""), 96)] + [f"[{f.name}]"]
        if isinstance(sub, dict):
            lines += [f"{k} = {_toml_value(v)}" for k, v in sub.items()]
            continue
        sub_docs = field_docs(type(sub))
        tables = []
        for g in fields(sub):
            v = getattr(sub, g.name)
            if isinstance(v, dict):
                tables.append((g, v))
                continue
            lines += _toml_field(g.name, v, sub_docs.get(g.name, ""))
        for g, v in tables:
            lines += [f"# {line}" for line in textwrap.wrap(sub_docs.get(g.name, ""), 96)]
            lines.append(f"[{f.name}.{g.name}]")
            lines += [f"{k} = {_toml_value(x)}" for k, x in v.items()]
    return "\n".join(lines) + "\n"


def _toml_field(name: str, value: Any, doc: str) -> list[str]:
    return [f"# {line}" for line in textwrap.wrap(doc, 96)] + [f"{name} = {_toml_value(value)}"]


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if v is None:
        return "(none)"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if is_dataclass(v):  # an entry of an array of tables ([[guards]]): its fields set away from the default
        return _toml_value({f.name: getattr(v, f.name) for f in fields(v) if getattr(v, f.name) != (
            f.default if f.default is not dataclasses.MISSING else f.default_factory())})  # type: ignore[misc]
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return repr(v)
