"""The bad-input corpus (R3): every kind of bad input a user can hand the workbench, each run as a
real `workbench ...` subprocess and judged on what the user sees and what the store keeps.

The corpus is data: `tests/bad_inputs/cases.toml` lists each case (id, category, the command's
arguments, the text its error must contain: the field, row or path at fault), next to the small case
files (configs, data sets, user verifiers). Large and binary inputs (a 50 MB JSONL line, invalid
UTF-8, corrupt Parquet, corrupt or missing catalogs and data files) are generated at run time by
`prepare`, never committed.

Each case passes ("clear") when the command
1. exits with a non-zero code (verdict cases: exits 0 and prints the expected verdict),
2. ends its stderr with ONE line starting `error:` that contains the expected text, no traceback,
3. finishes before its time limit (else: a hang; the process group is killed),
4. writes nothing: the live store's rows are unchanged, a fresh store path given to it stays absent,
   and no generated file changes.
A run of the small organism is live (paused) in the shared store through the whole corpus, and must
keep going: alive, heart-beating, and taking a step after the corpus resumes it.

    result = run_corpus()            # {"cases", "clear_errors", "crashes", "hangs", ..., "results"}
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from workbench.errors import WorkbenchError
from benchmarks.badinput_live import LiveRun
from benchmarks.zygote import Zygote

CASES_DIR = Path(__file__).resolve().parents[1] / "tests" / "bad_inputs"
"""The corpus in a source checkout: the manifest `cases.toml` and the case files."""
LOCK_FILES = (".write.lock", ".read.lock", ".read.gate")
"""Advisory lock files a reader may create; they hold no data and are not counted as writes."""
BIG_LINE_MB = 50


@dataclass
class Case:
    id: str
    category: str
    args: list[str]
    expect: str
    """Text the error line (or, for verdict cases, stdout) must contain."""
    outcome: str = "error"
    """"error": a non-zero exit with one clear line; "verdict": exit 0 printing `expect` in time."""
    timeout_s: float = 60.0
    note: str = ""
    """What the case feeds in (for the docs' table)."""
    known_issue: str = ""
    """A failure already known and reported (with where it must be fixed): the case still runs and
    reports its status, but is listed apart instead of counting against the corpus."""


@dataclass
class Result:
    id: str
    category: str
    status: str
    """clear | unclear | accepted | crash | hang | wrote"""
    exit_code: int | None
    seconds: float
    message: str
    detail: str = ""
    note: str = ""
    args: list[str] = field(default_factory=list)
    known_issue: str = ""


def load_cases(path: Path | None = None) -> list[Case]:
    """The cases of a manifest (default: the corpus in this checkout)."""
    path = Path(path or CASES_DIR / "cases.toml")
    if not path.is_file():
        raise WorkbenchError(f"bad-input corpus {path}: not found (the corpus lives in a source checkout)")
    data = tomllib.loads(path.read_text())
    cases = [Case(**row) for row in data.get("case", [])]
    ids = [c.id for c in cases]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise WorkbenchError(f"{path}: duplicate case id {dup[0]!r}")
    return cases


# -- generated inputs ---------------------------------------------------------------------------


def _small_store(path: Path, *, finished: bool = True) -> str:
    """A store with one synthetic run of 3 steps; its run id."""
    from workbench.store import open_store
    from workbench.store.synthetic import Shape, SyntheticRun

    with open_store(path) as store:
        run_id = store.create_run("badinput-synthetic", {"allocator": {"name": "uniform", "params": {"n": 4}}},
                                  seed=0, status="running")
        gen = SyntheticRun(run_id, Shape(prompts_per_step=4, rollouts_per_prompt=4, tokens=8), seed=0)
        for step in range(3):
            store.write_step(gen.step(step))
        if finished:
            store.set_run_status(run_id, "finished")
    return run_id


def _parquet_files(store: Path, table: str) -> list[Path]:
    return sorted((store / "data").rglob(f"*{os.sep}{table}{os.sep}*.parquet"))


def generate(gen: Path) -> None:
    """Write the large and binary inputs and the broken stores under `gen`."""
    data = gen / "data"
    data.mkdir(parents=True, exist_ok=True)
    good = '{"question": "1+1=", "answer": "2"}\n{"question": "2+2=", "answer": "4"}\n'
    with open(data / "big_line.jsonl", "wb") as fh:  # one 50 MB line, then two good rows
        fh.write(b'{"question": "' + b"9" * (BIG_LINE_MB << 20) + b'", "answer": "1"}\n')
        fh.write(good.encode())
    (data / "invalid_utf8.jsonl").write_bytes(b'{"question": "1+1=\xff\xfe", "answer": "2"}\n' * 2 + good.encode()[:36])
    (data / "binary.jsonl").write_bytes(bytes(range(256)) * 64)
    (data / "corrupt.parquet").write_bytes(b"PAR1" + os.urandom(2048) + b"PAR1")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"problem": ["1+1=", "2+2="], "solution": ["2", "4"]}), data / "other_columns.parquet")
    (data / "a_directory.jsonl").mkdir(exist_ok=True)

    responses = gen / "responses"
    responses.mkdir(exist_ok=True)
    texts = {
        "nested_braces": "\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}",
        "nested_frac": "\\boxed{" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "}",
        "nested_sqrt": "\\boxed{" + "\\sqrt{" * 500 + "2" + "}" * 500 + "}",
        "long_100k": "let me think " * 7700 + "so the answer is \\boxed{7}",
        "huge_number": "\\boxed{" + "9" * 100_000 + "}",
        "power_tower": "\\boxed{9^{9^{9^{9^{9}}}}}",
        "unbalanced": "\\boxed{" * 20_000,
        "many_boxed": "\\boxed{1}" * 20_000,
        "big_matrix": "\\boxed{\\begin{pmatrix}" + " & ".join(["x"] * 4000) + "\\end{pmatrix}}",
        "control_chars": "\\boxed{\x00\x01\x1b[2J\u202e1}",
    }
    for name, text in texts.items():
        (responses / f"{name}.txt").write_text(text)

    stores = gen / "stores"
    stores.mkdir(exist_ok=True)
    (stores / "regular_file").write_text("not a store\n")
    base = stores / "base"
    _small_store(base)
    for name in ("corrupt_parquet", "missing_parquet", "missing_catalog", "corrupt_catalog",
                 "empty_catalog", "catalog_is_dir", "truncated_catalog"):
        shutil.copytree(base, stores / name, ignore=shutil.ignore_patterns(*LOCK_FILES))
    for f in _parquet_files(stores / "corrupt_parquet", "rollouts"):
        size = f.stat().st_size
        f.write_bytes(b"PAR1" + b"\x00garbage" * (size // 8) + b"PAR1")
    for f in _parquet_files(stores / "missing_parquet", "rollouts"):
        f.unlink()
    (stores / "missing_catalog" / "catalog.sqlite").unlink()
    (stores / "corrupt_catalog" / "catalog.sqlite").write_bytes(b"this is not a SQLite database\n" * 100)
    (stores / "empty_catalog" / "catalog.sqlite").write_bytes(b"")
    (stores / "catalog_is_dir" / "catalog.sqlite").unlink()
    (stores / "catalog_is_dir" / "catalog.sqlite").mkdir()
    cat = stores / "truncated_catalog" / "catalog.sqlite"
    cat.write_bytes(cat.read_bytes()[:4096])
    for extra in ("-wal", "-shm"):
        for name in ("corrupt_catalog", "empty_catalog", "truncated_catalog"):
            (stores / name / f"catalog.sqlite{extra}").unlink(missing_ok=True)


# -- running the cases -------------------------------------------------------------------------------


def _fingerprint_store(store: Path) -> dict[str, Any]:
    """Row counts of every table and the largest step per table (heartbeats excluded: they change)."""
    from workbench.store import open_store

    from workbench.store.audit import COUNTED, row_count, run_statuses

    with open_store(store, read_only=True) as st:
        out: dict[str, Any] = {table: row_count(st, table) for table in COUNTED}
        out["run_status"] = run_statuses(st)
    return out


def _fingerprint_tree(root: Path) -> dict[str, str]:
    """Every file under `root` (lock files excluded) -> its size, modification time and kind."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.name in LOCK_FILES or path.name.endswith("-shm"):  # SQLite's shared-memory index of a WAL reader
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        if path.is_dir():  # a directory's own mtime moves with the store's write probe (created and removed)
            out[str(path.relative_to(root))] = "dir"
        elif path.name.endswith("-wal") and st.st_size == 0:  # an empty write-ahead log: nothing written
            continue
        else:
            out[str(path.relative_to(root))] = f"{st.st_size}|{st.st_mtime_ns}"
    return out


_TRACEBACK = re.compile(r"^Traceback \(most recent call last\)|^\s+File \"", re.M)


def judge(case: Case, code: int | None, out: str, err: str, seconds: float, timed_out: bool) -> tuple[str, str, str]:
    """(status, message shown to the user, detail) of one finished case."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else ""
    if timed_out:
        return "hang", last, f"no answer within {case.timeout_s:g} s"
    if _TRACEBACK.search(err) or (code is not None and code < 0):
        return "crash", last, f"exit {code}; traceback or signal"
    if case.outcome == "verdict":
        shown = (out.strip().splitlines() or [""])[-1]
        if code != 0:
            return "unclear", last, f"exit {code}, expected 0 with a verdict"
        if case.expect not in shown:
            return "unclear", shown, f"verdict lacks {case.expect!r}"
        return "clear", shown, ""
    if code == 0:
        return "accepted", (out.strip().splitlines() or [""])[-1], "exit 0: the bad input was accepted"
    if not last.startswith("error:") or case.expect not in last:
        return "unclear", last, f"last stderr line lacks 'error:' or {case.expect!r}"
    return "clear", last, ""


def _run_case(case: Case, subst: dict[str, str], workdir: Path, env: dict[str, str],
              zyg: Zygote | None = None) -> Result:
    fresh = workdir / "fresh" / case.id
    values = {**subst, "fresh": str(fresh)}
    args = [a.format(**values) for a in case.args]
    t0 = time.perf_counter()
    if zyg is not None:
        logs = workdir / "logs"
        logs.mkdir(exist_ok=True)
        out_path, err_path = logs / f"{case.id}.out", logs / f"{case.id}.err"
        code, timed_out = zyg.run(args, out_path, err_path, case.timeout_s)
        out = out_path.read_text(errors="replace")
        err = err_path.read_text(errors="replace")
    else:
        cmd = [sys.executable, "-m", "workbench.cli", *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                cwd=workdir, env=env, start_new_session=True)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=case.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        code = proc.returncode
    seconds = time.perf_counter() - t0
    status, message, detail = judge(case, code, out, err, seconds, timed_out)
    if status in ("clear", "unclear") and fresh.exists():
        status, detail = "wrote", f"created {fresh}"

    def local(text: str) -> str:  # no machine paths in what is reported (the docs' table)
        return text.replace(str(workdir), "<work>").replace(subst["cases"], "tests/bad_inputs")
    return Result(case.id, case.category, status, code, round(seconds, 2), local(message),
                  local(detail), case.note, [local(a) for a in args], case.known_issue)


def run_corpus(cases_path: Path | None = None, *, workdir: Path | None = None, jobs: int = 2,
               only: list[str] | None = None, live: bool = True, fork: bool = True,
               progress: Callable[[Result], None] | None = None) -> dict[str, Any]:
    """Prepare the inputs, start the live run, run every case (`jobs` at a time), check that nothing
    was written and that the live run keeps going; the summary with one entry per case.

    `fork`: start each case as a child forked from a zygote process that imported torch and the
    workbench once (milliseconds per case; each case is still its own process and session), instead
    of a fresh `python -m workbench.cli` (1-3 s of imports per case)."""
    cases = load_cases(cases_path)
    if only:
        cases = [c for c in cases if c.id in only or c.category in only]
    manifest_dir = Path(cases_path).parent if cases_path else CASES_DIR
    own = workdir is None
    workdir = Path(workdir or tempfile.mkdtemp(prefix="workbench-badinput-"))
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    live_run: LiveRun | None = None
    zygotes: list[Zygote] = []
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(manifest_dir / "verifiers"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "WORKBENCH_STORE": str(workdir / "fresh" / "default-store"), "PYTHONUNBUFFERED": "1"}
        env.pop("COLUMNS", None)
        if fork:  # they import while the inputs are generated and the live run starts
            env["WORKBENCH_BADINPUT_PATH"] = str(manifest_dir / "verifiers")
            zygotes = [Zygote(env, workdir) for _ in range(max(1, jobs))]
        gen = workdir / "gen"
        generate(gen)
        store = workdir / "store"
        finished = _small_store(store)
        idle = _small_store(store, finished=False)  # without --live, control cases address this one
        if live:
            live_run = LiveRun(store)
            live_run.start()
        subst = {"cases": str(manifest_dir), "gen": str(gen), "store": str(store),
                 "run": live_run.run_id if live_run else idle, "finished": finished}
        store_before, gen_before = _fingerprint_store(store), _fingerprint_tree(gen)
        for z in zygotes:
            z.wait_ready()
        results: list[Result] = []
        ready_s = time.perf_counter() - t0
        free = list(range(len(zygotes)))
        import threading

        free_lock = threading.Lock()

        def one(case: Case) -> Result:
            zyg = None
            if zygotes:
                with free_lock:
                    slot = free.pop()
                zyg = zygotes[slot]
            try:
                r = _run_case(case, subst, workdir, env, zyg)
            finally:
                if zygotes:
                    with free_lock:
                        free.append(slot)
            if progress:
                progress(r)
            return r

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            results = list(pool.map(one, cases))
        store_after, gen_after = _fingerprint_store(store), _fingerprint_tree(gen)
        wrote_anywhere = []
        if store_after != store_before:
            wrote_anywhere.append(f"store rows changed: {store_before} -> {store_after}")
        changed = sorted(k for k in set(gen_before) | set(gen_after) if gen_before.get(k) != gen_after.get(k))
        if changed:
            wrote_anywhere.append("generated inputs changed: " + ", ".join(changed[:8]))
        if (workdir / "fresh" / "default-store").exists():
            wrote_anywhere.append("the default store was created")
        live_report = live_run.check() if live_run else {"ok": None}
    finally:
        for z in zygotes:
            z.close()
        if live_run is not None:
            live_run.stop()
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    by = {s: sum(r.status == s for r in results) for s in ("clear", "unclear", "accepted", "crash", "hang", "wrote")}
    known = [{"id": r.id, "status": r.status, "issue": r.known_issue} for r in results
             if r.known_issue and r.status != "clear"]
    failed = [r.id for r in results if r.status != "clear" and not r.known_issue]
    return {
        "passed": not failed and not wrote_anywhere and live_report.get("ok") is not False,
        "failed": failed,
        "known_issues": known,
        "cases": len(results),
        "clear_errors": by["clear"],
        "crashes": by["crash"],
        "hangs": by["hang"],
        "unclear": by["unclear"],
        "accepted": by["accepted"],
        "wrote": by["wrote"],
        "store_unchanged": not wrote_anywhere,
        "writes": wrote_anywhere,
        "live_run": live_report,
        "categories": {c: sum(r.category == c for r in results) for c in sorted({r.category for r in results})},
        "setup_s": round(ready_s, 1),
        "seconds": round(time.perf_counter() - t0, 1),
        "results": [asdict(r) for r in results],
    }


def markdown_table(summary: dict[str, Any]) -> str:
    """The per-case table of `docs/reliability.md`: id, what is fed in, the command, the message."""
    lines = ["| case | input | command | message (last line of stderr, or the verdict) |",
             "|---|---|---|---|"]
    for r in summary["results"]:
        args = " ".join(_short(a) for a in r["args"])
        msg = _short(r["message"], 160).replace("|", "\\|")
        lines.append(f"| `{r['id']}` | {r['note']} | `workbench {args.replace('|', '/')}` | {msg} |")
    return "\n".join(lines) + "\n"


def _short(text: str, limit: int = 60) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"
