"""The OS sandbox of a process tool: what a definition does not declare, its process cannot do.

Every call of a process executor (shell, python) runs under ``_reaper``
(reaper.py) in a PID namespace; with the sandbox on, :meth:`Sandbox.options`
turns the tool's definition into ``_reaper`` options, which ``sandbox.c``
applies (fail closed: a rule that cannot be set up stops the call, exit
125, before the tool runs):

=====================  =====================================================
``network: false``     the server's one empty network namespace (no
                       interface up, nothing to reach, loopback included);
                       ``/run`` (host daemons' unix sockets) hidden
``fs_write: false``    every host mount read-only (``mount_setattr``),
                       writable only: the tool's ``runtime/`` and a private
                       ``/tmp`` (and ``/dev/shm``)
``fs_write: true``     the same, plus the folders of ``fs_write_paths``
                       (the fixed prefix of each pattern) bound writable
``fs_read_paths``      Landlock: read only beneath the system folders
                       (``/usr``, ``/lib*``, ``/bin``, ``/sbin``, ``/etc``),
                       ``/dev``, ``/proc``, the tool's own folder, the
                       listed paths (and, for python, the interpreter and
                       the ``bitong`` package); other tools, the server's
                       files, ``/root``, ``/home`` unreadable
``exec: false``        Landlock: only the template's program (its real
                       file, and its ELF loader) may be executed: no shell,
                       no other program; a handler's interpreter is its
                       program
always                 a new PID and IPC namespace, a ``/proc`` of the
                       call's own processes, a minimal ``/dev``, secrets
                       masked (``/etc/shadow``, ``/etc/gshadow``, the ssh
                       host keys, ``/root``, the server's config file), no
                       capabilities (bounding set too), ``no_new_privs``,
                       no signals or abstract sockets outside the call
                       (Landlock scopes), the ``constraints`` limits
                       (``max_memory_mb`` as ``RLIMIT_AS``, ``cpu_s`` as
                       ``RLIMIT_CPU``, ``max_procs`` as a pids cgroup of
                       the call's own: root ignores ``RLIMIT_NPROC``), no
                       core files, the minimal environment
=====================  =====================================================

Why our own launcher and not bubblewrap: measured on the 2-core machine
(p50 spawn of ``/bin/true``, interleaved runs), bubblewrap 0.8 with a
comparable policy took 8-13 ms a call against 1.3-1.4 ms for ``_reaper``
alone (an extra exec, then a new root built of bind mounts), while the
same namespaces and mounts set up inside ``_reaper``, which every call
already execs, add ~0.8 ms (benchmarks/bench_sidecar.py); bubblewrap has
no Landlock (the read and execute rules) nor limits either, so a second
helper would have to run behind it. The kernel interfaces are the ones
bubblewrap uses (namespaces, bind mounts, ``no_new_privs``, dropped
capabilities), plus Landlock. seccomp is not used: the rules above need
paths, which a seccomp filter cannot see. A new network namespace costs
~0.45 ms to make, so root's calls share one empty namespace made at start.

A bind mount or a Landlock rule pins the folder itself, not its name: a
path checked by the allow-list and swapped for a symlink afterwards still
leads only where the mounts and the Landlock domain allow.

Modes (``bitong serve --sandbox``): ``auto`` (default) sandboxes where the
probe at start succeeds and says loudly where it does not; ``required``
refuses to start without it; ``off`` runs tools with the PID namespace
only. Each CallResult says ``sandboxed``.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import functools
import glob
import logging
import os
import re
import shutil
import subprocess
from typing import Any
from collections.abc import Sequence

from bitong.v1.agent_pb2 import ToolDef

from . import reaper

__all__ = ["Sandbox", "SandboxUnavailable", "MODES", "configure", "current", "probe", "SYSTEM_DIRS", "SECRETS",
           "EXIT_SETUP"]

MODES = ("auto", "required", "off")
EXIT_SETUP = reaper.EXIT_SETUP

SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc")
"""What a program needs to start: readable for every tool (``/etc`` without its secrets)."""

SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh/ssh_host_*key",
           "/etc/sudoers", "/etc/sudoers.d", "/etc/security/opasswd", "/root")
"""Hidden from every tool (an empty file or folder in their place); patterns are expanded at start."""

DEV_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
"""The only devices a tool sees (``/dev`` is otherwise an empty tmpfs)."""

_MAGIC = re.compile(r"[*?[]")
_calls = itertools.count()
_PROBE_TIMEOUT_S = 10.0

log = logging.getLogger("bitong.sandbox")


class SandboxUnavailable(RuntimeError):
    """``--sandbox required`` and this kernel (or build) cannot sandbox: the server must not start."""


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """This server's sandbox: whether calls run in it, and the shared pieces (the empty netns)."""

    mode: str
    active: bool
    reason: str = ""
    """Why it is not active (empty when it is)."""
    landlock_abi: int = 0
    net_fd: int = -1
    """An fd of the server's empty network namespace (-1: each call makes its own)."""
    hidden: tuple[str, ...] = ()
    """Server files hidden from every tool besides :data:`SECRETS` (the config file)."""
    pids_root: str = ""
    """A pids cgroup folder this server may make children in (``max_procs``); empty: none."""
    root: bool = False
    """The launcher runs as root in the first user namespace (``/dev`` nodes can be made, not bound)."""

    def options(self, tool: ToolDef, argv: Sequence[str], *, read: Sequence[str] = ()) -> list[str]:
        """The ``_reaper`` options for one call of ``tool`` running ``argv``; ``read``: more readable folders
        (the python executor's interpreter and package). Cached per definition and program."""
        perms = tool.permissions
        opts = list(_options(self, tool.source_path, tool.content_sha256, tool.name, perms.fs_write,
                             tuple(perms.fs_read_paths), tuple(perms.fs_write_paths), perms.network, perms.exec,
                             tool.constraints.max_memory_mb, tool.constraints.max_procs, tool.constraints.cpu_s,
                             argv[0], tuple(read), os.environ.get("PATH", os.defpath), _state_dir()))
        if tool.constraints.max_procs and self.pids_root:
            opts += ["--pids-cgroup", os.path.join(self.pids_root, f"bitong-{os.getpid()}-{next(_calls)}")]
        return opts

    @staticmethod
    def cleanup(options: Sequence[str]) -> None:
        """After the call (every process of it gone): remove its pids cgroup, if it had one."""
        if "--pids-cgroup" in options:
            path = options[list(options).index("--pids-cgroup") + 1]
            try:
                os.rmdir(path)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    log.warning("cannot remove the pids cgroup %s: %s", path, exc)

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.net_fd,) if self.net_fd >= 0 else ()


