"""Shared process runner for the local stack: specs, pid files, spawn, stop, probes, installs.

A pid file holds `<pid> <start-ticks>`; the start time (field 22 of /proc/<pid>/stat) guards against a
recycled pid, so `down` never signals a process the stack did not start.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tickwheel.errors import TickwheelError

log = logging.getLogger(__name__)

# The Maven poms live in the source tree (deploy/local/<name>/pom.xml); the stack runs from a checkout.
REPO_ROOT = Path(__file__).resolve().parents[3]
JAVA17 = Path("/usr/lib/jvm/java-17-openjdk-amd64/bin/java")
STOP_GRACE_S = 20.0


class StackError(TickwheelError):
    """A local server could not be installed, started, reached or stopped."""

    title = "Local stack error"


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """How to install, configure, run and probe one local server.

    `prepare(stack_dir)` installs what is missing and writes config (idempotent); `command(stack_dir)` is the
    foreground command line; `probe(endpoint)` makes one real request and returns a short detail, or raises.
    """

    name: str
    env_var: str
    endpoint: str
    timeout_s: float
    prepare: Callable[[Path], None]
    command: Callable[[Path], list[str]]
    probe: Callable[[str], str]


def server_dir(stack_dir: Path, name: str) -> Path:
    return stack_dir / name


def log_path(stack_dir: Path, name: str) -> Path:
    return server_dir(stack_dir, name) / f"{name}.log"


def server_names(stack_dir: Path, kind: str) -> list[str]:
    """The servers of `kind` in `stack_dir`: `cassandra` on the default stack, `cassandra-1`, `cassandra-2`, ...
    on one started with `--hosts` (a cluster, or one node on an address of its own)."""
    nodes = sorted(
        (p.name for p in stack_dir.glob(f"{kind}-*") if p.name[len(kind) + 1 :].isdigit()),
        key=lambda name: int(name[len(kind) + 1 :]),
    )
    return [kind, *nodes] if (stack_dir / kind).exists() else nodes


def pid_path(stack_dir: Path, name: str) -> Path:
    return server_dir(stack_dir, name) / f"{name}.pid"


def port_open(host: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


# --- processes -------------------------------------------------------------------------------------------

# Popen objects of servers started by this interpreter, kept so they are reaped (no zombies, no
# "subprocess is still running" ResourceWarning from a collected Popen).
_children: dict[int, subprocess.Popen[bytes]] = {}


def _start_ticks(pid: int) -> str | None:
    """Start time of `pid` in clock ticks since boot, or None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def read_pid(stack_dir: Path, name: str) -> int | None:
    """The pid of the server the stack started, if that very process is still running."""
    try:
        pid_s, ticks = pid_path(stack_dir, name).read_text().split()
    except (OSError, ValueError):
        return None
    pid = int(pid_s)
    return pid if _start_ticks(pid) == ticks else None


def spawn(stack_dir: Path, name: str, argv: list[str], environ: Mapping[str, str] | None = None) -> int:
    """Start `argv` in its own session (with `environ`, default this process's), output appended to the server's
    log; write the pid file."""
    workdir = server_dir(stack_dir, name)
    workdir.mkdir(parents=True, exist_ok=True)
    with log_path(stack_dir, name).open("ab") as out:
        out.write(f"\n--- tickwheel stack: starting {name} at {time.ctime()}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _children[proc.pid] = proc
    ticks = _start_ticks(proc.pid)
    pid_path(stack_dir, name).write_text(f"{proc.pid} {ticks}\n")
    log.info("started %s pid=%d", name, proc.pid)
    return proc.pid


@contextmanager
def server_lock(stack_dir: Path, name: str) -> Iterator[None]:
    """Hold the server's lock file: concurrent `up`s (two shells, a pytest fixture) start it only once."""
    workdir = server_dir(stack_dir, name)
    workdir.mkdir(parents=True, exist_ok=True)
    with (workdir / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _reap(pid: int) -> None:
    proc = _children.get(pid)
    if proc is not None and proc.poll() is not None:
        _children.pop(pid, None)


def is_running(pid: int) -> bool:
    _reap(pid)
    return _start_ticks(pid) is not None


def terminate(stack_dir: Path, name: str, grace_s: float = STOP_GRACE_S) -> bool:
    """SIGTERM the server's process group, SIGKILL after `grace_s`; remove the pid file.

    Returns whether a running process was stopped.
    """
    pid = read_pid(stack_dir, name)
    pid_path(stack_dir, name).unlink(missing_ok=True)
    if pid is None:
        return False
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while is_running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if is_running(pid):
        log.warning("%s pid=%d ignored SIGTERM for %.0f s, sending SIGKILL", name, pid, grace_s)
        _signal(pid, signal.SIGKILL)
        while is_running(pid):
            time.sleep(0.05)
    return True


def _signal(pid: int, sig: signal.Signals) -> None:
    """Signal the process group the server leads (it was started with its own session)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(pid, sig)


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 200 * lines))
            text = f.read().decode(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


# --- installs ----------------------------------------------------------------------------------------------

_apt_lock = threading.Lock()
_APT_PACKAGES = ("zookeeper", "redis-server")


def ensure_apt_packages(present: Callable[[], bool]) -> None:
    """Install the Debian packages of the stack (ZooKeeper, Redis) unless `present()` says they are there."""
    with _apt_lock:
        if present():
            return
        log.info("installing %s with apt-get", " ".join(_APT_PACKAGES))
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["apt-get", "update", "-qq"], env)
        _run(["apt-get", "install", "-y", "--no-install-recommends", *_APT_PACKAGES], env)


def ensure_maven_jars(stack_dir: Path, name: str) -> Path:
    """Copy the runtime jars of deploy/local/<name>/pom.xml to .stack/lib/<name> (Maven caches in ~/.m2)."""
    lib = stack_dir / "lib" / name
    done = lib / ".complete"
    if done.exists():
        return lib
    # A cluster's three nodes of one kind prepare at once: one copies, the others wait for its copy.
    with server_lock(stack_dir / "lib", name):
        if not done.exists():
            _copy_maven_jars(name, lib)
            done.write_text("ok\n")
    return lib


def _copy_maven_jars(name: str, lib: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("Maven (mvn) is not on PATH; install it (apt-get install maven)")
    log.info("resolving %s jars with Maven into %s", name, lib)
    argv = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(_pom(name)),
        "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies",
        f"-DoutputDirectory={lib}",
        "-DincludeScope=runtime",
    ]
    _run(argv, dict(os.environ))


def _pom(name: str) -> Path:
    """deploy/local/<name>/pom.xml of this checkout, else of the working directory (a non-editable install)."""
    for root in (REPO_ROOT, Path.cwd()):
        pom = root / "deploy" / "local" / name / "pom.xml"
        if pom.exists():
            return pom
    raise StackError(f"deploy/local/{name}/pom.xml not found; run the stack from a tickwheel checkout")


def _run(argv: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if result.returncode != 0:
        output = (result.stdout + result.stderr)[-4000:]
        raise StackError(f"{' '.join(argv[:3])} ... failed with exit code {result.returncode}:\n{output}")


def java_bin() -> str:
    """JAVA_HOME's java if set, else the Debian JDK 17, else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")  # the one place the stack reads JAVA_HOME
    if java_home:
        return str(Path(java_home) / "bin" / "java")
    if JAVA17.exists():
        return str(JAVA17)
    found = shutil.which("java")
    if found is None:
        raise StackError("no Java found: install JDK 17 or set JAVA_HOME")
    return found
