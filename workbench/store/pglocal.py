"""A throw-away local PostgreSQL server for a store's catalog (the store benchmark's `--catalog
postgres`): initdb in a directory, a unix socket, no TCP. Needs PostgreSQL's server binaries (Debian's
`postgresql` package); as root the server runs as the `postgres` user (PostgreSQL refuses root)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from workbench.errors import StoreError


def server_bin() -> str | None:
    """The newest installed PostgreSQL server binary directory, or None."""
    found = [b for b in sorted(glob.glob("/usr/lib/postgresql/*/bin")) if os.path.exists(os.path.join(b, "initdb"))]
    return found[-1] if found else None


class LocalPostgres:
    """The server `local_postgres_server` started: `url` (the store catalog string), and `stop()` /
    `start()` on the same socket and data (an outage of the catalog, as the outage tests make)."""

    def __init__(self, url: str, start: Callable[[], None], stop: Callable[[], None]) -> None:
        self.url, self._start, self._stop = url, start, stop

    def start(self) -> None:
        self._start()

    def stop(self) -> None:
        """`pg_ctl stop -m fast`: open connections are dropped, new ones refused."""
        self._stop()


@contextmanager
def local_postgres(root: str | os.PathLike[str] | None = None, *, fsync: bool = True,
                   max_connections: int = 100) -> Iterator[str]:
    """Start a PostgreSQL server with its data under `root` (a temp dir, removed afterwards, when
    None; an existing server directory there is reused, so a build can resume) and yield the store
    catalog string `postgres:dbname=workbench host=<socket dir> ...`. Stopped on exit. Used by the
    store and soak benchmarks and by the tests that need a PostgreSQL catalog."""
    with local_postgres_server(root, fsync=fsync, max_connections=max_connections) as server:
        yield server.url


@contextmanager
def local_postgres_server(root: str | os.PathLike[str] | None = None, *, fsync: bool = True,
                          max_connections: int = 100) -> Iterator[LocalPostgres]:
    """`local_postgres`, yielding the server (`url`, `stop()`, `start()`)."""
    bindir = server_bin()
    if bindir is None:
        raise StoreError("a PostgreSQL catalog needs PostgreSQL's server binaries (initdb, pg_ctl): "
                         "install Debian's `postgresql` package")
    prefix: list[str] = []
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise StoreError("running as root and there is no 'postgres' user to run the server as") from None
        prefix = ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}", "--clear-groups"]
    temp = root is None
    base = Path(tempfile.mkdtemp(prefix="workbench-pg-")) if temp else Path(root).absolute()
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)
    data = base / "pgdata"
    # the socket path must stay short (107 bytes): a temp dir of its own
    sock = Path(tempfile.mkdtemp(prefix="wbpg-"))
    os.chmod(sock, 0o755)
    if owner is not None:
        for path in (sock, base):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        for parent in base.parents:  # the server's user must be able to walk down to its data
            st = parent.stat()
            if not (st.st_mode & 0o001 or (st.st_uid == owner.pw_uid and st.st_mode & 0o100)
                    or (st.st_gid == owner.pw_gid and st.st_mode & 0o010)):
                raise StoreError(f"the PostgreSQL server runs as user 'postgres', which cannot reach {base}: "
                                 f"{parent} is not searchable by it (chmod o+x {parent}, or choose another place)")
    env = {**os.environ, "LC_ALL": "C"}

    def run(*cmd: str) -> None:
        out = subprocess.run([*prefix, *cmd], capture_output=True, text=True, env=env, cwd="/", timeout=120)
        if out.returncode != 0:
            raise StoreError(f"{os.path.basename(cmd[0])} failed: {(out.stdout + out.stderr)[-800:]}")

    fresh = not (data / "PG_VERSION").exists()
    if fresh:
        run(f"{bindir}/initdb", "-D", str(data), "-A", "trust", "-U", "wb", "--no-sync")
    def start() -> None:
        run(f"{bindir}/pg_ctl", "-D", str(data), "-w", "-l", str(base / "server.log"), "-o",
            f"-k {sock} -c listen_addresses='' -c fsync={'on' if fsync else 'off'} "
            f"-c max_connections={int(max_connections)}", "start")

    def stop() -> None:
        subprocess.run([*prefix, f"{bindir}/pg_ctl", "-D", str(data), "-m", "fast", "stop"],
                       capture_output=True, cwd="/", timeout=120)

    start()
    try:
        if fresh:
            run(f"{bindir}/createdb", "-h", str(sock), "-U", "wb", "workbench")
        yield LocalPostgres(f"postgres:dbname=workbench host={sock} user=wb", start, stop)
    finally:
        stop()
        shutil.rmtree(sock, ignore_errors=True)
        if temp:
            shutil.rmtree(base, ignore_errors=True)