def _prefix(pattern: str) -> str:
    """The fixed folder of an allow-list pattern: ``/srv/app/**`` -> ``/srv/app``, ``~/x/*.txt`` -> ``$HOME/x``."""
    path = os.path.expanduser(pattern)
    parts = []
    for part in path.split("/"):
        if _MAGIC.search(part):
            break
        parts.append(part)
    fixed = "/".join(parts) or "/"
    return os.path.realpath(fixed)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _elf_interpreter(path: str) -> str | None:
    """PT_INTERP of an ELF file (its dynamic loader), or the ``#!`` interpreter of a script."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if head.startswith(b"#!"):
                fh.seek(0)
                line = fh.readline(256)[2:].strip().split()
                return line[0].decode("utf-8", "replace") if line else None
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit ELF only
                return None
            little = head[5] == 1
            order: Any = "little" if little else "big"
            phoff = int.from_bytes(head[32:40], order)
            phentsize = int.from_bytes(head[54:56], order)
            phnum = int.from_bytes(head[56:58], order)
            for i in range(phnum):
                fh.seek(phoff + i * phentsize)
                ph = fh.read(phentsize)
                if int.from_bytes(ph[0:4], order) == 3:  # PT_INTERP
                    offset = int.from_bytes(ph[8:16], order)
                    size = int.from_bytes(ph[32:40], order)
                    fh.seek(offset)
                    return fh.read(size).rstrip(b"\0").decode("utf-8", "replace")
    except OSError:
        return None
    return None


def _executables(program: str, path_env: str) -> list[str]:
    """The real files an exec of ``program`` opens for execution: itself, its loader or interpreter (recursively)."""
    found = shutil.which(program, path=path_env) if "/" not in program else program
    if not found:
        return []
    out: list[str] = []
    current: str | None = found
    while current and len(out) < 4:
        real = os.path.realpath(current)
        if real in out:
            break
        out.append(real)
        current = _elf_interpreter(real)
    return out


def _hops(program: str, path_env: str) -> list[str]:
    """Every path an exec of ``program`` goes through: the symlinks in its chain, then its file."""
    found = shutil.which(program, path=path_env) if "/" not in program else program
    hops: list[str] = []
    current = os.path.abspath(found) if found else None
    while current and len(hops) < 16:
        hops.append(current)
        if not os.path.islink(current):
            break
        current = os.path.join(os.path.dirname(current), os.readlink(current))
    return hops


def _install_prefix(path: str) -> str:
    """What a program needs beside it: ``PREFIX`` for ``PREFIX/bin/prog`` (its lib/ and share/), else its folder."""
    folder = os.path.dirname(path)
    prefix = os.path.dirname(folder)
    if os.path.basename(folder) in ("bin", "sbin") and prefix not in ("/", "/usr", "/usr/local"):
        return prefix
    return folder   # /bin/sh, /usr/bin/git: the system folders are readable anyway


@functools.lru_cache(maxsize=512)
def _options(box: Sandbox, source_path: str, _sha: str, name: str, fs_write: bool, read_paths: tuple[str, ...],
             write_paths: tuple[str, ...], network: bool, exec_any: bool, memory_mb: int, procs: int, cpu_s: int,
             program: str, extra_read: tuple[str, ...], path_env: str, _state: str) -> tuple[str, ...]:
    from .shell import runtime_dir, tool_dir   # shell imports this module

    tool = ToolDef(name=name, source_path=source_path)
    runtime = os.path.realpath(runtime_dir(tool))
    folder = os.path.realpath(tool_dir(tool))   # runtime/ is inside it, or under the state dir (shell.runtime_dir)
    opts: list[str] = ["--sandbox"]
    # network
    if not network:
        opts += ["--net-fd", str(box.net_fd)] if box.net_fd >= 0 else ["--net-new"]
    # what is hidden
    # /dev: as root, one tmpfs with the nodes made in it (and /dev/shm a folder of it); otherwise an empty
    # tmpfs with the host's nodes bound back, one mount each
    dev_nodes = box.root
    masks = [*_secrets(), *box.hidden]
    if not dev_nodes:
        masks.append("/dev")
    if not network:
        masks.append("/run")
    for mask in masks:
        opts += ["--mask", mask]
    if dev_nodes:
        opts.append("--dev-nodes")
    tmpfs = ["/tmp"] if dev_nodes else ["/tmp", "/dev/shm"]
    for path in tmpfs:
        opts += ["--tmpfs", path]
    # what is shown again under a mask or a private tmpfs, read-only or writable
    readable = sorted({_prefix(p) for p in read_paths})
    writable = sorted({_prefix(p) for p in write_paths}) if fs_write else []
    covered = [*masks, *tmpfs, "/dev"]
    binds = [] if dev_nodes else [*DEV_NODES]
    program_files = _executables(program, path_env)
    shown = [folder, *readable, *extra_read, *(_install_prefix(hop) for hop in _hops(program, path_env))]
    for path in shown:
        if any(_under(path, c) for c in covered) and path not in writable:
            binds.append(path)
    for path in sorted(set(binds), key=len):
        opts += ["--bind", path]
    for path in sorted({runtime, *writable}, key=len):
        opts += ["--bind-rw", path]
    # Landlock: reading (only when the definition lists what it reads)
    if read_paths:
        opts.append("--restrict-read")
        for path in sorted({*SYSTEM_DIRS, "/dev", "/proc", folder, runtime, *readable, *extra_read, *program_files,
                            *(_install_prefix(hop) for hop in _hops(program, path_env))}):
            opts += ["--read", path]
    # Landlock: executing
    if not exec_any:
        opts.append("--restrict-exec")
        for path in program_files:
            opts += ["--exec", path]
    # limits
    if memory_mb:
        opts += ["--rlimit-as", str(memory_mb * 1024 * 1024)]
    if procs:  # RLIMIT_NPROC would count every process of the uid (and never root's): a cgroup of its own
        opts += ["--max-procs", str(procs)]
    if cpu_s:
        opts += ["--rlimit-cpu", str(cpu_s)]
    opts += ["--rlimit-core", "0", "--chdir", runtime]
    return tuple(opts)


@functools.lru_cache(maxsize=1)
def _secrets() -> tuple[str, ...]:
    out: list[str] = []
    for pattern in SECRETS:
        out.extend(sorted(glob.glob(pattern)) if _MAGIC.search(pattern) else [pattern])
    return tuple(out)


# ---------------------------------------------------------------- the server's sandbox

_current: Sandbox | None = None


def configure(mode: str = "auto", *, hidden: Sequence[str] = ()) -> Sandbox:
    """Decide this server's sandbox once, at start: probe, warn loudly, or refuse (``required``)."""
    global _current
    if mode not in MODES:
        raise ValueError(f"--sandbox must be one of {', '.join(MODES)}, not {mode!r}")
    hide = tuple(os.path.realpath(p) for p in hidden if p)
    if mode == "off":
        chosen = Sandbox("off", False, "--sandbox off")
        log.warning("SANDBOX OFF (--sandbox off): tools run with the server's filesystem, network and "
                    "capabilities; only their PID namespace is their own")
    else:
        chosen = probe(mode, hide)
        if chosen.active:
            log.info("sandbox on: process tools run in namespaces, read-only mounts and a Landlock domain (ABI %d) "
                     "built from their permissions", chosen.landlock_abi)
        else:
            if mode == "required":
                raise SandboxUnavailable(f"--sandbox required, and the sandbox cannot be built here: {chosen.reason}")
            log.warning("SANDBOX UNAVAILABLE: tools run WITHOUT the OS sandbox (%s); their permissions are not "
                        "enforced by the OS. Use --sandbox required to refuse to start instead.", chosen.reason)
    _current = chosen
    return chosen


