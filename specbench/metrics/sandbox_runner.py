"""The process side of the sandbox: contain this process, then run one program in it.

Started by `specbench.metrics.sandbox` as `python -I -B sandbox_runner.py <limits.json>`,
optionally under `unshare --mount --net` (a private mount table and an empty network). Standard
library only. Steps, in order, before a line of the program runs:

1. mount namespace (when given): every mount becomes read-only except the working directory;
2. resource limits: CPU seconds, address space, file size, open files, no core dumps;
3. seccomp filter: no new processes (fork, vfork, clone without CLONE_THREAD), no sockets, no
   ptrace or cross-process memory writes, no signals to other processes.

The program then runs with `exec`; only if it returns normally does this process write the
nonce it read from stdin, so `sys.exit(0)` or `os._exit(0)` before the asserts is a failure.
"""

import ctypes
import json
import os
import platform
import resource
import struct
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
KEEP_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
}

# Syscall numbers (blocked ones, and clone's flag check) per architecture.
ARCHES = {
    "x86_64": {
        "audit": 0xC000003E,
        "deny": {"fork": 57, "vfork": 58, "socket": 41, "ptrace": 101, "process_vm_writev": 311},
        "clone": 56,
        "clone3": 435,
        "kill": {"kill": 62, "tkill": 200, "tgkill": 234},
    },
    "aarch64": {
        "audit": 0xC00000B7,
        "deny": {"socket": 198, "ptrace": 117, "process_vm_writev": 271},
        "clone": 220,
        "clone3": 435,
        "kill": {"kill": 129, "tkill": 130, "tgkill": 131},
    },
}
CLONE_THREAD = 0x00010000
EPERM, ENOSYS = 1, 38


def libc_call(name: str, *args) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    args = tuple(ctypes.c_ulong(a) if isinstance(a, int) else a for a in args)  # no int truncation
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def read_only_mounts(writable: str) -> None:
    """Private mount table; every mount remounted read-only, the working directory excepted."""
    libc_call("mount", None, b"/", None, MS_REC | MS_PRIVATE, None)
    libc_call("mount", writable.encode(), writable.encode(), None, MS_BIND, None)
    with open("/proc/self/mountinfo") as fh:
        mounts = [line.split() for line in fh]
    for fields in mounts:
        point = fields[4].encode().decode("unicode_escape")
        if point == writable:
            continue
        flags = MS_BIND | MS_REMOUNT | MS_RDONLY
        for option in fields[5].split(","):
            flags |= KEEP_FLAGS.get(option, 0)
        libc_call("mount", None, point.encode(), None, flags, None)


def bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def seccomp() -> None:
    """A BPF filter: refuse process creation, sockets, ptrace and signals to other processes."""
    arch = ARCHES.get(platform.machine())
    if arch is None:
        raise OSError(ENOSYS, f"no seccomp table for {platform.machine()}")
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, errno = 0x7FFF0000, 0x00050000
    me = os.getpid()
    # Jumps count instructions after the next one. Another ABI (i386, x32) is refused outright.
    prog = [
        bpf(ld, 4),
        bpf(jeq, arch["audit"], 1, 0),
        bpf(ret, errno | EPERM),
        bpf(ld, 0),
        bpf(jge, 0x40000000, 0, 1),
        bpf(ret, errno | EPERM),
    ]
    for nr in arch["deny"].values():
        prog += [bpf(jeq, nr, 0, 1), bpf(ret, errno | EPERM)]
    prog += [bpf(jeq, arch["clone3"], 0, 1), bpf(ret, errno | ENOSYS)]  # libc falls back to clone
    prog += [  # clone: threads only
        bpf(jeq, arch["clone"], 0, 4),
        bpf(ld, 16),
        bpf(jset, CLONE_THREAD, 0, 1),
        bpf(ret, allow),
        bpf(ret, errno | EPERM),
    ]
    for nr in arch["kill"].values():  # signals to itself (or its group, pid 0) only
        prog += [
            bpf(ld, 0),
            bpf(jeq, nr, 0, 4),
            bpf(ld, 16),
            bpf(jeq, me, 2, 0),
            bpf(jeq, 0, 1, 0),
            bpf(ret, errno | EPERM),
        ]
    prog += [bpf(ret, allow)]
    filters = ctypes.create_string_buffer(b"".join(prog))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(filters))
    fprog_buffer = ctypes.create_string_buffer(fprog)
    libc_call("prctl", 38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    libc_call("prctl", 22, 2, ctypes.addressof(fprog_buffer), 0, 0)  # SECCOMP_MODE_FILTER


def limit(limits: dict) -> None:
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_mb"] * mb,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main() -> None:
    limits = json.loads(sys.argv[1])
    nonce = sys.stdin.readline().strip()
    sys.stdin.close()
    workdir = os.getcwd()
    source = open("program.py", encoding="utf-8").read()
    if limits["mount_namespace"]:
        read_only_mounts(workdir)
        os.chdir(workdir)  # the old cwd is the directory under the new writable bind mount
    limit(limits)
    seccomp()
    sys.argv = ["program.py"]
    sys.path.insert(0, workdir)
    try:
        exec(compile(source, "program.py", "exec"), {"__name__": "__main__"})
    except BaseException:  # noqa: BLE001 - any exit before the end, SystemExit included, fails
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os.write(1, f"\n{nonce}\n".encode())
    os._exit(0)


if __name__ == "__main__":
    main()
