"""Rollout Workbench: RL with verifiable rewards, and how to spread a fixed rollout budget over prompts.

`import workbench` is light: it never imports streamlit, torch or duckdb; each part imports what it needs.
"""

__version__ = "0.1.0"

from workbench.errors import WorkbenchError

__all__ = ["WorkbenchError", "__version__"]
