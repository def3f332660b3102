"""Append-only per-sample records with resume: the local files are the source of truth.

A run directory holds `config.yaml` (resolved), `records.jsonl` (one line per finished sample
and trial, written and fsynced as it finishes), `summary.json`, `env.json`, `wandb-id` (the W&B
run it mirrors to) and `lock`. One process at a time writes there: it holds `lock` (flock, dropped by
the OS when the process dies, so a crashed run leaves no stale lock). Every file but the
records is replaced whole (temp file, fsync, rename), so a crash or a full disk leaves the old
one; a records line cut short is dropped on resume. The directory stays resumable after any of
them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import secrets
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import yaml

from specbench.errors import ConfigError
from specbench.runs.record import SCHEMA, Record
from specbench.runs.summary import Summary

# Keys that change how a run is driven or displayed but not what any record means: changing
# them resumes the same run directory instead of starting a new one.
VOLATILE_KEYS = {
    "run": {"limit", "repeats", "progress", "results_dir", "name", "experiment", "wait_lock"},
    "logging": None,
}


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config that defines a run's records, and the record schema."""
    out: dict[str, Any] = {"record_schema": SCHEMA}
    for group, value in config.items():
        if group in VOLATILE_KEYS and VOLATILE_KEYS[group] is None:
            continue
        if group in VOLATILE_KEYS and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in VOLATILE_KEYS[group]}
        out[group] = value
    return out


