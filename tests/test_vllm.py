"""`run.backend=vllm` against real vLLM servers on the tiny world (`make test-vllm`, after
`make vllm`): the same cell on both backends decodes the same tokens with the same acceptance,
the backend is part of the cell, and no server outlives its run, also when it is interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import compose_cfg
from specbench.pipeline import execute, prepare
from specbench.report.load import load_runs
from specbench.results.store import load_records
from specbench.serving.vllm import VENV

pytestmark = pytest.mark.vllm
SERVER = "vllm.entrypoints.openai.api_server"
CELL = ["target=tiny", "task=tiny_code", "run.limit=4", "run.max_new_tokens=48", "run.warmup=1"]


def servers() -> list[str]:
    found = subprocess.run(["pgrep", "-f", SERVER], capture_output=True, text=True).stdout
    return found.split()


def ar_in_vllm(results: Path) -> list[str]:
    """`specbench-run` of a long plain-decoding cell in vLLM, as a separate process."""
    return [
        sys.executable,
        "-m",
        "specbench",
        *CELL[:2],  # the tiny target and task
        "method=ar",
        "run.limit=40",
        "run.max_new_tokens=128",
        "run.backend=vllm",
        "logging.wandb.mode=disabled",
        f"run.results_dir={results}",
    ]


def total_variation(a: dict[str, int], b: dict[str, int]) -> float:
    keys, na, nb = set(a) | set(b), sum(a.values()), sum(b.values())
    return 0.5 * sum(abs(a.get(k, 0) / na - b.get(k, 0) / nb) for k in keys)


def run_cell(tmp_path: Path, *overrides: str):
    cfg = compose_cfg(*CELL, *overrides, f"run.results_dir={tmp_path}")
    plan = prepare(cfg)
    summary = execute(plan)
    return summary, load_records(plan.store.run_dir / "records.jsonl", plan.run_id)


@pytest.fixture(scope="module", autouse=True)
def environment() -> None:
    assert (VENV / "bin" / "python").is_file(), "no .venv-vllm: run `make vllm` first"


def test_sps_in_vllm_decodes_and_accepts_as_specbench_does(tmp_path: Path) -> None:
    """Greedy SpS (tiny + tiny-ar, gamma 4): vLLM's tokens are specbench's on every prompt,
    and its acceptance per verification step equals specbench's per round; both cells are
    lossless against their own backend's plain decoding, and stay apart in the report."""
    sps = ["method=sps", "drafter=tiny-ar", "method.gamma=4"]
    ours, our_records = run_cell(tmp_path, *sps)
    theirs, their_records = run_cell(tmp_path, *sps, "run.backend=vllm")
    assert theirs.lossless_rate == ours.lossless_rate == 1.0
    for mine, served in zip(our_records, their_records):
        assert served.method.output_ids == mine.method.output_ids
        assert served.baseline.output_ids == mine.baseline.output_ids
    assert theirs.accepted_per_round == pytest.approx(ours.accepted_per_round, rel=0.02)
    # vLLM's prefill emits its first token undrafted, specbench's first round verifies a draft
    # with the prompt: rounds fall a token apart, so the histograms agree in shape, not count
    assert total_variation(theirs.accepted_hist, ours.accepted_hist) < 0.05
    cells = sorted(load_runs(tmp_path)["cell"])
    assert cells == ["sps γ4 · tiny/tiny-ar", "sps γ4 · tiny/tiny-ar [vllm]"]
    assert not servers()


def test_an_interrupted_vllm_run_leaves_no_server(tmp_path: Path) -> None:
    """Ctrl-C once the servers answer: one line, exit 130, and every server is gone."""
    run = subprocess.Popen(ar_in_vllm(tmp_path), stderr=subprocess.PIPE, text=True)
    logs = tmp_path / "adhoc"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and not list(logs.glob("*/records.jsonl")):
        time.sleep(2)  # the first record: the server answered and decoding runs
    assert servers(), "no vLLM server was running"
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("specbench: interrupted")
    time.sleep(2)
    assert not servers()


def test_a_killed_specbench_takes_its_servers_with_it(tmp_path: Path) -> None:
    """SIGKILL runs no cleanup; the servers die with their parent (PR_SET_PDEATHSIG)."""
    run = subprocess.Popen(ar_in_vllm(tmp_path), stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and not servers():
        time.sleep(2)
    assert servers(), "no vLLM server was started"
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and servers():
        time.sleep(2)
    assert not servers()
