"""Write tests/durations.json from a whole-suite run's `--durations=0` report: each test's seconds (setup,
call and teardown added up), which `tests/conftest.py` reads to mark every test over `SLOW_S` seconds
`slow` (the fast tier, `bash dev/test.sh -m "not slow"`, leaves them out; `make test` and CI run them).

    bash dev/test.sh --durations=0 | tee test-artifacts/whole.log
    .venv/bin/python dev/durations.py test-artifacts/whole.log          # rewrites tests/durations.json

Tests the report does not list (new ones) count as fast until the next whole run measures them.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S.*?)\s*$")
OUT = Path(__file__).resolve().parents[1] / "tests" / "durations.json"


def parse(text: str) -> dict[str, float]:
    """nodeid -> seconds (setup + call + teardown) from pytest's `--durations=0` lines."""
    total: dict[str, float] = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            total[m.group(3)] = total.get(m.group(3), 0.0) + float(m.group(1))
    return total


def slow_threshold() -> float:
    """`SLOW_S` as tests/conftest.py sets it (read from its text: importing it would load pytest's plugins)."""
    found = re.search(r"^SLOW_S = ([0-9.]+)$", (OUT.parent / "conftest.py").read_text(), flags=re.M)
    return float(found.group(1)) if found else float("nan")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: dev/durations.py PYTEST_LOG (a run with --durations=0)", file=sys.stderr)
        return 2
    found = parse(Path(argv[0]).read_text(errors="replace"))
    if not found:
        print(f"{argv[0]}: no '--durations=0' lines found (run pytest with --durations=0)", file=sys.stderr)
        return 1
    OUT.write_text(json.dumps({k: round(v, 2) for k, v in sorted(found.items())}, indent=0) + "\n")
    slow_s = slow_threshold()
    print(f"{OUT.name}: {len(found)} tests, {sum(v > slow_s for v in found.values())} over {slow_s} s (SLOW_S)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