def config_hash(config: dict[str, Any]) -> str:
    blob = json.dumps(identity(config), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        flat.update(_flatten(v, key + ".") if isinstance(v, dict) else {key: v})
    return flat


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    a, b = _flatten(identity(old)), _flatten(identity(new))
    return [
        f"{k}: {a.get(k)!r} -> {b.get(k)!r}"
        for k in sorted(a.keys() | b.keys())
        if a.get(k) != b.get(k)
    ]


def read_records(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """Every complete record. A cut last line (a crash mid-write) is dropped, and with `repair`
    removed from the file so appends continue cleanly; a bad line elsewhere is an error, and
    the file is left as it is."""
    if not path.exists():
        return []
    complete, _, tail = path.read_bytes().rpartition(b"\n")
    lines = complete.split(b"\n") if complete else []
    records, good_bytes = [], 0
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except ValueError:
            if i < len(lines) - 1:
                raise ValueError(
                    f"line {i + 1} of {len(lines)} is corrupt and later records follow it"
                ) from None
            break
        good_bytes += len(line) + 1
    if repair and good_bytes < path.stat().st_size:
        with path.open("r+b") as fh:
            fh.truncate(good_bytes)
    return records


def load_records(path: Path, run_id: str, repair: bool = True) -> list[Record]:
    """The records of a run directory, a cut last line repaired (unless `repair` is False: a
    report reads, never writes); a file that cannot be read, a bad line or a sample recorded
    twice (it would count twice in every mean) is one line naming the file, and the file is
    left untouched."""
    try:
        rows = read_records(path, repair=repair)
        records = [_record(row, n) for n, row in enumerate(rows, start=1)]
        _once_each(records)
        return records
    except OSError as err:
        raise ConfigError(
            "run.name", run_id, f"{path}: cannot be read ({err.strerror}); nothing was changed"
        ) from None
    except ValueError as err:
        raise ConfigError(
            "run.name",
            run_id,
            f"{path}: {err}; nothing was changed: repair or delete that line, or move the file "
            "aside to start the cell over",
        ) from None


def _once_each(records: list[Record]) -> None:
    """ValueError naming the first (sample, trial) recorded twice, with both lines."""
    first: dict[tuple[str, int], int] = {}
    for line, record in enumerate(records, start=1):
        if record.key in first:
            trial = f" (trial {record.trial})" if record.trial else ""
            raise ValueError(
                f"line {line} records sample {record.id!r}{trial} again (first at line "
                f"{first[record.key]})"
            )
        first[record.key] = line


def _record(row: Any, line: int) -> Record:
    try:
        return Record.from_json(row)
    except (ValueError, TypeError) as err:
        raise ValueError(f"line {line}: {err}") from None


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An OSError while writing `path` names it (a full disk's error names no file)."""
    try:
        yield
    except OSError as err:
        if err.filename is not None:
            raise
        raise OSError(err.errno, err.strerror, str(path)) from err


def _write_all(fd: int, data: bytes) -> None:
    """All of `data`: os.write may write part of it (a disk filling up) before it fails."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(path: Path, text: str) -> None:
    """Replace `path` whole or not at all: a crash or a full disk mid-write leaves the old file."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with _writing(path):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # mode as umask says
        try:
            try:
                _write_all(fd, text.encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)  # the rename itself survives a power cut
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def existing_writable(root: Path, key: str = "run.results_dir") -> Path:
    """The deepest directory at or above `root` that exists, after one file was written in it;
    nothing is created, so a run refused later leaves nothing behind (`specbench.run`). One line
    naming `key` otherwise."""
    return _written(key, root, _deepest(root))


def make_writable(root: Path, *parts: str) -> Path:
    """`root / parts...`, created, after one file was written in it; one line naming
    `run.results_dir` otherwise, and what was created for it removed again."""
    directory = root.joinpath(*parts)
    existed = _deepest(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        _remove_up_to(directory, existed)
        _written("run.results_dir", root, directory, err)
    return _written("run.results_dir", root, directory)


def _deepest(path: Path) -> Path:
    """`path`, or the nearest directory above it that exists."""
    there = path.absolute()
    while not there.exists() and there != there.parent:
        there = there.parent
    return there


def _remove_up_to(directory: Path, existed: Path) -> None:
    """The empty directories from `directory` up to (not including) `existed`."""
    for here in [directory.absolute(), *directory.absolute().parents]:
        if here == existed or existed not in here.parents:
            return
        try:
            here.rmdir()
        except OSError:
            continue  # never made, or another run's files there


def _written(key: str, root: Path, directory: Path, failed: OSError | None = None) -> Path:
    """`directory`, once a file could be written in it; a `ConfigError` naming `key` (`root`)
    otherwise, or at once with `failed` (the error creating it)."""
    try:
        if failed is not None:
            raise failed
        if not directory.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(directory))
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as err:
        where = err.filename or directory
        raise ConfigError(key, str(root), f"must be writable ({err.strerror}: {where})") from None
    return directory


def lock(run_dir: Path, run_id: str, wait: bool) -> IO[str]:
    """Hold `run_dir` for this process until the returned file closes. Held elsewhere, refuse
    in one line naming the holder, or with `wait` wait for it to let go."""
    path = run_dir / "lock"
    created = not path.exists()
    fh = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = fh.read().strip() or "another process"
        if not wait:
            fh.close()
            raise ConfigError(
                "run.name",
                run_id,
                f"{run_dir} is in use by {holder}; rerun when it ends, or with "
                "run.wait_lock=true to wait for it",
            ) from None
        print(f"specbench: waiting for {holder} to finish with {run_dir}", file=sys.stderr)
        fcntl.flock(fh, fcntl.LOCK_EX)
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    try:
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {socket.gethostname()} since {since}\n")
        fh.flush()
    except OSError as err:  # a full disk: name the file, and leave no empty lock behind
        with contextlib.suppress(OSError):
            fh.close()
        if created:
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                run_dir.rmdir()
        raise OSError(err.errno, err.strerror, str(path)) from None
    return fh


def stored_config(saved: Path, run_id: str) -> dict[str, Any] | None:
    """The config a run directory's records were written by; None for a new directory."""
    if not saved.exists():
        return None
    try:
        old = yaml.safe_load(saved.read_text())
    except yaml.YAMLError:
        old = None
    if not isinstance(old, dict):
        raise ConfigError(
            "run.name",
            run_id,
            f"{saved} is empty or not YAML (a write cut short by an older specbench); delete it "
            f"to resume the records there under this config, or delete {saved.parent} to start "
            "over",
        )
    return upgraded(old)


# run knobs a stored config had before backends took their own config group, and where they
# live now (`backend.<key>`)
MOVED_TO_BACKEND = {"backend": "name", "vllm_python": "python", "vllm_startup_s": "startup_s"}


def upgraded(config: dict[str, Any]) -> dict[str, Any]:
    """A stored config as the current schema writes it: configs from before the `backend`
    group get one (specbench's own engine takes no knobs, so only another backend keeps the
    moved ones), so old run directories resume and read beside new ones."""
    if "backend" in config or "run" not in config:
        return config
    run = dict(config["run"])
    moved = {new: run.pop(old) for old, new in MOVED_TO_BACKEND.items() if old in run}
    name = moved.get("name") or "specbench"
    backend = {"name": name} if name == "specbench" else {**moved, "name": name}
    return {**config, "run": run, "backend": backend}


class RunStore:
    def __init__(self, run_dir: Path, config: dict[str, Any], held: IO[str], run_id: str):
        self.run_dir = run_dir
        self.config = config
        self.records_path = run_dir / "records.jsonl"
        self.records = load_records(self.records_path, run_id)
        self.done = {r.key for r in self.records}  # (sample id, trial)
        self._held = held
        self._fd: int | None = None

    @classmethod
    def open(cls, config: dict[str, Any], run_id: str) -> RunStore:
        """Checks that the results directory is writable, holds the run directory, checks that
        what it holds was written by the same config, then loads its finished records."""
        run_cfg = config["run"]
        run_dir = make_writable(Path(run_cfg["results_dir"]), run_cfg["experiment"], run_id)
        held = lock(run_dir, run_id, run_cfg["wait_lock"])
        try:
            saved = run_dir / "config.yaml"
            old = stored_config(saved, run_id)
            if old is not None and config_hash(old) != config_hash(config):
                diff = "; ".join(config_diff(old, config))
                raise ConfigError(
                    "run.name",
                    run_id,
                    f"{run_dir} holds records of a different config ({diff}); "
                    f"pass another run.name, or delete that directory to start fresh",
                )
            atomic_write(saved, yaml.safe_dump(config, sort_keys=False))
            return cls(run_dir, config, held, run_id)
        except BaseException:
            held.close()
            raise

    def append(self, record: Record) -> None:
        """Write one finished sample; it survives a crash the moment this returns."""
        if self._fd is None:
            self._fd = os.open(self.records_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        with _writing(self.records_path):
            _write_all(self._fd, (json.dumps(record.to_json()) + "\n").encode("utf-8"))
            os.fsync(self._fd)
        self.records.append(record)
        self.done.add(record.key)

    def finished(self, keys: set[tuple[str, int]]) -> Summary | None:
        """The stored summary when every (sample, trial) in `keys` is recorded and summarised:
        a rerun of a complete cell then loads no model. A summary that cannot be read is one
        line naming it (moving it aside makes the rerun summarise the records again)."""
        summary = self.run_dir / "summary.json"
        if not (keys <= self.done and summary.exists()):
            return None
        try:
            return Summary.from_json(json.loads(summary.read_text()))
        except (OSError, ValueError, TypeError) as err:
            why = " ".join(str(err).split()) or type(err).__name__
            raise ConfigError(
                "run.name",
                self.run_dir.name,
                f"{summary}: not a readable summary ({why}); delete it or move it aside and "
                "rerun to summarise the records again",
            ) from None

    def write_json(self, name: str, payload: dict[str, Any]) -> None:
        atomic_write(self.run_dir / name, json.dumps(payload, indent=2, default=str) + "\n")

    def wandb_id(self) -> str:
        """The W&B run this directory mirrors to, made once: a resumed run continues it."""
        path = self.run_dir / "wandb-id"
        if not path.exists():
            atomic_write(path, secrets.token_hex(8) + "\n")
        return path.read_text().strip()

    def close(self) -> None:
        """Stop writing and let go of the run directory."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._held.close()