def current() -> Sandbox:
    """The configured sandbox (``auto`` on first use when nobody configured one)."""
    return _current if _current is not None else configure("auto")


def probe(mode: str = "auto", hidden: tuple[str, ...] = ()) -> Sandbox:
    """Can this kernel build the sandbox? Runs a real sandboxed ``true`` with a full policy (~3 ms, once)."""
    box = reaper.containment()
    if not box.namespaced:
        return Sandbox(mode, False, f"no PID namespace: {box.reason}")
    try:
        done = subprocess.run([reaper.REAPER, "--landlock-abi"], capture_output=True, timeout=_PROBE_TIMEOUT_S)
        abi = int(done.stdout.decode().strip().partition("=")[2] or 0)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return Sandbox(mode, False, f"{reaper.REAPER} --landlock-abi failed: {exc}")
    if abi < 1:
        return Sandbox(mode, False, "the kernel has no Landlock (Linux 5.13+ with landlock in lsm=)")
    root = box.mode == "pid" and os.geteuid() == 0
    # the held namespace belongs to the first user namespace: only root may join it; others make their own
    net_fd = _hold_netns() if root else -1
    trial = Sandbox(mode, True, "", abi, net_fd, hidden, _pids_root(), root)
    true = shutil.which("true") or "/bin/true"
    tool = ToolDef(name="bitong-sandbox-probe", source_path="<probe>")
    tool.permissions.fs_read_paths.append("/usr/**")
    argv = [reaper.REAPER, str(os.getpid()), "-1", *trial.options(tool, [true]), "--", true]
    try:
        os.makedirs(_probe_runtime(tool), exist_ok=True)
        done = subprocess.run(argv, capture_output=True, timeout=_PROBE_TIMEOUT_S, pass_fds=trial.pass_fds,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Sandbox(mode, False, f"the sandbox probe failed: {exc}")
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip() or f"exit status {done.returncode}"
        return Sandbox(mode, False, f"the kernel refused the sandbox: {why}")
    return trial


def _pids_root() -> str:
    """Where this server may make a pids cgroup per call: cgroup v1's pids hierarchy, or the server's own
    cgroup v2 folder when it delegates pids; empty when neither is writable."""
    v1 = "/sys/fs/cgroup/pids"
    if os.path.isfile(os.path.join(v1, "cgroup.procs")) and os.access(v1, os.W_OK):
        return v1
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            own = next((line.strip()[3:] for line in fh if line.startswith("0::")), "")
        folder = os.path.join("/sys/fs/cgroup", own.lstrip("/"))
        with open(os.path.join(folder, "cgroup.subtree_control"), encoding="utf-8") as fh:
            if "pids" in fh.read().split() and os.access(folder, os.W_OK):
                return folder
    except OSError:
        pass
    return ""


def _state_dir() -> str:
    """Part of the options' cache key: an installed tool's runtime/ lives under it."""
    from .shell import state_dir
    return state_dir()


def _probe_runtime(tool: ToolDef) -> str:
    from .shell import runtime_dir
    return runtime_dir(tool)


def _hold_netns() -> int:
    """An fd of one empty network namespace for every ``network: false`` call (saves ~0.45 ms a call)."""
    try:
        holder = subprocess.Popen([reaper.REAPER, "--hold-netns"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL)
    except OSError:
        return -1
    fd = -1
    try:
        assert holder.stdout is not None
        if holder.stdout.readline() == b"ready\n":
            fd = os.open(f"/proc/{holder.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        fd = -1
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    return fd


def _reset_for_tests() -> None:
    """Forget the configured sandbox (tests configure their own)."""
    global _current
    _current = None
    _options.cache_clear()

