"""Benchmarks beside the library: harnesses that span parts (the allocator comparison, the engine,
learn and async benchmarks, chaos, soak, the bad-input corpus, the store and object-storage benches,
the dashboard's page times, the real model's measurements, the GPU check). They may import anything in
`workbench` and `app`; nothing there imports them (the import contracts in pyproject.toml).

`benchmarks.cli.app` is the `workbench bench` command group: the `workbench` command finds it through
the entry point group `workbench.commands` (pyproject.toml), so the library never names this package.
"""
