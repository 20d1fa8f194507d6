"""The allocators' configs: building one from a plain dict (as a control command or a TOML table gives
it) with `workbench.checks`, and each field's attribute docstring (for `workbench allocators list`).
Range checks are `workbench.checks.check_int` / `check_float` / `check_choice` in each config's
`__post_init__`.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal, get_args, get_origin

from workbench.checks import build_config
from workbench.docstrings import field_docs


def config_from_dict(cls: type, params: dict[str, Any], *, base: Any | None = None) -> Any:
    """An allocator's config from `params` (over `base`'s values when given): `workbench.checks.
    build_config` with the class's name as the section and "parameter" as the noun; integral floats
    are accepted for int fields (a control command's JSON). Its `__post_init__` then checks ranges."""
    owner = cls.__name__ if base is None else type(base).__name__
    return build_config(cls, params, where=owner, base=base, noun="parameter", integral_floats=True)


def describe_config(cls: type) -> list[dict[str, Any]]:
    """[{name, type, default, doc}] for each field of a config dataclass."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    out = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else None
        hint = hints[f.name]
        type_name = (
            "|".join(map(str, get_args(hint))) if get_origin(hint) is Literal else getattr(hint, "__name__", str(hint))
        )
        out.append({"name": f.name, "type": type_name, "default": default, "doc": docs.get(f.name, "")})
    return out
