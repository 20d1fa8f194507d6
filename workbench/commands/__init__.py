"""The `workbench` command's parts: one module per noun, each with `register(app)` adding its
commands to the top-level Typer app (the `bench` group comes from the benchmarks package, through the
entry points `plugins.py` reads). Commands are thin: they parse, call one library function and print.
Heavy imports (torch, duckdb, streamlit) happen inside the commands so that `workbench --help` stays
fast."""

MODULES = ["store", "organism", "model", "engine", "allocators", "control", "app", "analysis", "integrations", "badinput", "guards", "playground", "sdk"]
