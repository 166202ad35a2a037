"""Containment of a call's processes: nothing a tool starts outlives its call, or the server.

A process group is not enough: a tool that calls ``setsid`` (a daemon, a
double fork) leaves the group, so the group kill misses it, and if it keeps
stdout open the call waits for its EOF until the deadline. And a server
killed with SIGKILL runs no cleanup at all, so every tool in flight was
orphaned.

The mechanism: each call runs under ``_reaper`` (``reaper.c``, compiled by
setup.py) in a PID namespace of its own::

    server ── L  _reaper      PR_SET_PDEATHSIG(SIGKILL): dies with the server
               └─ I  pid 1     PR_SET_PDEATHSIG(SIGKILL): dies with L; reaps orphans
                   └─ T  pid 2 the tool (execvp), and whatever it starts

* When the tool's first process (T) exits, I exits, and the kernel kills
  every process left in the namespace: a ``setsid`` daemon cannot leave a
  PID namespace. I's exit completes only once they are all gone, and L
  exits only after I, so "L exited" means "nothing of the call is left"
  when the server sees it.
* To stop a call (deadline, cancellation) the server sends SIGTERM to L,
  which SIGKILLs I: the same teardown, then L dies of SIGKILL, so the call
  reads as killed, as before.
* When the server dies, however it dies, the kernel sends L SIGKILL
  (PDEATHSIG), then I, and the namespace goes with I. PDEATHSIG follows the
  *thread* that spawned L: spawns run on the loop's thread or the spawner
  pool's, which live as long as the server.
* Inside, a tool sees its namespace's pids (``$$`` is 2); with the OS
  sandbox on (sandbox.py, the default where the kernel allows it) ``/proc``
  is the namespace's own, otherwise still the host's; a tool cannot
  signal the server or any process outside its namespace by pid.
* As root this is ``unshare(CLONE_NEWPID)``; as another user, a user
  namespace too, mapping the user's own uid and gid to themselves (so files
  and ``id`` look the same; setuid programs do not gain privileges there).

Where the kernel refuses (no user namespaces for this user, a seccomp
policy), or the program was not built (no C compiler at install), the
executor falls back to today's process-group kill and logs a warning once
saying why. ``BITONG_CONTAINMENT=group`` chooses that fallback on purpose.

Cost, measured on the 2-core build machine (a Popen of ``/bin/echo`` with
its output read): ~0.5 ms more per call than the bare spawn, almost all of
it the extra exec of ``_reaper`` and its two small forks; the namespace
itself costs ~0.05 ms. See benchmarks/bench_sidecar.py (``spawn cost``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import subprocess
from collections.abc import Sequence

__all__ = ["Containment", "containment", "REAPER", "EXIT_SETUP", "ENV"]

REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_reaper")
"""The compiled launcher (built from reaper.c by setup.py)."""

EXIT_SETUP = 125
"""``_reaper``'s exit status when it could not make the namespace: nothing ran."""

ENV = "BITONG_CONTAINMENT"
"""``group`` forces the process-group fallback; anything else (or unset) probes for the namespace."""

_PROBE_TIMEOUT_S = 10.0

log = logging.getLogger("bitong.executors")


@dataclasses.dataclass(frozen=True)
class Containment:
    """How this server contains a call's processes."""

    mode: str
    """``pid`` (a PID namespace), ``user+pid`` (with a user namespace), or ``group`` (process group only)."""
    reason: str = ""
    """Why the fallback (``group``); empty otherwise."""

    @property
    def namespaced(self) -> bool:
        return self.mode != "group"

    def argv(self, errfd: int, options: Sequence[str] = ()) -> list[str]:
        """The launcher's words in front of a tool's argv; ``errfd`` gets an exec failure's errno;
        ``options`` are the sandbox's (sandbox.py)."""
        return [REAPER, str(os.getpid()), str(errfd), *options, "--"]


@functools.lru_cache(maxsize=1)
def containment() -> Containment:
    """Probe once per server (~2 ms): can ``_reaper`` make a namespace here? Warns once if not."""
    chosen = _probe()
    if not chosen.namespaced:
        log.warning("tools are contained by process group only (%s): a tool that calls setsid can outlive its "
                    "call, and tools in flight outlive a server killed with SIGKILL", chosen.reason)
    return chosen


def _probe() -> Containment:
    if os.environ.get(ENV, "").strip() == "group":
        return Containment("group", f"{ENV}=group")
    if not os.access(REAPER, os.X_OK):
        return Containment("group", f"{REAPER} is not built (no C compiler when bitong was installed?)")
    try:
        done = subprocess.run([REAPER, "--probe"], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=_PROBE_TIMEOUT_S, close_fds=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Containment("group", f"{REAPER} --probe failed: {exc}")
    mode = done.stdout.decode("ascii", "replace").strip()
    if done.returncode == 0 and mode in ("pid", "user+pid"):
        return Containment(mode)
    why = done.stderr.decode("utf-8", "replace").strip() or f"exit status {done.returncode}"
    return Containment("group", f"the kernel refused a PID namespace: {why}")
