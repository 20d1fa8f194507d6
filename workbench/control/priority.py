"""How runs the workbench starts share the machine with the dashboard, a notebook or another run.

1. Torch's OpenMP threads sleep while they wait for each other (`OMP_WAIT_POLICY=PASSIVE`) instead of
   spinning on a core: the default for every command of the `workbench` CLI (set before torch is
   imported) and for every process it starts, unless the variable is set already. A spinning waiter
   burns a core another process could use; on a loaded machine it can take a run from seconds to minutes.
2. Runs started detached (`workbench run --detach`, Launch on the dashboard, Resume / `restart`) work
   at niceness `WORKBENCH_RUN_NICE` (default 10; 0 keeps the launcher's), and so does their session's
   autogroup on Linux (see `lower_priority`): the dashboard's page loads win a contended core, the run
   takes what is left. On an otherwise idle machine niceness costs nothing (the scheduler only weighs
   it when processes compete).
"""

from __future__ import annotations

import os

from workbench.errors import ConfigError

RUN_NICE_ENV = "WORKBENCH_RUN_NICE"
DEFAULT_RUN_NICE = 10
QUIET_WAITING = {"OMP_WAIT_POLICY": "PASSIVE"}
"""Environment defaults for every process the workbench starts (a value already set is kept)."""


def run_nice(env: dict[str, str] | None = None) -> int:
    """The niceness for detached runs: $WORKBENCH_RUN_NICE (0-19), else DEFAULT_RUN_NICE."""
    raw = (env if env is not None else os.environ).get(RUN_NICE_ENV, "").strip()
    if not raw:
        return DEFAULT_RUN_NICE
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= 19:
        raise ConfigError(f"{RUN_NICE_ENV} must be an integer from 0 to 19, got {raw!r}")
    return value


def quiet_waiting(env: dict[str, str]) -> dict[str, str]:
    """`env` with QUIET_WAITING's defaults filled in."""
    return {**QUIET_WAITING, **env}


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a detached run: quiet waiting, and its niceness named for the run to apply."""
    base = dict(os.environ if env is None else env)
    return {**quiet_waiting(base), RUN_NICE_ENV: str(run_nice(base))}


AUTOGROUP = "/proc/self/autogroup"


def lower_priority(nice: int) -> int:
    """Raise this process's niceness to `nice` (never lowers it: that needs privileges); returns the
    niceness in force. Threads and processes started afterwards inherit it.

    On Linux with autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`, on by default in
    most distributions) the scheduler first shares the CPU between sessions, and a process's niceness
    only counts against processes of its own session; a detached run has a session of its own, so its
    session's niceness (`/proc/self/autogroup`) is raised too, or the dashboard would gain nothing."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if nice > current:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    if nice > 0 and os.path.exists(AUTOGROUP) and os.getsid(0) == os.getpid():  # only a session of our own
        try:
            with open(AUTOGROUP, "r+") as f:
                group = f.read().split()
                if len(group) >= 3 and int(group[-1]) < nice:
                    f.seek(0)
                    f.write(str(nice))
        except (OSError, ValueError):  # no permission, or no autogroup: the process niceness stands
            pass
    return os.getpriority(os.PRIO_PROCESS, 0)


def autogroup_nice() -> int | None:
    """This process's autogroup niceness (Linux with autogroup scheduling), else None."""
    try:
        with open(AUTOGROUP) as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def apply_run_priority() -> int | None:
    """In a run's process (`workbench run`, `workbench resume`): apply $WORKBENCH_RUN_NICE when it is
    set (a launcher set it); returns the niceness in force, or None when not asked."""
    if not os.environ.get(RUN_NICE_ENV, "").strip():
        return None
    return lower_priority(run_nice())
