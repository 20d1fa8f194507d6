"""The dashboard's data layer: one cached store handle and cached frames, all through
`workbench.store`'s readers (no SQL here). Widgets are never read in here: pages pass values in.

Live frames (runs, steps, controls, alerts, ...) are cached per version of the tables they read
(`live`): a page reopened, or a live page refreshing, while none of its tables changed answers from
cache; what changed is read at most every LIVE_TTL seconds (one catalog query, `Store.changes_since`),
so a new commit shows within a live page's refresh interval. A run's steps are read incrementally
while the steps table only gets new rows. Frames of finished steps (rollouts, allocations) keep
BROWSE_TTL.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import polars as pl
import streamlit as st

from app import derive
from workbench.analysis.terms import metrics_long
from workbench.correctness import run_rule, with_correct
from workbench.store import default_store_path, open_store

LIVE_TTL = 2.0
"""How stale the tables' versions may be (the keys of the live frames)."""
BROWSE_TTL = 30.0
KEYED_TTL = 600.0
"""How long a live frame answers from cache while nothing new is committed."""


def store_location() -> str:
    """The store the app was started on: `--store PATH` after the script's `--`, else
    $WORKBENCH_STORE, else ./store."""
    # Under `streamlit run`, sys.argv is the script and its arguments; elsewhere (AppTest, the bench)
    # it belongs to the host process and is not ours to parse.
    argv = sys.argv[1:] if Path(sys.argv[0]).name in ("main.py", "serve.py") else []
    for i, arg in enumerate(argv):
        if arg == "--store" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--store="):
            return arg.split("=", 1)[1]
    return str(default_store_path())


def shown_location(location: str | None = None) -> str:
    """The store's location as the page shows it: relative to the directory the dashboard was started
    in when inside it ("store" after `make demo`), else under "~" when in the home directory, else as
    given (a catalog URL stays as it is)."""
    location = location or store_location()
    if "://" in location or location.startswith(("postgres:", "ducklake:")):
        return location
    path = Path(location)
    if not path.is_absolute():
        return location
    for base, prefix in ((Path.cwd().resolve(), ""), (Path.home().resolve(), "~/")):
        if base != Path(base.anchor) and path.resolve().is_relative_to(base):  # relative to "/" says nothing
            return prefix + str(path.resolve().relative_to(base))
    return location


@st.cache_resource(show_spinner=False)
def _open(location: str):
    return open_store(location)


def store():
    """The store handle (one per app process and location)."""
    return _open(store_location())


def store_outages() -> dict[str, dict[str, Any]]:
    """What runs of this machine say about an outage of their store ("store unreachable, retrying
    since ..."), read from the status files in the store's local folder, never from the store itself
    (see `workbench.store.outage`): run id -> status row with `message`. {} when there is none, or when
    the store's local folder cannot be told (an s3:// store without a catalog)."""
    from workbench.errors import StoreError
    from workbench.store.objectstore import local_dir
    from workbench.store.outage import read_statuses

    try:
        return read_statuses(local_dir(store_location()))
    except StoreError:
        return {}


def inflight(run_id: str):
    """The run's rollouts in flight (`workbench.store.inflight.InflightReport`), read from its file in
    the store's local folder on every call (a small file; never from the store, never cached)."""
    from workbench.errors import StoreError
    from workbench.store.inflight import InflightReport, read_inflight
    from workbench.store.objectstore import local_dir

    try:
        folder = local_dir(store_location())
    except StoreError as exc:
        return InflightReport(None, f"the store's local folder cannot be told: {exc}")
    return read_inflight(folder, run_id)


class _Tables:
    """What the live frames of one store are keyed on: per table, the snapshot id of its last change
    this process has seen (`Store.changes_since`), and of its last change that was not only new rows.
    When the store cannot tell which tables changed (the first look, expired snapshots, a table created
    or dropped) every table counts as changed: the epoch moves on."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()
        self.seen: int | None = None
        self.epoch = 0
        self.changed: dict[str, int] = {}
        self.rewritten: dict[str, int] = {}

    def update(self, handle) -> dict[str, Any]:
        with self.lock:
            latest, changes = handle.changes_since(self.seen)
            if changes is None:  # a new epoch: no key of an earlier one comes back
                self.epoch, self.changed, self.rewritten = self.epoch + 1, {}, {}
            else:
                for table, kind in changes.items():
                    self.changed[table] = latest
                    if kind != "insert":
                        self.rewritten[table] = latest
            self.seen = latest
            return {"epoch": self.epoch, "changed": dict(self.changed), "rewritten": dict(self.rewritten)}


@st.cache_resource(show_spinner=False)
def _tables(location: str) -> _Tables:
    return _Tables()


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def versions(location: str) -> dict[str, Any]:
    """The store's table versions (`_Tables`), read at most every LIVE_TTL seconds (one catalog query)."""
    return _tables(location).update(_open(location))


