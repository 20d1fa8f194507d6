"""`workbench bench app`'s timing of the dashboard's pages, on one store or on a store and its copy in a
bucket side by side (`--s3`).

Each page's whole script is run with Streamlit's AppTest, as a browser's rerun runs it, with its default
selections (the scripts compiled once, as a server does: `soak_pages.app_tester`). Per page and store: one untimed first run (`first_ms`: imports done, the store's DuckDB
still cold), then `repeats` rounds of a **cold** run (the dashboard's data cache cleared: every frame
read from the store again; the store handle, and DuckDB's in-memory cache of the Parquet bytes it has
fetched, stay, as in a dashboard that has been up) followed by a **cached** run (what the next rerun
costs). With two stores the rounds alternate between them (local, S3, then S3, local, ...), so a burst
of load on the shared machine falls on both. Wall and CPU (this process, all threads) milliseconds:
median, p95 (linear between the two nearest of the sorted samples) and max.

With `--s3` and no AWS_ENDPOINT_URL in the environment, a local S3 server (moto's, the dev extra) runs in
a subprocess of its own, so its CPU is not counted as the dashboard's; the local store is copied into it
with `workbench store copy` (`workbench.store.copy`): the same files and catalog, under a bucket.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workbench.errors import StoreError

BUCKET = "workbench-bench"


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of `values`, linear between the two nearest sorted samples (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summary(values: list[float]) -> dict[str, float]:
    """Median, p95 and max of a list of milliseconds, rounded to 0.1 ms."""
    return {"median": round(quantile(values, 0.5), 1), "p95": round(quantile(values, 0.95), 1),
            "max": round(max(values), 1)}


def time_pages(stores: dict[str, str], *, repeats: int, pages: list[str] | None = None,
               catalog: str | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """{store label: {page: {first_ms, cold, cold_cpu, cached, cached_cpu}}} for the stores named
    (label -> store spec), their rounds alternating (see the module's docstring). `catalog`: the
    S3 stores' catalog ($WORKBENCH_CATALOG while the pages run)."""
    import streamlit as st

    from workbench.dashboard import PAGES
    from benchmarks.soak_pages import app_tester
    from workbench.store.s3local import environ

    tests = {label: app_tester(600) for label in stores}
    out: dict[str, dict[str, dict[str, Any]]] = {label: {} for label in stores}
    labels = list(stores)

    def run(label: str, page: str) -> tuple[float, float]:
        os.environ["WORKBENCH_STORE"] = stores[label]
        t0, c0 = time.perf_counter(), time.process_time()
        tests[label].run()
        wall, cpu = (time.perf_counter() - t0) * 1000.0, (time.process_time() - c0) * 1000.0
        if tests[label].exception:
            raise StoreError(f"page {page} failed on {stores[label]}: {tests[label].exception[0].value}")
        return wall, cpu

    with environ({"WORKBENCH_CATALOG": catalog} if catalog else {}, keep=("WORKBENCH_STORE", "WORKBENCH_CATALOG")):
        for label in labels:
            run(label, "main")
        for name, page in PAGES.items():
            if pages is not None and name not in pages:
                continue
            samples: dict[str, dict[str, list[float]]] = {}
            for label in labels:
                tests[label].switch_page(page)
                st.cache_data.clear()
                first, _ = run(label, name)
                samples[label] = {"first": [first], "cold": [], "cold_cpu": [], "cached": [], "cached_cpu": []}
            for r in range(repeats):
                for label in (labels if r % 2 == 0 else labels[::-1]):
                    st.cache_data.clear()
                    wall, cpu = run(label, name)
                    samples[label]["cold"].append(wall)
                    samples[label]["cold_cpu"].append(cpu)
                    wall, cpu = run(label, name)
                    samples[label]["cached"].append(wall)
                    samples[label]["cached_cpu"].append(cpu)
            for label in labels:
                got = samples[label]
                out[label][name] = {"first_ms": round(got["first"][0], 1),
                                    **{key: summary(got[key]) for key in ("cold", "cold_cpu", "cached", "cached_cpu")}}
    return out


def ratios(local: dict[str, dict[str, Any]], remote: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per page, S3 over local: cold median and p95, cached median, cold CPU median."""
    out = {}
    for page, a in local.items():
        b = remote[page]
        out[page] = {f"{key}_{stat}": round(b[key][stat] / a[key][stat], 2) if a[key][stat] else None
                     for key, stat in (("cold", "median"), ("cold", "p95"), ("cached", "median"),
                                       ("cold_cpu", "median"))}
    return out


@contextmanager
def s3_server() -> Iterator[str]:
    """An S3 server for the bench: the one the environment names (AWS_ENDPOINT_URL and the keys; its
    bucket must exist), else moto's in a subprocess on a free loopback port with a fresh bucket and
    throw-away keys in this process's environment while the block runs. Yields the bucket."""
    if os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3"):
        yield os.environ.get("WORKBENCH_BENCH_BUCKET", BUCKET)
        return
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        raise StoreError("bench app --s3: no AWS_ENDPOINT_URL is set and moto's server is not installed "
                         "(pip install 'moto[server]', part of the dev extra); or set AWS_ENDPOINT_URL and the "
                         "AWS keys to use your S3 server")
    from workbench.store.s3local import TEST_KEY_ID, environ, free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": TEST_KEY_ID,
           "AWS_SECRET_ACCESS_KEY": secrets.token_hex(16), "AWS_REGION": "us-east-1"}
    try:
        _wait_for_port(port, proc)
        with environ(env):
            _make_bucket(env, BUCKET)
            yield BUCKET
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for_port(port: int, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StoreError(f"bench app --s3: the local S3 server (moto) exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise StoreError(f"bench app --s3: the local S3 server did not listen on port {port} within {timeout_s:.0f} s")


def _make_bucket(env: dict[str, str], bucket: str) -> None:
    import boto3  # installed with moto

    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                 aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name=env["AWS_REGION"]
                 ).create_bucket(Bucket=bucket)


def copy_to_bucket(local: Path, bucket: str, prefix: str, catalog: Path) -> dict[str, Any]:
    """The local store copied to s3://bucket/prefix with `catalog` (a fresh file; an old one from an
    earlier bench is removed first, with its lock files)."""
    from workbench.store.copy import copy_store

    for name in (catalog.name, catalog.name + "-wal", catalog.name + "-shm"):
        (catalog.parent / name).unlink(missing_ok=True)
    return copy_store(local, f"s3://{bucket}/{prefix}", dst_catalog=str(catalog))
