"""`specbench-run` end to end in subprocesses: multirun, W&B offline, resume after SIGKILL and
after Ctrl-C (also one a library swallowed), two runs of one cell at once, a full disk, and bad
input answered in one line (before torch is imported where the config alone is wrong)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from conftest import SWALLOWS_CTRL_C
from specbench import paths
from specbench.config import RunConfig
from specbench.runs.machine import Machine

FAST = [
    "run.warmup=1",
    "run.progress=false",
    "target=random-gpt2",
    "drafter=random-gpt2-draft",
    "task=prompts",
]


def specbench(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, code: str | None = None
) -> subprocess.Popen:
    """`specbench-run args`; `code` runs first in the same process (to break something)."""
    launch = ["-m", "specbench"] if code is None else ["-c", f"{code}\n{LAUNCH}"]
    return subprocess.Popen(
        [sys.executable, *launch, *args],
        cwd=cwd,
        env=env or os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


LAUNCH = "from specbench.run import cli\ncli()"


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def run_dirs(results: Path) -> list[Path]:
    return sorted(p.parent for p in results.glob("*/*/records.jsonl"))


def recorded_ids(records: Path) -> list[str]:
    return [json.loads(line)["id"] for line in records.read_text().splitlines()]


WARNING = "specbench: warning:"


def said(err: str) -> list[str]:
    """specbench's own lines on stderr (transformers and W&B may print progress there too),
    but its warnings, which depend on the forward costs a loaded machine measures (a
    predicted slowdown: `warned`)."""
    assert "Traceback" not in err, err
    return [
        line
        for line in err.splitlines()
        if line.startswith("specbench:") and not line.startswith(WARNING)
    ]


def warned(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(WARNING)]


def records_once_written(proc: subprocess.Popen, results: Path, at_least: int) -> Path:
    """The run's records file once it holds `at_least` samples, the run still going."""
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        found = list(results.glob("*/*/records.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= at_least:
            return found[0]
        time.sleep(0.05)
    raise AssertionError("the run ended before it could be stopped")


def test_multirun_over_two_methods_writes_one_run_dir_each(tmp_path: Path) -> None:
    """Each cell its directory, records, summary, env.json with the machine, and W&B's offline
    run; the console holds specbench's tables, and W&B says nothing (logging.wandb.verbose)."""
    results = tmp_path / "results"
    loud = {k: v for k, v in os.environ.items() if k != "WANDB_SILENT"}  # conftest's
    code, out, err = finish(
        specbench(
            [
                "-m",
                "method=ar,sps",
                "run.limit=2",
                f"run.results_dir={results}",
                "logging.wandb.mode=offline",
                "run.max_new_tokens=16",
                *FAST,
            ],
            tmp_path,
            env=loud,
        )
    )
    assert code == 0, err
    dirs = run_dirs(results)
    assert [d.name.split("-")[0] for d in dirs] == ["ar", "sps"]
    for d in dirs:
        records = [json.loads(line) for line in (d / "records.jsonl").read_text().splitlines()]
        summary = json.loads((d / "summary.json").read_text())
        assert [r["id"] for r in records] == ["demo-00", "demo-01"]
        assert summary["n_samples"] == 2 and summary["lossless_rate"] == 1.0
        assert (
            yaml.safe_load((d / "config.yaml").read_text())["method"]["name"]
            == d.name.split("-")[0]
        )
        machine = Machine(**json.loads((d / "env.json").read_text())["machine"])
        assert machine.threads >= 1 and summary["machine"] == machine.label()
        assert list((d / "wandb").glob("offline-run-*")), "W&B offline run not under the run dir"
    assert not (tmp_path / "wandb").exists()
    sps = json.loads((dirs[1] / "summary.json").read_text())
    assert sps["tau"] > 1.0 and sps["nfe_drafter"] > 0
    assert "speedup" in out  # the summary table was printed
    # random drafters, low acceptance: before its timed arms SpS says it will lose, and why
    [warning] = [line for line in warned(err) if "warning: predicted" in line]
    assert warning.startswith("specbench: warning: predicted 0.")
    assert re.search(r"verifying \d+ tokens costs [\d.]+ target steps, a drafter call", warning)
    assert f"on {machine.label()} (float" in warning
    # W&B mirrored offline without a line of its own (run summary, sync hints) on the console
    assert not [line for line in (out + err).splitlines() if line.startswith("wandb:")]


def cell_args(results: Path, limit: int, wandb: str, new_tokens: int) -> list[str]:
    """One demo cell, fast: the overrides the resume, lock and full-disk tests rerun."""
    return [
        f"run.limit={limit}",
        f"run.results_dir={results}",
        f"logging.wandb.mode={wandb}",
        f"run.max_new_tokens={new_tokens}",
        *FAST,
    ]


@pytest.mark.slow
def test_a_run_killed_midway_resumes_and_holds_every_sample_once(tmp_path: Path) -> None:
    results = tmp_path / "results"
    args = cell_args(results, limit=10, wandb="disabled", new_tokens=48)
    proc = specbench(args, tmp_path)
    records = records_once_written(proc, results, at_least=3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(records.read_text().splitlines())
    assert done_before < 10

    code, out, err = finish(specbench(args, tmp_path))
    assert code == 0, err
    assert sorted(recorded_ids(records)) == [f"demo-{i:02d}" for i in range(10)]
    assert json.loads((records.parent / "summary.json").read_text())["n_samples"] == 10


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_the_rerun_continues_the_same_wandb_run(tmp_path: Path) -> None:
    results = tmp_path / "results"
    args = cell_args(results, limit=16, wandb="offline", new_tokens=48)
    proc = specbench(args, tmp_path)
    records = records_once_written(proc, results, at_least=1)
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc)
    done = len(records.read_text().splitlines())
    assert code == 130 and done < 16, err[-3000:]  # every prompt: still running at the signal
    assert said(err) == [
        f"specbench: interrupted: {done} of 16 samples recorded in {records.parent}; "
        "rerun the same command to resume"
    ]
    [first] = (records.parent / "wandb").glob("offline-run-*")
    assert "got exitcode: 130" in (first / "logs" / "debug.log").read_text()  # not "finished"
    code, out, err = finish(specbench(args, tmp_path))
    assert code == 0, err
    assert sorted(recorded_ids(records)) == [f"demo-{i:02d}" for i in range(16)]
    wandb_id = (records.parent / "wandb-id").read_text().strip()
    runs = sorted(p.name for p in (records.parent / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(run.endswith(f"-{wandb_id}") for run in runs)


# Ctrl-C while the first sample is mirrored, inside a finalizer, which swallows the exception
SWALLOWED_CTRL_C = f"""
import os, signal
from specbench.runs.wandb import WandbMirror
{SWALLOWS_CTRL_C}
def log_sample(self, record):
    Swallows()
WandbMirror.log_sample = log_sample
"""


def test_a_swallowed_ctrl_c_stops_the_run_at_the_next_sample(tmp_path: Path) -> None:
    results = tmp_path / "results"
    args = cell_args(results, limit=4, wandb="disabled", new_tokens=16)
    code, out, err = finish(specbench(args, tmp_path, code=SWALLOWED_CTRL_C))
    [run_dir] = run_dirs(results)
    assert code == 130, err
    assert said(err) == [
        f"specbench: interrupted: 1 of 4 samples recorded in {run_dir}; "
        "rerun the same command to resume"
    ]


def test_two_runs_of_one_cell_at_once_record_every_sample_once(tmp_path: Path) -> None:
    results = tmp_path / "results"
    args = cell_args(results, limit=4, wandb="disabled", new_tokens=16)
    both = [specbench(args, tmp_path), specbench(args, tmp_path)]
    (ran, _, _), (refused, _, err) = sorted((finish(p) for p in both), key=lambda r: r[0])
    assert (ran, refused) == (0, 2), err
    [line] = said(err)
    holder = next(p.pid for p in both if p.returncode == 0)
    assert f"is in use by pid {holder} on " in line and "run.wait_lock=true" in line
    [run_dir] = run_dirs(results)
    assert recorded_ids(run_dir / "records.jsonl") == [f"demo-{i:02d}" for i in range(4)]


# the disk fills up while the second sample's record is written: half of it reaches the file
FULL_DISK = """
import errno, os
from specbench.runs import store
write_all = store._write_all
def full(fd, data):
    if data.startswith(b'{"id": "demo-01"'):
        write_all(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    write_all(fd, data)
store._write_all = full
"""


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_the_rerun_resumes(tmp_path: Path) -> None:
    """Mid-run, with W&B mirroring: the error is the command's last line (W&B's run is ended
    as failed, quietly, not by its exit hook's closing lines)."""
    results = tmp_path / "results"
    args = cell_args(results, limit=4, wandb="offline", new_tokens=16)
    loud = {k: v for k, v in os.environ.items() if k != "WANDB_SILENT"}  # W&B as users see it
    code, out, err = finish(specbench(args, tmp_path, env=loud, code=FULL_DISK))
    [run_dir] = sorted(p.parent for p in results.glob("*/*/config.yaml"))
    records = run_dir / "records.jsonl"
    line = (
        f"specbench: error: no space left on the device writing {records}: free some and "
        "rerun the same command (every recorded sample is kept)"
    )
    assert code == 1
    assert said(err) == [line] and err.splitlines()[-1] == line, err
    assert "wandb sync" not in err + out  # W&B's closing lines
    [wandb_run] = (run_dir / "wandb").glob("offline-run-*")
    assert "got exitcode: 1" in (wandb_run / "logs" / "debug.log").read_text()
    code, out, err = finish(specbench(args, tmp_path))
    assert code == 0, err
    assert recorded_ids(records) == [f"demo-{i:02d}" for i in range(4)]
    assert json.loads((run_dir / "summary.json").read_text())["n_samples"] == 4


# prints, as the command ends, which of torch and transformers it imported
IMPORTED = """
import atexit, sys
atexit.register(lambda: print(sorted(m for m in ("torch", "transformers") if m in sys.modules)))
"""


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        (
            ["method.gamam=3"],
            "method.gamam: no such key in SpSConfig; allowed: name, gamma, schedule, rule, leniency, tree, top_k, budget",
        ),
        (
            ["run.limit=many"],
            "run.limit: Value 'many' of type 'str' could not be converted to Integer",
        ),
        (["run.threads=0"], "run.threads=0: must be null (torch's default) or an integer >= 1"),
        (
            ["run.name=../../x"],
            "run.name='../../x': must be a plain name: no '/', no '..', not empty",
        ),
        (  # `+` adds a key beside the schema's fields, which typing would drop silently
            ["+run.temprature=0.7"],
            "run.temprature=0.7: no such key in RunConfig; allowed: "
            + ", ".join(f.name for f in fields(RunConfig)),
        ),
        (  # a draft the generation cuts short would measure another gamma than it names
            ["method.gamma=100000"],
            "method.gamma=100000: must be an integer in [1, max_new_tokens=128]",
        ),
        (
            ["method=specdiff", "drafter=tiny-dlm", "method.q_source=best"],
            "method.q_source='best': allowed: reveal_step, final_step, onehot",
        ),
        (
            ["method=psd", "target=tiny-dlm", "method.policy=origin"],
            "method.policy='origin': is random, so it cannot draft; "
            "allowed: quota, threshold, dynamic, localleap",
        ),
        (
            ["method=diffuspec", "drafter=tiny-dlm", "run.temperature=0.7"],
            "run.temperature=0.7: diffuspec verifies greedily here: use 0",
        ),
        (
            ["task=humaneval", "task.timeout_s=0"],
            "task.timeout_s=0.0: must be a number of seconds >= 1",
        ),
        (
            ["task=prompts", "task.source=missing.jsonl"],
            "task.source='missing.jsonl': no such file; give 'hub' or a local data file",
        ),
        (  # without a login W&B would stop the run at its first record
            ["logging.wandb.mode=online"],
            "logging.wandb.mode='online': needs a W&B login (`wandb login`, or WANDB_API_KEY); "
            "offline, the default, needs none (`wandb sync` uploads it later)",
        ),
    ],
)
def test_a_config_error_is_one_line_before_torch_is_imported(
    overrides: list[str], line: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "NETRC")}
    env["HOME"] = str(tmp_path)  # no ~/.netrc: no W&B login
    results = tmp_path / "results"
    args = [*overrides, f"run.results_dir={results}"]
    code, out, err = finish(specbench(args, tmp_path, env=env, code=IMPORTED), timeout=120)
    assert code == 2 and out.strip() == "[]"
    assert err.strip().splitlines() == [f"specbench: error: {line}"]
    assert not results.exists() or list(results.rglob("*")) == []


@pytest.mark.parametrize(
    "override, line",
    [
        ("run.threads=0", "run.threads=0"),  # a knob, checked once torch is imported
        ("run.device=mps", "run.device='mps'"),  # a device probe (no MPS on a CI machine)
    ],
)
def test_a_refused_run_writes_nothing(override: str, line: str, tmp_path: Path) -> None:
    """Refused after composing: the results directory it named (two levels, neither there
    before) is not created, nor `_hydra`; one that was there stays, empty, as it was."""
    results = tmp_path / "new" / "results"
    code, _, err = finish(specbench([override, f"run.results_dir={results}"], tmp_path))
    assert code == 2 and err.strip().splitlines()[-1].startswith(f"specbench: error: {line}")
    assert list(tmp_path.iterdir()) == []
    results.mkdir(parents=True)
    code, _, _ = finish(specbench([override, f"run.results_dir={results}"], tmp_path))
    assert code == 2 and results.is_dir() and list(results.iterdir()) == []


@pytest.mark.parametrize(("group", "some"), [("method", {"ar", "sps"}), ("backend", {"vllm"})])
def test_an_unknown_choice_is_one_line_and_exit_code_2(
    group: str, some: set[str], tmp_path: Path
) -> None:
    code, out, err = finish(specbench([f"{group}=nope"], tmp_path), timeout=120)
    options = sorted(p.stem for p in (paths.CONF_DIR / group).glob("*.yaml"))
    assert code == 2 and some <= set(options)
    assert err.strip().splitlines() == [
        f"specbench: error: {group}='nope': unknown {group}; allowed: {', '.join(options)}"
    ]


@pytest.mark.parametrize("mode", [[], ["-m"]])
def test_an_unwritable_results_dir_is_one_line_before_hydra_writes_there(
    mode: list[str], tmp_path: Path
) -> None:
    """A path through a file: unwritable for root too (CI runs as root)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    results = blocker / "results"
    code, out, err = finish(specbench([*mode, f"run.results_dir={results}"], tmp_path), timeout=120)
    assert code == 2
    assert err.strip().splitlines() == [
        f"specbench: error: run.results_dir='{results}': must be writable "
        f"(Not a directory: {blocker})"
    ]


def test_an_unreachable_hub_is_one_line_in_seconds(tmp_path: Path) -> None:
    """A hub that refuses connections and an empty cache: no retries, one line."""
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(name, None)
    started = time.monotonic()
    args = ["target=gpt2-xl", "drafter=gpt2", f"run.results_dir={tmp_path / 'results'}"]
    code, out, err = finish(specbench(args, tmp_path, env=env), timeout=120)
    assert code == 2 and time.monotonic() - started < 30
    [line] = err.strip().splitlines()
    assert line.startswith(
        "specbench: error: target.name_or_path='openai-community/gpt2-xl': no such directory; "
        "as a hub id: the hub (http://127.0.0.1:9) does not answer"
    )
    assert "the local cache has no copy" in line


def test_help_lists_the_choices_of_each_group_and_no_schemas(tmp_path: Path) -> None:
    code, out, err = finish(specbench(["--help"], tmp_path), timeout=120)
    methods = ", ".join(sorted(p.stem for p in (paths.CONF_DIR / "method").glob("*.yaml")))
    assert code == 0 and f"method: {methods}\n" in out and "schema_" not in out