def version(location: str, table: str) -> tuple[int, int]:
    """A cache key that changes when `table` does: (epoch, snapshot id of its last change seen)."""
    v = versions(location)
    return v["epoch"], v["changed"].get(table, 0)


def live(*tables: str):
    """A live frame reading `tables`, cached until one of them changes (for up to KEYED_TTL): a commit
    to other tables (another run's rollouts, a heartbeat) leaves it cached. The wrapper keeps `fn`'s
    name and a `clear()` as `st.cache_data` gives."""
    import functools

    def decorate(fn):
        def keyed(location: str, key: tuple, *args, **kwargs):  # two stores' versions say nothing of each other
            return fn(*args, **kwargs)

        keyed.__qualname__ = keyed.__name__ = f"{fn.__qualname__}_at_version"  # one cache per function
        cached = st.cache_data(ttl=KEYED_TTL, max_entries=256, show_spinner=False)(keyed)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            location = store_location()
            return cached(location, tuple(version(location, t) for t in tables), *args, **kwargs)

        wrapper.clear = cached.clear
        return wrapper

    return decorate


# --- runs and steps (live) ---------------------------------------------------------------------


@live("runs", "steps")
def runs() -> pl.DataFrame:
    return store().list_runs()


def run(run_id: str) -> dict:
    """One run's row (config decoded) from the cached `runs()` frame; {} when unknown."""
    r = runs()
    rows = r.filter(pl.col("run_id") == run_id).to_dicts() if not r.is_empty() else []
    if not rows:
        return {}
    row = rows[0]
    if isinstance(row.get("config"), str):
        try:
            row["config"] = json.loads(row["config"])
        except json.JSONDecodeError:
            row["config"] = {}
    return row


STEP_FRAMES_KEPT = 32
"""Steps frames kept per store for incremental reads (one per set of runs shown)."""


@st.cache_resource(show_spinner=False)
def _step_frames(location: str) -> dict:
    return {}


@live("steps")
def steps(run_ids: tuple[str, ...]) -> pl.DataFrame:
    """The runs' steps, ordered by run then step. While the steps table has only got new rows since the
    frame was last read, only the steps after each run's last one are read and appended (a live run's
    refresh reads its new steps, not its whole history); a deletion or rewrite (a rollback, compaction)
    reads it whole again."""
    if not run_ids:
        return pl.DataFrame()
    location = store_location()
    v = versions(location)
    mark = (v["epoch"], v["rewritten"].get("steps", 0))
    kept = _step_frames(location)
    held = kept.get(run_ids)
    if held is not None and held[0] == mark and not held[1].is_empty():
        last = dict(held[1].group_by("run_id").agg(pl.col("step").max()).iter_rows())
        new = store().run_steps(list(run_ids), after={r: last.get(r, -1) for r in run_ids})
        frame = held[1] if new.is_empty() else pl.concat([held[1], new], how="vertical_relaxed").sort("run_id", "step")
    else:
        frame = store().run_steps(list(run_ids))
    kept.pop(run_ids, None)
    kept[run_ids] = (mark, frame)
    while len(kept) > STEP_FRAMES_KEPT:
        kept.pop(next(iter(kept)))
    return frame


@live("evals")
def evals(run_id: str) -> pl.DataFrame:
    return store().evals(run_id)


def fingerprint(frame: pl.DataFrame) -> tuple[int, int]:
    """A frame's content as a cache key (rows, and a sum of its rows' hashes): what a derived frame is
    cached on, so that a commit elsewhere in the store, which changes the snapshot, does not recompute it."""
    return (frame.height, int(frame.hash_rows(seed=0).sum()) if frame.height else 0)


@st.cache_data(ttl=KEYED_TTL, max_entries=64, show_spinner=False)
def _passk(run_id: str, evals_fingerprint: tuple[int, int]) -> pl.DataFrame:
    return derive.passk_by_step(evals(run_id))


