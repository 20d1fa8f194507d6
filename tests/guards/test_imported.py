"""Guards on an imported verl run, step files arriving as a followed run writes them: a clean start
raises nothing, degenerate outputs raise the default `degenerate_text` alert (alert only) with the
offending responses as its rollouts."""

from __future__ import annotations

import json
import threading

from workbench.integrations import get_format
from workbench.integrations.common import Importer
from workbench.integrations.follow import follow
from workbench.store import open_store
from waiting import wait_until


def _write_step(folder, step: int, degenerate: bool) -> None:
    lines = []
    for p in range(4):
        for i in range(4):
            out = "!!!!!!!!!!" if degenerate and i < 3 else f"{2 * p} is the answer"
            lines.append({"input": f"what is {p}+{p}?", "output": out, "gts": str(2 * p),
                          "score": float(not degenerate and i % 2 == 0), "step": step})  # a group of 4 per prompt, with signal while clean
    (folder / f"{step}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_followed_verl_run_raises_degenerate_text_alert_only(tmp_path):
    dump = tmp_path / "rollouts"
    dump.mkdir()
    for step in (1, 2, 3):
        _write_step(dump, step, degenerate=False)
    with open_store(tmp_path / "store") as st:
        imp = Importer(st, get_format("verl"), dump)
        imp.run_once()
        run_id = imp.run_id
        assert st.alerts(run_id).height == 0  # clean steps: the default guards stay quiet
        stop = threading.Event()
        t = threading.Thread(target=follow, args=(imp,), kwargs=dict(poll_s=0.2, stop=stop))
        t.start()
        try:
            for step in (4, 5, 6):  # the trainer elsewhere goes on, and its outputs degenerate
                _write_step(dump, step, degenerate=True)
            wait_until(lambda: st.alerts(run_id).height > 0, 60, "the followed run's first alert", every=0.2)
        finally:
            stop.set()
            t.join(timeout=30)
        (alert,) = st.alerts(run_id).to_dicts()
        assert alert["guard"] == "degenerate_text" and (alert["first_step"], alert["step"]) == (4, 5)
        assert alert["status"] == "open" and alert["outcome"].startswith("alert only")
        got = st.rollouts(run_id, alert_id=alert["alert_id"], limit=100)
        assert got.height == 2 * 12 and set(got["response"].to_list()) == {"!!!!!!!!!!"}
        assert st.controls(run_id).height == 0  # nothing was sent to a run we do not run
