"""Attribute docstrings of dataclass fields (the string literal right after a field's annotation),
which the run config and the allocators' configs use as their documentation."""

from __future__ import annotations

import ast
import inspect
import textwrap


def field_docs(cls: type) -> dict[str, str]:
    """{field name: its attribute docstring, whitespace collapsed}; {} when the source is unavailable."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
