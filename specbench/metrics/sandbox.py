"""Run generated code (HumanEval, MBPP) outside the harness, contained, and judge pass/fail.

Each program runs in its own process and process group, with a fresh temporary directory as
cwd, HOME and TMPDIR, an empty environment otherwise, and (see `sandbox_runner.py`) a CPU-time,
address-space, file-size and open-file limit, a seccomp filter (no new processes, no sockets,
no signals or ptrace to other processes) and, where `unshare` can make one, a private mount
table in which everything but the temporary directory is read-only plus an empty network
namespace. The whole group is killed at the wall-clock limit. A program passes only if it runs
to its end: the runner then writes a nonce the program never saw.

The seccomp filter is required (Linux on x86_64 or aarch64); the namespaces are used when the
machine allows them (root, or unprivileged user namespaces) and `isolation()` says which.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from tqdm import tqdm

RUNNER = Path(__file__).with_name("sandbox_runner.py")
OUTPUT_TAIL = 2000


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_mb: int = 16
    open_files: int = 64


@dataclass(frozen=True)
class Outcome:
    passed: bool
    status: str  # passed | failed | timeout | cpu_limit | killed:<signal>
    seconds: float
    output: str  # the tail of stdout and stderr, for reading failures


def _unshare_prefix() -> list[str]:
    flags = (
        ["--mount", "--net"]
        if os.geteuid() == 0
        else ["--user", "--map-root-user", "--mount", "--net"]
    )
    return ["unshare", *flags, "--"]


def _launch(program: str, limits: Limits, mount_namespace: bool) -> Outcome:
    nonce = secrets.token_hex(16)
    work = Path(tempfile.mkdtemp(prefix="specbench-sandbox-"))
    log_dir = Path(tempfile.mkdtemp(prefix="specbench-sandbox-log-"))
    started = time.perf_counter()
    try:
        (work / "program.py").write_text(program, encoding="utf-8")
        config = json.dumps({**asdict(limits), "mount_namespace": mount_namespace})
        command = [sys.executable, "-I", "-B", str(RUNNER), config]
        if mount_namespace:
            command = _unshare_prefix() + command
        env = {"HOME": str(work), "TMPDIR": str(work), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        with (log_dir / "output").open("wb") as output:
            proc = subprocess.Popen(
                command,
                cwd=work,
                env=env,
                stdin=subprocess.PIPE,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            timed_out = False
            try:
                proc.communicate(f"{nonce}\n".encode(), timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        seconds = time.perf_counter() - started
        with (log_dir / "output").open("rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - OUTPUT_TAIL))
            tail = fh.read().decode("utf-8", "replace")
        code = proc.returncode
        if timed_out:
            status = "timeout"
        elif code == 0 and tail.rstrip().endswith(nonce):
            status = "passed"
        elif code in (-signal.SIGXCPU, -signal.SIGKILL) and seconds >= limits.cpu_s:
            status = "cpu_limit"
        elif code < 0:
            status = f"killed:{signal.Signals(-code).name}"
        else:
            status = "failed"
        return Outcome(status == "passed", status, seconds, tail.replace(nonce, ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(log_dir, ignore_errors=True)


@cache
def isolation() -> dict[str, bool]:
    """Which layers this machine gives: probed once by running a trivial program under each."""
    if not sys.platform.startswith("linux"):
        raise RuntimeError("the code sandbox needs Linux (seccomp); run code tasks on Linux")
    probe = _launch("x = 1\n", Limits(), mount_namespace=False)
    if not probe.passed:
        raise RuntimeError(f"the code sandbox cannot start here: {probe.status}\n{probe.output}")
    mount_namespace = bool(shutil.which("unshare")) and _launch("x = 1\n", Limits(), True).passed
    if not mount_namespace:
        warnings.warn(
            "sandbox: no mount/network namespace here (unshare failed); generated code runs "
            "with seccomp and resource limits, but can write wherever this user can",
            stacklevel=2,
        )
    return {
        "seccomp": True,
        "mount_namespace": mount_namespace,
        "network_namespace": mount_namespace,
    }


def run(program: str, limits: Limits = Limits()) -> Outcome:
    """Run one program to completion (or to a limit) and say whether it passed."""
    return _launch(program, limits, isolation()["mount_namespace"])


def run_many(
    programs: Sequence[str],
    limits: Limits = Limits(),
    workers: int | None = None,
    progress: bool = False,
) -> list[Outcome]:
    """Programs in parallel worker threads, each waiting on its own sandboxed process."""
    isolation()
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(lambda p: run(p, limits), programs)
        return list(tqdm(results, total=len(programs), disable=not progress, desc="sandbox"))
