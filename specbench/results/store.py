"""Append-only per-sample records with resume: the local files are the source of truth.

A run directory holds `config.yaml` (resolved), `records.jsonl` (one line per finished sample,
flushed and fsynced as it finishes), `summary.json` and `env.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml

from specbench.errors import ConfigError
from specbench.results.record import SCHEMA, Record

# Keys that change how a run is driven or displayed but not what any record means: changing
# them resumes the same run directory instead of starting a new one.
VOLATILE_KEYS = {
    "run": {"limit", "progress", "results_dir", "name", "experiment"},
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
    removed from the file so appends continue cleanly; a bad line elsewhere is an error."""
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
                    f"{path}: line {i + 1} is corrupt and is not the last line"
                ) from None
            break
        good_bytes += len(line) + 1
    if repair and good_bytes < path.stat().st_size:
        with path.open("r+b") as fh:
            fh.truncate(good_bytes)
    return records


class RunStore:
    def __init__(self, run_dir: Path, config: dict[str, Any]):
        self.run_dir = run_dir
        self.config = config
        self.records_path = run_dir / "records.jsonl"
        try:
            self.records = [Record.from_json(r) for r in read_records(self.records_path, True)]
        except (ValueError, TypeError) as err:
            raise ConfigError("run.name", run_dir.name, f"{self.records_path}: {err}") from None
        self.done = {r.id for r in self.records}
        self._fh = None

    @classmethod
    def open(cls, config: dict[str, Any], run_id: str) -> RunStore:
        """Checks that the results directory is writable and that an existing run directory was
        written by the same config, then loads its finished records."""
        run_cfg = config["run"]
        root = Path(run_cfg["results_dir"])
        run_dir = root / run_cfg["experiment"] / run_id
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            probe = run_dir / ".write-probe"
            probe.write_text("")
            probe.unlink()
        except OSError as err:
            raise ConfigError(
                "run.results_dir", str(root), f"must be writable ({err.strerror})"
            ) from None
        saved = run_dir / "config.yaml"
        if saved.exists():
            old = yaml.safe_load(saved.read_text())
            if config_hash(old) != config_hash(config):
                diff = "; ".join(config_diff(old, config))
                raise ConfigError(
                    "run.name",
                    run_id,
                    f"{run_dir} holds records of a different config ({diff}); "
                    f"pass another run.name, or delete that directory to start fresh",
                )
        saved.write_text(yaml.safe_dump(config, sort_keys=False))
        return cls(run_dir, config)

    def append(self, record: Record) -> None:
        """Write one finished sample; it survives a crash the moment this returns."""
        if self._fh is None:
            self._fh = self.records_path.open("a", encoding="utf-8")
        self._fh.write(json.dumps(record.to_json()) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.records.append(record)
        self.done.add(record.id)

    def finished(self, ids: set[str]) -> dict[str, Any] | None:
        """The stored summary when every sample in `ids` is recorded and summarised: a rerun
        of a complete cell then loads no model."""
        summary = self.run_dir / "summary.json"
        if ids <= self.done and summary.exists():
            return json.loads(summary.read_text())
        return None

    def write_json(self, name: str, payload: dict[str, Any]) -> None:
        tmp = self.run_dir / f".{name}.tmp"
        tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
        os.replace(tmp, self.run_dir / name)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
