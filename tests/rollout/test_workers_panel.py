"""The Run page's workers panel reads per-worker rollouts/s and weight sync time from step metrics."""

import polars as pl


def test_worker_frames_from_step_metrics():
    from app.data import worker_frames

    steps = pl.DataFrame({"step": [1, 2], "metrics": [
        [{"key": "perf/worker/ray-0/rollouts_per_s", "value": 900.0}, {"key": "perf/worker/ray-1/rollouts_per_s",
                                                                       "value": 800.0},
         {"key": "perf/worker/ray-0/rollouts", "value": 256.0}, {"key": "timing_s/weight_sync", "value": 0.02}],
        [{"key": "perf/worker/ray-0/rollouts_per_s", "value": 950.0}, {"key": "timing_s/weight_sync", "value": 0.03}],
    ]})
    rates, sync = worker_frames(steps)
    assert rates.select("step", "worker", "rollouts_per_s").rows() == [(1, "ray-0", 900.0), (1, "ray-1", 800.0),
                                                                        (2, "ray-0", 950.0)]
    assert rates["rollouts"].to_list() == [256.0, None, None]
    assert sync.rows() == [(1, 0.02), (2, 0.03)]
    local = pl.DataFrame({"step": [1], "metrics": [[{"key": "timing_s/weight_sync", "value": 0.0}]]})
    assert worker_frames(local)[0].is_empty() and worker_frames(local)[1].is_empty()  # in-process: no panel