def passk(run_id: str) -> pl.DataFrame:
    """Held-out pass@k per evaluated step (`derive.passk_by_step`: bootstraps), recomputed only when the
    run's evaluations change (the run evaluates every few steps; other commits leave it cached)."""
    return _passk(run_id, fingerprint(evals(run_id)))


@live("controls")
def controls(run_id: str) -> pl.DataFrame:
    return store().controls(run_id)


@live("events")
def events(run_id: str) -> pl.DataFrame:
    return store().events(run_id)


@live("runs", "steps", "evals")
def run_table() -> pl.DataFrame:
    """The Runs page's table: one row per run with its summary."""
    r = runs()
    if r.is_empty():
        return derive.run_summary(r, pl.DataFrame(), {})
    ids = tuple(r["run_id"].to_list())
    best = {}
    for run_id in ids:  # pass@1 of a step is the mean of c / n over its prompts: no bootstrap needed here
        ev = evals(run_id)
        ev = ev.filter(pl.col("samples") > 0) if not ev.is_empty() else ev
        if not ev.is_empty():
            per_step = ev.group_by("step").agg((pl.col("correct") / pl.col("samples")).mean().alias("p1"))
            best[run_id] = float(per_step["p1"].max())
    return derive.run_summary(r, steps(ids), best)


ENTROPY_WINDOW_ROLLOUTS = 50_000
"""Most rollouts read to compute per-step entropy quantiles when the engine does not log them."""


@live("steps", "rollouts")
def entropy_quantiles(run_id: str) -> tuple[pl.DataFrame, str]:
    """Per-step quantiles of entropy (columns step, q, value) and where they come from: the step
    metrics `rollout/entropy_p10`, ... when the engine logs them; else the 10/50/90% quantiles of the
    rollouts' mean entropy, over the latest steps holding at most ENTROPY_WINDOW_ROLLOUTS rollouts."""
    schema = {"step": pl.Int64, "q": pl.Utf8, "value": pl.Float64}
    s = steps((run_id,))
    if s.is_empty():
        return pl.DataFrame(schema=schema), ""
    logged = metrics_long(s, prefix="rollout/entropy_p").drop_nulls("value")
    if not logged.is_empty():
        return (logged.select("step", pl.col("key").str.strip_prefix("rollout/entropy_").alias("q"), "value")
                .cast(schema), "token entropy quantiles logged by the engine")
    step_min = derive.window_start(s, ENTROPY_WINDOW_ROLLOUTS)
    frame = store().rollouts(run_id, step_min=step_min, limit=_limit(s, step_min), columns=["step", "entropy_mean"])
    return derive.step_quantiles(frame, "entropy_mean"), (
        f"quantiles of rollout mean entropy, steps {step_min}–{int(s['step'].max())}")


@live("rollouts")
def staleness_counts(run_id: str) -> pl.DataFrame:
    """Rollouts the trainer consumed at each staleness (`Store.staleness_counts`)."""
    return store().staleness_counts(run_id)


