"""The allocator package depends on nothing above it: its own base, numpy and the errors module.
Harnesses that run the engine live in the benchmarks package beside the library."""

import subprocess
import sys

ABOVE = ("workbench.engine", "workbench.store", "workbench.commands", "workbench.cli", "benchmarks",
         "workbench.rollout", "workbench.control", "app", "torch", "duckdb", "streamlit")


def test_importing_allocators_loads_nothing_above_them():
    code = ("import sys, workbench.allocators, workbench.allocators.simulate; "
            "print('\\n'.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    bad = sorted(m for m in loaded if any(m == p or m.startswith(p + ".") for p in ABOVE))
    assert not bad, f"workbench.allocators imports modules above it: {bad}"


def test_every_shipped_allocator_module_is_in_the_package():
    from workbench.allocators.registry import get_allocator, shipped_allocators

    names = shipped_allocators()
    assert len(names) >= 10
    assert all(get_allocator(n).__module__.startswith("workbench.allocators.") for n in names)
