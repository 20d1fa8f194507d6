"""The entropy and pass@k notebooks on a real-model store: every cell runs (nbclient, the test
interpreter's kernel) on the shared two-step SmolLM2 run (tests/models/conftest.py), whose rollouts
carry subword token ids from a 49,152-token vocabulary and whose evaluations are at steps 0 and 2."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

pytestmark = pytest.mark.slow

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
PLOTLY_MIME = "application/vnd.plotly.v1+json"


def execute(name: str, store: Path, run_ids: list[str]):
    """Run a notebook with its store and runs set by a cell after the one tagged `parameters`."""
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    nb.cells.insert(at + 1, new_code_cell(f"store_path = {str(store)!r}\nrun_ids = {run_ids!r}"))
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=False,
                   resources={"metadata": {"path": str(NOTEBOOKS_DIR)}}).execute()
    return nb


def outputs(nb, marker: str) -> list[dict]:
    cell = next(c for c in nb.cells if c.cell_type == "code" and marker in c.source)
    return cell.outputs


def values(array) -> list:
    """A chart's data array as plotly writes it: a list, or base64 bytes with their dtype (plotly 6)."""
    if isinstance(array, dict):
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def charts(nb) -> list[dict]:
    return [o["data"][PLOTLY_MIME] for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if PLOTLY_MIME in o.get("data", {})]


def test_entropy_notebook_on_a_real_model_store(smollm2_run):
    store, rid = smollm2_run
    nb = execute("entropy.ipynb", store, [rid])
    assert "8 rollouts from 1 run(s)" in "".join(o.get("text", "") for o in outputs(nb, "rollouts = stack("))
    drawn = charts(nb)
    assert len(drawn) >= 6
    mean = next(f for f in drawn if "Mean token entropy" in f["layout"]["title"]["text"])
    ys = [y for t in mean["data"] if not t["name"].endswith("q90") for y in values(t["y"])]
    assert len(ys) == 2 and all(0 < y < 11 for y in ys)  # nats; ln(49,152) = 10.8
    forks = next(f for f in drawn if "forking tokens" in f["layout"]["title"]["text"].lower()
                 and f["data"][0]["type"] == "bar")
    shown = [x for t in forks["data"] for x in values(t["x"])]
    assert shown and not any(x.startswith("#") for x in shown), shown  # text from SmolLM2's tokenizer, not ids
    assert not any(mark in "".join(shown) for mark in "\u0120\u010a"), shown  # no 'Ġ'/'Ċ' of byte-level BPE


def test_pass_at_k_notebook_on_a_real_model_store(smollm2_run):
    store, rid = smollm2_run
    nb = execute("pass_at_k.ipynb", store, [rid])
    text = "".join(o.get("text", "") for o in outputs(nb, "evals = with_labels("))
    assert "4 evaluation rows; samples per prompt: 2; k in [1, 2]" in text, text
    drawn = charts(nb)
    assert len(drawn) >= 4
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs(nb, "gain = with_labels("))
    assert "newly_solved" in html
