"""Harnesses that span parts: the allocator comparison (`compare`), the engine and learn benchmarks
(`engine_bench`). They sit above the engine, the store and the CLI's helpers, so that
`workbench.allocators`, `workbench.store` and `workbench.algorithms` depend on nothing above them."""
