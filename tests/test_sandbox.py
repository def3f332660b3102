"""The code sandbox: hostile programs are scored failed, the harness keeps running, and nothing
outside the program's temporary directory changes; honest programs pass."""

from __future__ import annotations

import hashlib
import socket
import time
from pathlib import Path

import pytest

from specbench.metrics import sandbox

LIMITS = sandbox.Limits(wall_s=6.0, cpu_s=3, memory_mb=512)


def test_a_correct_program_passes_and_a_wrong_one_fails() -> None:
    assert sandbox.run("def f(x):\n    return 2 * x\nassert f(2) == 4\n", LIMITS).passed
    wrong = sandbox.run("def f(x):\n    return 2 + x\nassert f(3) == 6\n", LIMITS)
    assert not wrong.passed and wrong.status == "failed" and "AssertionError" in wrong.output


def test_the_machine_gives_the_full_isolation_here() -> None:
    """CI runs where unshare works; losing the namespaces must fail loudly, not quietly."""
    assert sandbox.isolation() == {
        "seccomp": True,
        "mount_namespace": True,
        "network_namespace": True,
    }


HOSTILE = {
    "infinite loop": "while True:\n    pass\n",
    "fork bomb": "import os\nwhile True:\n    os.fork()\n",
    "fork bomb past the os module": "import posix\nwhile True:\n    posix.fork()\n",
    "subprocess": "import subprocess\nsubprocess.run(['true'])\n",
    "10 GB allocation": "x = bytearray(10 * 1024**3)\n",
    "exit before the asserts": "import sys\nsys.exit(0)\nassert False\n",
    "hard exit before the asserts": "import os\nos._exit(0)\n",
    "100 MB printed": "print('x' * 100_000_000)\n",
    "100 MB written": "open('out', 'w').write('x' * 100_000_000)\n",
    "signal to pid 1": "import os\nos.kill(1, 9)\n",
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_programs_fail_and_the_harness_keeps_running(name: str) -> None:
    started = time.perf_counter()
    outcome = sandbox.run(HOSTILE[name], LIMITS)
    assert not outcome.passed, outcome
    assert time.perf_counter() - started < LIMITS.wall_s + 5


def test_nothing_outside_the_temporary_directory_changes(tmp_path: Path) -> None:
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    before = hashlib.sha256(victim.read_bytes()).hexdigest()
    attacks = [
        f"import os\nos.remove({str(victim)!r})\n",
        f"import posix\nposix.unlink({str(victim)!r})\n",
        f"import shutil\nshutil.rmtree({str(tmp_path)!r})\n",
        f"open({str(victim)!r}, 'w').write('gone')\n",
        f"open({str(tmp_path / 'new.txt')!r}, 'w').write('x')\n",
    ]
    for program in attacks:
        assert not sandbox.run(program, LIMITS).passed, program
    assert hashlib.sha256(victim.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt"]


def test_a_socket_reaches_nothing() -> None:
    """A listener on the harness's loopback never sees a connection from the sandbox."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        for program in (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n",
            f"import _socket\ns = _socket.socket()\ns.connect(('127.0.0.1', {port}))\n",
        ):
            assert not sandbox.run(program, LIMITS).passed
        server.settimeout(0.5)
        with pytest.raises(TimeoutError):
            server.accept()  # a completed connection would be waiting in the backlog


def test_the_program_may_use_its_own_directory_and_threads() -> None:
    program = (
        "import threading, tempfile\n"
        "open('scratch.txt', 'w').write('ok')\n"
        "assert open('scratch.txt').read() == 'ok'\n"
        "with tempfile.TemporaryDirectory() as d:\n"
        "    open(d + '/x', 'w').write('1')\n"
        "t = threading.Thread(target=lambda: None)\n"
        "t.start()\n"
        "t.join()\n"
    )
    assert sandbox.run(program, LIMITS).passed
