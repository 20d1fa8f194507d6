"""Worker processes for the reliability tests (run as `python tests/store/procs.py ROLE ARGS...`).

Each role prints one JSON line with what it did; a non-zero exit status means it saw an error.
"""

from __future__ import annotations

import json
import os
import sys
import time

from workbench.store import open_store
from workbench.store.synthetic import Shape, SyntheticRun

SHAPE = Shape(prompts_per_step=8, rollouts_per_prompt=8, tokens=16, prompt_pool=200, blocks=2)
# One statement, so one snapshot: per step, the rows each table holds for the run.
WHOLE_STEPS_SQL = """
WITH r AS (SELECT step, count(*) AS n FROM rollouts WHERE run_id = $run GROUP BY step),
     a AS (SELECT step, count(*) AS n FROM allocations WHERE run_id = $run GROUP BY step),
     p AS (SELECT step, count(*) AS n FROM prompt_stats WHERE run_id = $run GROUP BY step),
     s AS (SELECT step, rollouts FROM steps WHERE run_id = $run)
SELECT coalesce(s.step, r.step, a.step, p.step) AS step, s.rollouts, r.n AS rn, a.n AS an, p.n AS pn
FROM s FULL JOIN r ON s.step = r.step FULL JOIN a ON coalesce(s.step, r.step) = a.step
FULL JOIN p ON coalesce(s.step, r.step, a.step) = p.step
"""


def writer(path: str, run_id: str, steps: int, seconds: float, upkeep_every: int | None = None) -> dict:
    """Write steps (until `steps` written or `seconds` passed), heartbeat after each; the store's
    file upkeep every `upkeep_every` steps (None: open_store's default)."""
    done = failed = 0
    with open_store(path, **({} if upkeep_every is None else {"upkeep_every": upkeep_every})) as store:
        syn = SyntheticRun(run_id, SHAPE, seed=hash(run_id) % 1000)
        end = time.monotonic() + seconds
        while done < steps and time.monotonic() < end:
            try:
                store.write_step(syn.step(done))
                store.heartbeat(run_id)
                done += 1
            except Exception as exc:  # counted and reported: the test asserts there are none
                failed += 1
                print(f"writer {run_id}: {exc}", file=sys.stderr)
    return {"role": "writer", "run_id": run_id, "steps": done, "failed": failed}


def group_writer(path: str, run_id: str, steps: int, seconds: float, commit_max_rows: int,
                 upkeep_every: int) -> dict:
    """Hand steps to a GroupWriter as fast as it takes them (several whole steps per commit), with
    the store's upkeep every `upkeep_every` steps; prints a line per flushed batch of 10 steps."""
    from workbench.store.group import GroupWriter

    done = failed = 0
    with open_store(path, upkeep_every=upkeep_every) as store:
        syn = SyntheticRun(run_id, SHAPE, seed=hash(run_id) % 1000)
        group = GroupWriter(store, commit_max_rows=commit_max_rows)
        end = time.monotonic() + seconds
        try:
            while done < steps and time.monotonic() < end:
                group.submit(syn.step(done))
                done += 1
                if done % 10 == 0:
                    group.flush()
                    print(json.dumps({"committed": done}), flush=True)
            group.close()
        except Exception as exc:  # counted and reported: the test asserts there are none
            failed += 1
            print(f"group writer {run_id}: {exc}", file=sys.stderr)
    commits = len(group.commits)
    return {"role": "group_writer", "run_id": run_id, "steps": done, "failed": failed, "commits": commits}


def reader(path: str, run_id: str, seconds: float) -> dict:
    """Read the run over and over; count torn steps (a table holding part of a step) and errors."""
    reads = torn = errors = 0
    max_step = -1
    with open_store(path, read_only=True) as store:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                frame = store.sql(WHOLE_STEPS_SQL, {"run": run_id})
                store.rollouts(run_id, limit=20, offset=0)
            except Exception as exc:
                errors += 1
                print(f"reader: {exc}", file=sys.stderr)
                continue
            reads += 1
            for row in frame.iter_rows(named=True):
                whole = (row["rollouts"] == SHAPE.rollouts_per_step and row["rn"] == SHAPE.rollouts_per_step
                         and row["an"] == SHAPE.prompts_per_step and row["pn"] == SHAPE.prompts_per_step)
                if not whole:
                    torn += 1
                    print(f"reader: torn step {row}", file=sys.stderr)
            if frame.height:
                max_step = max(max_step, int(frame["step"].max()))
    return {"role": "reader", "reads": reads, "torn": torn, "errors": errors, "max_step": max_step}


def controller(path: str, run_ids: list[str], count: int) -> dict:
    """Insert `count` control commands spread over the runs."""
    ids, failed = [], 0
    with open_store(path) as store:
        for i in range(count):
            try:
                ids.append(store.add_control(run_ids[i % len(run_ids)], "set_budget", {"rollouts": 64 + i}))
            except Exception as exc:
                failed += 1
                print(f"controller: {exc}", file=sys.stderr)
    return {"role": "controller", "ids": ids, "failed": failed}


def hang_in_step(path: str, run_id: str, ready: str) -> None:
    """Open a step's transaction, insert its rollouts, signal `ready`, then wait to be killed."""
    with open_store(path) as store:
        record = SyntheticRun(run_id, SHAPE, seed=5).step(99)
        from workbench.store.records import rollouts_to_arrow
        from workbench.store.writer import insert

        def tx(cur) -> None:  # noqa: ANN001
            insert(cur, "rollouts", rollouts_to_arrow(record.rollouts, run_id, 99), {"run_id": run_id, "step": 99})
            with open(ready, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(600)

        store._lake.write(tx, "hang")


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "writer":
        out = writer(args[0], args[1], int(args[2]), float(args[3]), *(int(a) for a in args[4:5]))
        ok = out["failed"] == 0
    elif role == "group_writer":
        out = group_writer(args[0], args[1], int(args[2]), float(args[3]), int(args[4]), int(args[5]))
        ok = out["failed"] == 0
    elif role == "reader":
        out = reader(args[0], args[1], float(args[2]))
        ok = out["torn"] == 0 and out["errors"] == 0
    elif role == "controller":
        out = controller(args[0], args[1].split(","), int(args[2]))
        ok = out["failed"] == 0
    elif role == "hang":
        hang_in_step(args[0], args[1], args[2])
        raise SystemExit(3)
    else:
        raise SystemExit(f"unknown role {role}")
    print(json.dumps(out), flush=True)
    raise SystemExit(0 if ok else 1)
