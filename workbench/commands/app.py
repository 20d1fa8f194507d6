"""The dashboard's commands: `workbench app` starts the Streamlit app on a store; `workbench bench app`
times every page's full script run on a synthetic store of N rollouts (and on its copy in a bucket,
`--s3`; the timing is in workbench/experiments/app_bench.py)."""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from workbench.commands.common import JsonOpt, StoreOpt, print_json, store_path, store_spec
from workbench.access import ENV, ROLES, Gate, check_token, is_loopback, new_token
from workbench.dashboard import APP_DIR, MAIN, PAGES, SERVE
from workbench.errors import ConfigError, StoreError

__all__ = ["APP_DIR", "MAIN", "PAGES", "SERVE", "build_gate", "exec_app", "is_loopback", "streamlit_command"]


def streamlit_command(store: Path, *, port: int, address: str, headless: bool) -> list[str]:
    """The `streamlit run` command line for the dashboard on `store` (through its gate, `app/serve.py`)."""
    return [
        sys.executable, "-m", "streamlit", "run", str(SERVE),
        "--server.port", str(port),
        "--server.address", address,
        "--server.headless", "true" if headless else "false",
        "--browser.gatherUsageStats", "false",
        "--server.showEmailPrompt", "false",  # its first-run prompt blocks (or kills) a non-interactive start
        "--logger.hideWelcomeMessage", "true",  # we print the URL ourselves; this also drops Streamlit's ads
        "--client.toolbarMode", "viewer",  # no 'Deploy' button, no developer menu (rerun, clear cache)
        "--", "--store", str(store),
    ]


def _on_object_storage(store: Path) -> bool:
    from workbench.store.objectstore import is_object_url

    return is_object_url(store)


def exec_app(store: Path, *, port: int = 8501, address: str = "127.0.0.1", headless: bool = False,
             gate: Gate | None = None) -> None:
    """Become the Streamlit server of the dashboard on `store`, behind `gate` (no child left behind
    when this process is signalled); does not return."""
    store = store_spec(store) if _on_object_storage(store) else store  # type: ignore[assignment]
    env = {**os.environ, "WORKBENCH_STORE": str(store), ENV: (gate or Gate()).to_env()}
    argv = streamlit_command(store, port=port, address=address, headless=headless)
    os.execve(argv[0], argv, env)


