"""`backend=vllm` against real vLLM servers on the tiny world (`make test-vllm`, after
`make vllm`): the same cell on both backends decodes the same tokens with the same acceptance,
the backend is part of the cell, and no server outlives its run, also when it is interrupted."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import compose_cfg
from specbench.backends.vllm.server import VENV
from specbench.pipeline import execute, prepare
from specbench.report.load import load_runs
from specbench.runs.store import load_records

TOOLS = Path(__file__).parents[1] / "tools" / "vllm_steps"  # the proposer's logger, its check
_spec = importlib.util.spec_from_file_location("vllm_steps", TOOLS / "check.py")
vllm_steps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vllm_steps)

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
        "backend=vllm",
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
    theirs, their_records = run_cell(tmp_path, *sps, "backend=vllm")
    assert theirs.base.identical_rate == ours.base.identical_rate == 1.0
    for mine, served in zip(our_records, their_records):
        assert served.method.output_ids == mine.method.output_ids
        assert served.baseline.output_ids == mine.baseline.output_ids
        assert len(served.method.top2_ulps) == len(served.method.output_ids)
        assert mine.method.top2_ulps is None  # specbench's own cells need no gaps of their own
    assert theirs.accepted_per_round == pytest.approx(ours.accepted_per_round, rel=0.02)
    # vLLM's prefill emits its first token undrafted, specbench's first round verifies a draft
    # with the prompt: rounds fall a token apart, so the histograms agree in shape, not count
    assert total_variation(theirs.accepted_hist, ours.accepted_hist) < 0.05
    cells = sorted(load_runs(tmp_path)["cell"])
    assert cells == ["sps γ4 · tiny/tiny-ar", "sps γ4 · tiny/tiny-ar [vllm]"]
    assert not servers()


def test_eagle3_in_vllm_decodes_and_accepts_as_specbench_does(tmp_path: Path) -> None:
    """Greedy EAGLE-3 chains (tiny + tiny-eagle3 as committed, gamma 4): vLLM's tokens are
    specbench's on every prompt, and its drafter, reading the same target layers, accepts what
    specbench's does step for step. specbench's first round is the prefill alone (its drafter
    has no states yet) where vLLM's prefill is no step, so vLLM's steps are specbench's later
    rounds (measured: 72 accepted in 116 drafted rounds on both, 0.621 per round)."""
    eagle3 = ["method=eagle3", "drafter=tiny-eagle3", "method.tree=null", "method.gamma=4"]
    ours, our_records = run_cell(tmp_path, *eagle3)
    theirs, their_records = run_cell(tmp_path, *eagle3, "backend=vllm")
    assert theirs.base.identical_rate == ours.base.identical_rate == 1.0
    for mine, served in zip(our_records, their_records):
        assert served.method.output_ids == mine.method.output_ids
        assert mine.drafted_per_round[0] == 0
        assert served.accepted_per_round == mine.accepted_per_round[1:]
    assert theirs.accepted > 0
    assert not servers()


def test_pld_in_vllm_drafts_decodes_and_accepts_as_specbench_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Greedy PLD (vLLM's ngram proposer, gamma 4, n-grams 1-3): the same tokens on both
    backends, and the rounds specbench rebuilds from vLLM's record (which omits the steps
    without a draft) are the rounds vLLM's engine ran, as a log of its proposer inside the
    server shows; so acceptance per round agrees but for the first round's bookkeeping."""
    log = tmp_path / "ngram.jsonl"
    monkeypatch.setenv("PYTHONPATH", str(TOOLS))
    monkeypatch.setenv("VLLM_NGRAM_LOG", str(log))
    pld = ["method=pld", "method.gamma=4"]
    ours, our_records = run_cell(tmp_path, *pld)
    theirs, their_records = run_cell(tmp_path, *pld, "backend=vllm")
    assert theirs.base.identical_rate == ours.base.identical_rate == 1.0
    ran = vllm_steps.requests(log)
    for mine, served in zip(our_records, their_records):
        assert served.method.output_ids == mine.method.output_ids
        output, prompt = served.method.output_ids, served.prompt_tokens
        engine = [r for r in ran if vllm_steps.made(r, prompt, output)]
        rebuilt = list(zip(served.drafted_per_round, served.accepted_per_round))
        assert vllm_steps.rounds(engine[-1], output) == rebuilt
    assert any(0 in r.drafted_per_round[:-1] for r in their_records)  # placed, not only last
    # the first round's bookkeeping (vLLM's prefill drafts nothing) weighs more on 4 x 48
    # tokens than on the reference's 20 x 128 (+1.6%): 3.8% here
    assert theirs.accepted_per_round == pytest.approx(ours.accepted_per_round, rel=0.05)


def test_requests_in_flight_together_are_each_decoded_and_recorded_once(tmp_path: Path) -> None:
    """Plain decoding at 4 requests in flight: 8 samples, each recorded once with the tokens
    one request at a time decodes, the requests overlapping (more than 2 in flight on average,
    so throughput over busy seconds exceeds the per-user rate), and the level in the name."""
    served, served_records = run_cell(
        tmp_path, "method=ar", "run.limit=8", "backend=vllm", "run.concurrency=4"
    )
    alone, alone_records = run_cell(tmp_path, "method=ar", "run.limit=8")
    assert [r.id for r in served_records] == [r.id for r in alone_records]
    for mine, theirs in zip(alone_records, served_records):
        assert theirs.method.output_ids == mine.method.output_ids
    assert served.in_flight > 2 and served.throughput_tok_s > served.tok_s
    assert "ar · tiny [vllm c4]" in set(load_runs(tmp_path)["cell"])
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
