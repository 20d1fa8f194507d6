"""The pass@k notebook in a real JupyterLab, driven by Debian's chromium through Playwright: the
server as `workbench notebooks` starts it (127.0.0.1, a token, the store in $WORKBENCH_STORE) on a
copy of `notebooks/`, over the store of a small real organism run; run all cells and see a chart
rendered in an output."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from test_browser import ARTIFACTS, CHROMIUM, ROOT, _free_port
from waiting import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]
PASS_AT_K_CHARTS = 4
"""pass_at_k.ipynb draws four charts: pass@k against k, over training, by level, sharpening."""


@pytest.fixture(scope="module")
def run_store(new_store, tiny_config, tmp_path_factory):
    """A store with one small real organism run that evaluated pass@k a few times."""
    from workbench.engine import run

    root = new_store(tmp_path_factory.mktemp("lab") / "store")
    cfg = tiny_config(name="lab-pass-at-k", steps=4, eval__every=2, checkpoint__every=50)
    run(cfg, store=str(root))
    return root


@pytest.fixture(scope="module")
def lab(run_store, tmp_path_factory):
    """JupyterLab on a copy of notebooks/ (running cells there must not write outputs into the
    committed notebooks); yields (port, token)."""
    from workbench.commands.analysis import jupyterlab_command

    home = tmp_path_factory.mktemp("jupyter")
    folder = home / "notebooks"
    shutil.copytree(ROOT / "notebooks", folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "*.py"))
    port, token = _free_port(), "workbench-test-token"
    env = {**os.environ, "WORKBENCH_STORE": str(run_store), "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "IPYTHONDIR": str(home / "ipython")}
    log = open(home / "lab.log", "w")
    argv = jupyterlab_command(port=port, browser=False, token=token, root=folder)
    argv.append("--LabApp.expose_app_in_browser=True")  # window.jupyterapp: the test runs JupyterLab's own commands
    proc = subprocess.Popen(argv,
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=folder, start_new_session=True)

    def up():
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2).status == 200
        except OSError:
            assert proc.poll() is None, (home / "lab.log").read_text()[-3000:]
            return False

    wait_until(up, 180, "JupyterLab's API", every=0.5)
    yield port, token, home
    os.killpg(proc.pid, signal.SIGTERM)  # its own process group: the server and its kernels
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()


def test_pass_at_k_notebook_draws_its_charts_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright

    from workbench.commands.analysis import lab_url

    port, token, home = lab
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(lab_url(port, token, "pass_at_k.ipynb"), timeout=180_000)
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=180_000)
            page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget && "
                                   "window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel?.status "
                                   "=== 'idle'", timeout=180_000)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")  # Run > Run All Cells
            # every code cell executed (the notebook's own model), the kernel idle again
            page.wait_for_function(
                "(() => { const nb = window.jupyterapp.shell.currentWidget;"
                " return nb.sessionContext.session?.kernel?.status === 'idle' && nb.content.widgets.every("
                "  c => c.model.type !== 'code' || c.model.executionCount); })()", timeout=600_000)
            outputs = page.evaluate(
                "window.jupyterapp.shell.currentWidget.content.widgets.filter(c => c.model.type === 'code')"
                ".flatMap(c => c.model.outputs.toJSON())")
            errors = [o for o in outputs if o.get("output_type") == "error"]
            assert not errors, errors
            charts = [o for o in outputs if "application/vnd.plotly.v1+json" in (o.get("data") or {})]
            assert len(charts) == PASS_AT_K_CHARTS, [sorted((o.get("data") or {})) for o in outputs]
            # the charts JupyterLab has in the page (it renders the cells in view) are drawn: traces in their SVG
            page.wait_for_function(
                "(() => { const outs = [...document.querySelectorAll('.jp-OutputArea-output')]"
                ".filter(o => o.querySelector('.main-svg'));"
                " return outs.length > 0 && outs.every(o => o.querySelectorAll('.main-svg .trace').length > 0); })()",
                timeout=120_000)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "jupyterlab-pass_at_k.png"))
        finally:
            browser.close()
