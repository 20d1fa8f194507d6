"""Puts the repository root (for `app.*`) and this folder (for the `synth` helper) on sys.path; the
app itself puts the root there in app/main.py."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (HERE.parents[1], HERE):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