@live("steps")
def workers(run_id: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The run's rollout workers (Ray backend): per step and worker its rollouts/s (`step, worker,
    rollouts_per_s, rollouts`), and per step the weight sync time (`step, weight_sync_s`). Both are
    empty for a run that generated in the trainer's process."""
    return worker_frames(steps((run_id,)))


def worker_frames(steps_frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`workers` from a steps frame: reads `perf/worker/<name>/rollouts_per_s`, `.../rollouts` and
    `timing_s/weight_sync` out of each step's metrics."""
    rate_schema = {"step": pl.Int64, "worker": pl.Utf8, "rollouts_per_s": pl.Float64, "rollouts": pl.Float64}
    sync_schema = {"step": pl.Int64, "weight_sync_s": pl.Float64}
    long = metrics_long(steps_frame, prefix="perf/worker/") if "step" in steps_frame.columns else pl.DataFrame()
    if long.is_empty():
        return pl.DataFrame(schema=rate_schema), pl.DataFrame(schema=sync_schema)
    parts = long.drop_nulls("value").with_columns(pl.col("key").str.strip_prefix("perf/worker/"))
    parts = parts.with_columns(pl.col("key").str.extract(r"^(.*)/").fill_null("").alias("worker"),
                               pl.col("key").str.extract(r"([^/]*)$").alias("field"))
    frame = pl.DataFrame(schema=rate_schema)
    if not parts.is_empty():
        wide = parts.pivot(on="field", index=["step", "worker"], values="value", aggregate_function="last")
        frame = wide.select([(pl.col(c) if c in wide.columns else pl.lit(None)).cast(t).alias(c)
                             for c, t in rate_schema.items()])
    sync = metrics_long(steps_frame, keys=("timing_s/weight_sync",)).drop_nulls("value").filter(
        pl.col("step").is_in(long["step"].unique().implode()))
    sync = sync.select("step", pl.col("value").alias("weight_sync_s")).cast(sync_schema)
    return frame.sort("step", "worker"), sync.sort("step")


# --- browsing (finished steps) -----------------------------------------------------------------


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def rollouts(run_id: str, filters: tuple[tuple[str, Any], ...], limit: int, offset: int) -> pl.DataFrame:
    return judged(run_id, store().rollouts(run_id, **dict(filters), limit=limit, offset=offset))


def exporter(run_id: str, filters: tuple[tuple[str, Any], ...], kind: str, fmt: str) -> Callable[[], bytes]:
    """The Rollouts page's export: a callable (run when the download button is clicked) that writes the
    set exactly as `workbench export` does for these filters (`workbench.export.export_run`, into a
    temporary folder) and returns its data file's bytes."""
    opened = store()

    def data_file() -> bytes:
        import tempfile

        from workbench.export import export_run

        with tempfile.TemporaryDirectory(prefix="export-") as tmp:
            out = Path(tmp) / "set"
            export_run(opened, run_id, out, kind=kind, fmt=fmt, filters=dict(filters))
            return (out / f"data.{fmt}").read_bytes()

    return data_file


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def has_episodes(run_id: str) -> bool:
    """Whether the run stored any multi-turn rollout (its Rollouts page then offers the episode filters)."""
    return store().has_episodes(run_id)


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def episodes(run_id: str, keys: tuple[tuple[int, int, str, int], ...]) -> dict:
    """The stored episodes (multi-turn rollouts) among the page's rollout keys, by key."""
    return store().episodes(run_id, list(keys))


def judged(run_id: str, frame: pl.DataFrame) -> pl.DataFrame:
    """Rollouts with `correct` filled: the stored verdict, else the run's rule (see
    `workbench.correctness`; rows of a store from before the verdict column)."""
    return with_correct(frame, run_rule(run(run_id).get("config")))


HISTOGRAM_ROWS = 50_000
"""The most rollouts the Rollouts page's histograms read (the first ones of the step range)."""


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def rollout_values(run_id: str, step_min: int, step_max: int) -> pl.DataFrame:
    """Reward, length and mean entropy of the rollouts of a step range (the Rollouts page's histograms)."""
    return store().rollouts(run_id, step_min=step_min, step_max=step_max, limit=HISTOGRAM_ROWS,
                            columns=["reward", "length", "entropy_mean"])


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def count_rollouts(run_id: str, filters: tuple[tuple[str, Any], ...]) -> int:
    return int(store().count_rollouts(run_id, **dict(filters)))


def _limit(steps_frame: pl.DataFrame, step_min: int, step_max: int | None = None) -> int:
    """A row limit safely above the rollouts logged in a step range (the steps table counts them),
    so a bulk read needs no count query first."""
    sel = steps_frame.filter(pl.col("step") >= step_min)
    if step_max is not None:
        sel = sel.filter(pl.col("step") <= step_max)
    return 2 * int(sel["rollouts"].fill_null(0).sum()) + 10_000


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def step_rewards(run_id: str, step_min: int, step_max: int) -> pl.DataFrame:
    """(step, prompt_id, reward, correct) of every rollout in a step range (for observed pass rates)."""
    return judged(run_id, store().rollouts(run_id, step_min=step_min, step_max=step_max,
                                           limit=_limit(steps((run_id,)), step_min, step_max), offset=0,
                                           columns=["step", "prompt_id", "reward", "correct"]))


class _CachedReader:
    """The reader methods `workbench.control.api.allocator_in_force` calls, served from the cached
    frames (so the live page asks the store nothing extra)."""

    def run(self, run_id: str) -> dict:
        return run(run_id)

    def run_steps(self, run_ids) -> pl.DataFrame:
        return steps((run_ids,) if isinstance(run_ids, str) else tuple(run_ids))

    def controls(self, run_id: str) -> pl.DataFrame:
        return controls(run_id)


def allocator_in_force(run_id: str) -> tuple[str | None, dict]:
    """The allocator (name, params) the run uses once its pending commands apply (live control's own
    rule, `workbench.control.allocator_in_force`, over the cached frames)."""
    from workbench.control import allocator_in_force as in_force

    return in_force(_CachedReader(), run_id)


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def allocations(run_id: str, step: int | None = None, prompt_id: str | None = None) -> pl.DataFrame:
    return store().allocations(run_id, step=step, prompt_id=prompt_id)


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def prompt_history(run_id: str, prompt_id: str) -> pl.DataFrame:
    return store().prompt_history(run_id, prompt_id)


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def prompts(run_id: str) -> pl.DataFrame:
    return store().prompts(run_id)


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def prompt_texts(run_id: str, prompt_ids: tuple[str, ...]) -> dict[str, str]:
    p = prompts(run_id)
    if p.is_empty():
        return {}
    sub = p.filter(pl.col("prompt_id").is_in(list(prompt_ids)))
    return dict(zip(sub["prompt_id"].to_list(), sub["text"].to_list()))


# --- selections shared by the pages ------------------------------------------------------------


def short_id(run_id: str) -> str:
    """The part of a run id that tells runs of one name apart: `<name>-<date>-<time>-<hex>` gives
    `<time>-<hex>` (labels keyed by it must be unique: the Compare page keys its curves by label)."""
    parts = run_id.rsplit("-", 3)
    return f"{parts[2]}-{parts[3]}" if len(parts) == 4 else run_id


def run_options() -> tuple[list[str], dict[str, str]]:
    """Run ids newest first, and a label for each ("name · status · id")."""
    r = runs()
    if r.is_empty():
        return [], {}
    if "created_at" in r.columns:
        r = r.sort("created_at", descending=True, nulls_last=True)
    ids = r["run_id"].to_list()
    labels = {
        rid: f"{name} · {status} · {short_id(rid)}"
        for rid, name, status in zip(ids, r["name"].to_list(), r["status"].to_list())
    }
    return ids, labels


# --- runs that logged no allocation decisions (imported from other engines) ---------------------


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def prompt_rollout_outcomes(run_id: str, prompt_id: str) -> pl.DataFrame:
    """(step, stage, reward, correct) of every rollout of one prompt in a run: its visits as the
    rollouts tell them, for the Prompt page of a run with no `allocations` / `prompt_stats` rows."""
    s = store()
    n = int(s.count_rollouts(run_id, prompt_id=prompt_id))
    return judged(run_id, s.rollouts(run_id, prompt_id=prompt_id, limit=max(n, 1), offset=0,
                                     columns=["step", "stage", "reward", "correct"]))


# --- runs compared prompt by prompt --------------------------------------------------------------


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def prompt_comparison(run_ids: tuple[str, ...], basis: str, at: int | None, window: int | None,
                      labels: tuple[str, ...]):
    """`workbench.analysis.compare_runs` over the cached store handle."""
    from workbench.analysis import compare_runs

    return compare_runs(store(), list(run_ids), basis=basis, at=at, window=window, labels=list(labels))


@st.cache_data(ttl=BROWSE_TTL, show_spinner=False)
def step_comparison(run_id: str, before: int, after: int, window: int | None):
    """`workbench.analysis.compare_steps` (one run, two points) over the cached store handle."""
    from workbench.analysis import compare_steps

    return compare_steps(store(), run_id, before, after, window=window)



# --- guards: alerts and the attempts a rollback abandoned ----------------------------------------


@live("alerts")
def alerts(run_id: str | None = None, status: str | None = None) -> pl.DataFrame:
    """Alerts newest first (of one run, or every run), optionally of one status."""
    return store().alerts(run_id, status=status)


@live("runs")  # an attempt is abandoned (a runs row) after its last step: its steps no longer change
def attempts(run_id: str) -> list[tuple[str, pl.DataFrame]]:
    """The run's abandoned attempts, oldest first: (label, their steps)."""
    s = store()
    frame = s.attempts(run_id)
    ids = frame["run_id"].to_list() if not frame.is_empty() else []
    return [(f"attempt {i + 1} (abandoned)", s.run_steps(a)) for i, a in enumerate(ids)]