def read_token_file(path: Path) -> dict[str, str]:
    """A token file: lines `control TOKEN` and/or `read TOKEN` (`#` comments allowed)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"--token-file {path}: {exc.strerror or exc}") from None
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        role, _, token = line.partition(" ")
        if role not in ROLES or not token.strip():
            raise ConfigError(f"--token-file {path} line {n}: expected `control TOKEN` or `read TOKEN`")
        out[role] = check_token(token, f"--token-file {path} line {n}")
    return out


def build_gate(address: str, *, control: str | None, read: str | None, token_file: Path | None,
               allow_hosts: list[str], session_hours: float) -> tuple[Gate, dict[str, str]]:
    """The gate for `address`, and the tokens to print (role -> token; only those drawn here or
    given). Loopback without a token given: open, Host check only. Otherwise tokens are required;
    a role with no token given gets a random one."""
    if session_hours <= 0:
        raise ConfigError(f"--session-hours must be > 0, got {session_hours}")
    given = read_token_file(token_file) if token_file else {}
    if control:
        given["control"] = check_token(control, "--token")
    if read:
        given["read"] = check_token(read, "--read-token")
    gate = Gate(allowed_hosts=[h.strip().lower() for h in allow_hosts if h.strip()], session_s=session_hours * 3600)
    if is_loopback(address) and not given:
        return gate, {}
    if given.get("control") and given.get("control") == given.get("read"):
        raise ConfigError("--read-token must differ from the control token")
    tokens = {role: given.get(role) or new_token() for role in ROLES}
    for role, token in tokens.items():
        gate.add_token(token, role)
    gate.open_without_token = False
    return gate, tokens


def exposure_warning(address: str) -> str | None:
    """The line printed when the dashboard binds an address other machines can reach."""
    if is_loopback(address):
        return None
    return (f"note: the dashboard binds {address}: other machines can reach it; every request needs a token. "
            "It speaks plain HTTP: put TLS in front (a reverse proxy) or use an SSH tunnel, see docs/dashboard.md")


def _check_app() -> None:
    if not MAIN.is_file():
        raise StoreError(f"the dashboard's entry point {MAIN} is missing (is this a source checkout?)")


def _check_store(path: Path) -> None:
    """Refuse a path that exists but is not a store (a file, a folder of other things), with the one
    line `workbench query` gives, before the server starts."""
    from workbench.store import open_store

    with open_store(path, read_only=True):
        pass


BENCH_RUN = "bench-app"
BENCH_SHAPE = dict(prompts_per_step=128, rollouts_per_prompt=16, tokens=200)
"""Synthetic steps of 2,048 rollouts of 200 tokens (the store's SyntheticRun)."""


def ensure_bench_store(path: Path, rollouts: int, *, runs: int = 1, eval_every: int = 10, eval_prompts: int = 64,
                       eval_samples: int = 16) -> dict:
    """A store at `path` holding `runs` synthetic runs of `rollouts` rollouts each (rounded up to whole
    steps), named bench-app, bench-app-2, ... (seeds 0, 1, ...), with held-out evaluations every
    `eval_every` steps and a budget/allocator change half way; built with the store's `SyntheticRun` and
    writer, or reused where the store already holds them. Returns the first run's figures and `run_ids`."""
    from workbench.store import open_store

    shape_steps = -(-rollouts // (BENCH_SHAPE["prompts_per_step"] * BENCH_SHAPE["rollouts_per_prompt"]))
    infos = []
    with open_store(path) as store:
        for i in range(runs):
            name = BENCH_RUN if i == 0 else f"{BENCH_RUN}-{i + 1}"
            found = store.list_runs()
            done = [r for r in (found.to_dicts() if found.height else [])
                    if r["name"] == name and r.get("status") == "finished" and r["steps"] == shape_steps]
            if done:
                rid = done[0]["run_id"]
                infos.append({"run_id": rid, "steps": shape_steps, "reused": True,
                              "rollouts": store.count_rollouts(rid)})
            else:
                infos.append(_bench_run(store, name, i, rollouts, eval_every, eval_prompts, eval_samples))
    return {**infos[0], "run_ids": [x["run_id"] for x in infos]}


def _bench_run(store, name: str, seed: int, rollouts: int, eval_every: int, eval_prompts: int,
               eval_samples: int) -> dict:
    import numpy as np

    from workbench.store.synthetic import Shape, SyntheticRun

    shape = Shape(**BENCH_SHAPE)
    steps = -(-rollouts // shape.rollouts_per_step)
    cfg = {"name": name, "allocator": {"name": "uniform", "params": {}}, "synthetic": BENCH_SHAPE}
    run_id = store.create_run(name, cfg, seed=seed, status="running")
    gen = SyntheticRun(run_id, shape, seed=seed)
    rng = np.random.default_rng(1 + seed)
    hidden = rng.beta(0.8, 0.8, size=eval_prompts)
    store.add_prompts(run_id, [{"prompt_id": f"p{i:05d}", "split": "train", "level": 1,
                                "text": f"synthetic prompt {i}", "answer": "0", "metadata": {}}
                               for i in range(shape.prompt_pool)])
    for step in range(steps):
        rec = gen.step(step)
        if step >= steps // 2:  # a regime change for the curves' marks
            half = shape.rollouts_per_step // 2
            rec.metrics.update({"allocator": "multistage", "budget": half})
        if step % eval_every == 0 or step == steps - 1:
            lift = min(0.3, step / max(steps, 1) * 0.3)
            p = np.clip(hidden + lift, 0, 1)
            correct = rng.binomial(eval_samples, p)
            rec.evals = [{"prompt_id": f"e{i:03d}", "level": 1, "samples": eval_samples,
                          "correct": int(c), "greedy_correct": bool(c > eval_samples // 2),
                          "mean_length": 200.0} for i, c in enumerate(correct)]
        store.write_step(rec)
    store.set_run_status(run_id, "finished")
    return {"run_id": run_id, "steps": steps, "reused": False, "rollouts": store.count_rollouts(run_id)}


def time_prompt_table(store_path: Path | str, run_ids: list[str], *, repeats: int = 5) -> dict:
    """Median, p95 and worst wall milliseconds (and median CPU ms) of the prompt table of two runs:
    `workbench.analysis.compare_runs` at each run's end, on a store handle opened once, after one
    warm-up call (what the Compare prompts page computes before it draws)."""
    from workbench.analysis import compare_runs
    from workbench.experiments.app_bench import quantile
    from workbench.store import open_store

    with open_store(store_path, read_only=True) as store:
        rows = compare_runs(store, run_ids).frame.height
        times, cpu = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            compare_runs(store, run_ids)
            times.append((time.perf_counter() - t0) * 1000.0)
            cpu.append((time.process_time() - c0) * 1000.0)
    return {"runs": len(run_ids), "prompts": rows, "median_ms": round(statistics.median(times), 1),
            "p95_ms": round(quantile(times, 0.95), 1), "max_ms": round(max(times), 1),
            "median_cpu_ms": round(statistics.median(cpu), 1)}


def _medians(pages: dict[str, dict], key: str) -> dict[str, float]:
    return {name: stats[key]["median"] for name, stats in pages.items()}


def bench_app_result(path: Path | str, info: dict, *, repeats: int, chosen: list[str] | None, s3: bool) -> dict:
    """The pages (and the prompt table) timed on the store at `path`; with `s3`, also on its copy in a
    bucket (`workbench store copy`), side by side (workbench/experiments/app_bench.py)."""
    from workbench.experiments.app_bench import copy_to_bucket, ratios, s3_server, time_pages as time_all

    load_start = round(os.getloadavg()[0], 1)
    if not s3:
        pages = time_all({"local": str(path)}, repeats=repeats, pages=chosen)["local"]
        return {"prompt_table": time_prompt_table(path, info["run_ids"], repeats=repeats), "pages": pages,
                **_old_fields(pages), "load_avg_1m_start": load_start}
    catalog = Path(f"{path}-s3-catalog") / "catalog.sqlite"
    with s3_server() as bucket:
        url = f"s3://{bucket}/bench-app-{info['rollouts']}-{int(time.time())}"
        copied = copy_to_bucket(Path(path), bucket, url.split("/", 3)[3], catalog)
        timed = time_all({"local": str(path), "s3": url}, repeats=repeats, pages=chosen, catalog=str(catalog))
        os.environ["WORKBENCH_CATALOG"], saved = str(catalog), os.environ.get("WORKBENCH_CATALOG")
        try:
            table_s3 = time_prompt_table(url, info["run_ids"], repeats=repeats)
        finally:
            if saved is None:
                os.environ.pop("WORKBENCH_CATALOG", None)
            else:
                os.environ["WORKBENCH_CATALOG"] = saved
    table = time_prompt_table(path, info["run_ids"], repeats=repeats)
    return {"prompt_table": table, "pages": timed["local"], **_old_fields(timed["local"]),
            "s3": {"store": url, "catalog": str(catalog), "copy": copied, "pages": timed["s3"],
                   **_old_fields(timed["s3"]), "prompt_table": table_s3},
            "s3_over_local": ratios(timed["local"], timed["s3"]), "load_avg_1m_start": load_start}


def _old_fields(pages: dict[str, dict]) -> dict[str, dict[str, float]]:
    """The medians under the names the bench has always printed."""
    return {"page_ms": _medians(pages, "cold"), "page_cpu_ms": _medians(pages, "cold_cpu"),
            "page_ms_cached": _medians(pages, "cached"), "page_cpu_ms_cached": _medians(pages, "cached_cpu")}


def register(app: typer.Typer, bench: typer.Typer) -> None:
    """Add `workbench app` and `workbench bench app`."""

    @app.command("app")
    def app_cmd(
        store: StoreOpt = None,
        port: Annotated[int, typer.Option("--port", help="Port to serve on.")] = 8501,
        address: Annotated[str, typer.Option("--address", "--host", help="Address to bind. 127.0.0.1 (this machine "
                                             "only) needs no login; any other address (0.0.0.0, a named "
                                             "interface) requires a token.")] = "127.0.0.1",
        headless: Annotated[bool, typer.Option("--headless/--browser", help="Do not open a browser tab.")] = False,
        token: Annotated[str | None, typer.Option("--token", envvar="WORKBENCH_APP_TOKEN", help="The control token "
                                                  "(launch, steer, stop, guards); default: a random one, printed.")]
        = None,
        read_token: Annotated[str | None, typer.Option("--read-token", envvar="WORKBENCH_APP_READ_TOKEN",
                                                       help="The read-only token (browse, query, compare); "
                                                       "default: a random one, printed.")] = None,
        token_file: Annotated[Path | None, typer.Option("--token-file", help="A file of lines `control TOKEN` "
                                                        "and/or `read TOKEN`.")] = None,
        allow_host: Annotated[list[str] | None, typer.Option("--allow-host", help="A host name the dashboard may "
                                                             "be reached by (besides IP addresses, localhost and "
                                                             "this machine's names); repeatable.")] = None,
        session_hours: Annotated[float, typer.Option("--session-hours", help="How long a browser stays signed in "
                                                     "after opening the token's URL.")] = 12.0,
    ) -> None:
        """Start the dashboard (Streamlit) on a store: runs, live curves and controls, rollouts, prompts,
        allocation, comparisons. Served beyond 127.0.0.1 it asks for a token (see docs/dashboard.md,
        "Serving it to your team")."""
        _check_app()
        path = store_path(store).resolve() if not _on_object_storage(store_path(store)) else store_path(store)
        if _on_object_storage(path):  # s3://bucket/prefix (docs/object-storage.md): nothing local to look at
            _check_store(store_spec(path))
        elif not path.exists() or (path.is_dir() and not any(path.iterdir())):
            typer.echo(f"note: {path} holds no store yet; it is created when the first run starts", err=True)
        else:
            _check_store(path)
        gate, tokens = build_gate(address, control=token, read=read_token, token_file=token_file,
                                  allow_hosts=allow_host or [], session_hours=session_hours)
        warning = exposure_warning(address)
        if warning:
            typer.echo(warning, err=True)
        shown = socket.gethostname() if address in ("0.0.0.0", "::") else address
        base = f"http://{shown}:{port}"
        if not tokens:
            typer.echo(f"dashboard on {base} (store {path})", err=True)
        for role in reversed(ROLES):  # control first
            if role in tokens:
                typer.echo(f"dashboard ({role}) on {base}/?token={tokens[role]} (store {path})", err=True)
        exec_app(path, port=port, address=address, headless=headless, gate=gate)

    @bench.command("app")
    def bench_app(
        rollouts: Annotated[int, typer.Option("--rollouts", help="Rollouts in the synthetic store.")] = 1_000_000,
        store: StoreOpt = None,
        repeats: Annotated[int, typer.Option("--repeats", help="Timed rounds per page (a cold and a cached run "
                                             "each; median, p95 and max reported).")] = 5,
        pages: Annotated[str | None, typer.Option("--pages", help="Comma-separated pages to time (default: all; "
                                                  f"{', '.join(PAGES)}).")] = None,
        s3: Annotated[bool, typer.Option("--s3", help="Also copy the store into a bucket (`workbench store copy`) "
                                         "and time every page on both, alternately: the S3 server of "
                                         "AWS_ENDPOINT_URL, else a local one (moto, the dev extra) in a "
                                         "subprocess.")] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Time each dashboard page's full script run (default selections, AppTest) on a synthetic store
        of two runs of N rollouts each (built once, then reused): per page a first run, then --repeats
        rounds of a cold run (data cache cleared) and a cached one; median, p95 and max of wall and CPU
        ms; and the prompt table of the two runs (`prompt_table`: the comparison the Compare prompts
        page draws, timed alone). With --s3, the same on the store's copy in a bucket, side by side."""
        _check_app()
        chosen = [p.strip() for p in pages.split(",")] if pages else None
        unknown = sorted(set(chosen or []) - set(PAGES))
        if unknown:
            raise typer.BadParameter(f"unknown page(s) {unknown}; pages are {', '.join(PAGES)}", param_hint="--pages")
        path = (store or Path("store") / f"bench-{rollouts}").resolve() if not (
            store and _on_object_storage(store)) else store  # s3://: docs/object-storage.md
        if s3 and _on_object_storage(path):
            raise typer.BadParameter("--s3 copies a local store into a bucket: give a directory as --store",
                                     param_hint="--s3")
        t0 = time.perf_counter()
        info = ensure_bench_store(path, rollouts, runs=2)
        build_s = time.perf_counter() - t0
        result = {
            **bench_app_result(path, info, repeats=repeats, chosen=chosen, s3=s3),
            "rollouts": rollouts,
            "load_avg_1m": round(os.getloadavg()[0], 1),
            "cpus": os.cpu_count(),
            "repeats": repeats,
            "store": str(path),
            "store_ready_s": round(build_s, 1),
            "store_info": info,
        }
        if as_json:
            print_json(result)
        else:
            typer.echo(json.dumps(result, indent=2, default=str))
