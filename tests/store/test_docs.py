"""docs/store.md documents every table and column of the schema (the reference users write SQL from)."""

from __future__ import annotations

import re
from pathlib import Path

from workbench.store.schema import TABLES

DOC = Path(__file__).parents[2] / "docs" / "store.md"


def test_every_column_documented_with_its_type():
    text = DOC.read_text()
    sections = re.split(r"^### ", text, flags=re.M)[1:]
    documented = {}
    for section in sections:
        section = re.split(r"^## ", section, flags=re.M)[0]  # a table's section ends at the next chapter
        table = section.split()[0]
        rows = re.findall(r"^\| (\w+) \| ([^|]+) \| ([^|]+) \|$", section, flags=re.M)
        documented[table] = {name: kind.strip() for name, kind, meaning in rows if name != "column"}
    assert set(documented) == set(TABLES)
    for table, columns in TABLES.items():
        assert documented[table] == dict(columns), f"docs/store.md section {table} differs from the schema"
