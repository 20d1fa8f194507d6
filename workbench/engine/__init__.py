"""The training engine: the loop (`loop.py`), checkpoint and resume, evaluation, step logging, and
what live control may change (`control.py`).

    from workbench.config import load_config
    from workbench.engine import run, resume
    run_id = run(load_config("configs/organism.toml"), store="store")
"""

from workbench.engine.runner import resume, run

__all__ = ["run", "resume"]
