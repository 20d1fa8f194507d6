"""Rollout Workbench: RL with verifiable rewards, and how to spread a fixed rollout budget over prompts.

`import workbench` is light: it never imports streamlit, torch or duckdb; each part imports what it needs.
"""

__version__ = "0.1.0"

from workbench.errors import WorkbenchError

__all__ = ["WorkbenchError", "__version__", "init", "Run"]


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    """`workbench.init` (open or continue a run a training loop logs into, docs/sdk.md), `workbench.Run`:
    the SDK's, loaded on first use (PEP 562) so that `import workbench` stays light and the package root
    names no layer."""
    if name in ("init", "Run"):
        import importlib

        return getattr(importlib.import_module("workbench.sdk"), name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
