"""The walls around one call, put up inside the sandbox's child process before the tool runs.

Kernel layers (what they guarantee does not depend on the tool's code):

1. RLIMIT_CPU: the child is sent SIGXCPU after `cpu_seconds` of CPU time and SIGKILL a second later.
2. RLIMIT_AS: its address space may grow `memory_mb` beyond what it had when it was forked; an
   allocation past that fails (MemoryError in Python).
3. RLIMIT_FSIZE = 0: no byte can be written to any file (a write raises, SIGXFSZ ignored).
4. RLIMIT_NPROC = 0 and RLIMIT_CORE = 0: no new process (for a non-root user), no core file.
5. When the sandbox runs as root: the child drops to the user and group `nobody`, so it cannot write
   anything root owns, signal root's processes, or regain the limits above (a non-root process
   cannot raise a hard limit); RLIMIT_NPROC binds it.
6. The network namespace (set up once in the sandbox's process, `unshare_network`): the child sees a
   loopback device that is down and no other; no packet leaves.
7. The parent-death signal (Linux): the child is sent SIGKILL when the sandbox's process ends, however it
   ends (killed, out of memory), so no call outlives the process that enforces its wall-clock limit.

The Python layer (a second wall, not a guarantee: code in the same interpreter could in principle
reach around it): an audit hook refuses opening files, sockets, subprocesses, exec, fork, signals,
ctypes and imports of modules not already loaded (the sandbox preloads `SAFE_MODULES`).
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from typing import Any

SAFE_MODULES = ("math", "cmath", "fractions", "decimal", "statistics", "numbers", "itertools", "functools",
                "operator", "random", "string", "collections", "heapq", "bisect", "re", "json")
"""Modules the `python` tool may import (all loaded before any call, so an import is a lookup)."""

REFUSED_PREFIXES = ("socket.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.system",
                    "os.kill", "os.killpg", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod",
                    "os.chown", "os.link", "os.symlink", "os.truncate", "os.unlink", "os.putenv", "os.chdir",
                    "os.setuid", "ctypes.", "shutil.", "signal.", "resource.setrlimit", "sys.settrace",
                    "sys.setprofile", "mmap.", "pty.", "fcntl.", "urllib.", "http.", "ftplib.", "smtplib.",
                    "webbrowser.", "_posixsubprocess", "os.startfile", "sqlite3.", "glob.", "os.listdir",
                    "os.scandir", "os.walk", "pathlib.")
"""Audit events refused inside a call."""

REFUSED_EVENTS = frozenset({"open", "compile_file", "code.__new__", "function.__new__", "sys._getframe",
                            "sys.addaudithook", "builtins.input", "socket"})

NOBODY = 65534
PR_SET_PDEATHSIG = 1
_PARENT: int | None = None
"""The sandbox's process (`watch_from`); its children die with it."""


def watch_from(pid: int) -> None:
    """Record the sandbox's process (called there, before it forks): every child's `enter` then asks for
    SIGKILL when it ends."""
    global _PARENT
    _PARENT = pid


def _die_with_parent() -> None:
    """Layer 7: SIGKILL this process when `_PARENT` ends. Set after the credentials change (a change of
    user or group clears it); a parent already gone by then: exit at once."""
    if _PARENT is None:
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the sandbox's own kill of its process group is the wall
    if os.getppid() != _PARENT:
        os._exit(0)


class Refused(PermissionError):
    """An audit event the sandbox refuses (kind "refused")."""


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "import":
        name = args[0] if args else ""
        if name.partition(".")[0] not in SAFE_MODULES:
            raise Refused(f"import of {name!r} is not allowed (allowed: {', '.join(SAFE_MODULES)})")
        return
    if event in REFUSED_EVENTS or event.startswith(REFUSED_PREFIXES):
        raise Refused(f"not allowed in the sandbox: {event}")


def unshare_network() -> bool:
    """Move this process (and every child forked later) into a new network namespace with no
    interface up. True when it worked (root, or a kernel that lets users make namespaces)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare(0x40000000) == 0  # CLONE_NEWNET
    except (OSError, AttributeError):
        return False


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def enter(cpu_seconds: int, memory_mb: int) -> None:
    """Put up every wall (module docstring) in this child process; from here on it runs the call."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past FSIZE raises OSError instead of killing
    limit_as = _address_space() + memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.getuid() == 0:
        os.chdir("/")
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    _die_with_parent()
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    sys.addaudithook(_hook)
