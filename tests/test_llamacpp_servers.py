"""`backend=llamacpp` against real llama-server processes on the tiny world (`make
test-llamacpp`, after `make llamacpp`): in f32 the same cell on both engines decodes the same
tokens with the same acceptance, requests in flight through slots are each read back with their
own steps, and no server outlives its run, also when it is interrupted or killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import compose_cfg
from specbench.backends.llamacpp.server import BUILD
from specbench.pipeline import execute, prepare
from specbench.report.load import load_runs
from specbench.runs.store import load_records

pytestmark = pytest.mark.llamacpp
CELL = ["target=tiny", "task=tiny_code", "run.limit=4", "run.max_new_tokens=48", "run.warmup=1"]
# one compute thread per server: llama.cpp's threads spin while they wait for each other, and
# on a shared 2-core machine two servers' spinning threads stall each other for seconds
LLAMACPP = ["backend=llamacpp", "backend.threads=1"]


def servers() -> list[str]:
    found = subprocess.run(["pgrep", "-f", str(BUILD / "llama-server")], capture_output=True)
    return found.stdout.decode().split()


def run_cell(tmp_path: Path, *overrides: str):
    cfg = compose_cfg(*CELL, *overrides, f"run.results_dir={tmp_path}")
    plan = prepare(cfg)
    summary = execute(plan)
    return summary, load_records(plan.store.run_dir / "records.jsonl", plan.run_id)


def both_engines(tmp_path: Path, *method: str):
    """The cell on specbench's engine and in llama.cpp: every output and baseline identical,
    both lossless against their own engine's plain decoding; each engine's summary and
    records."""
    ours, our_records = run_cell(tmp_path, *method)
    theirs, their_records = run_cell(tmp_path, *method, *LLAMACPP)
    assert theirs.base.identical_rate == ours.base.identical_rate == 1.0
    for mine, served in zip(our_records, their_records, strict=True):
        assert served.method.output_ids == mine.method.output_ids
        assert served.baseline.output_ids == mine.baseline.output_ids
        assert len(served.method.top2_ulps) == len(served.method.output_ids)
    return ours, our_records, theirs, their_records


def same_tokens(tmp_path: Path, *method: str):
    ours, _, theirs, their_records = both_engines(tmp_path, *method)
    return ours, theirs, their_records


def drafted_as_llama_cpp_drafts(record, n_max: int) -> bool:
    """A block or chain of n_max drafts every step but where the 48-token limit leaves fewer
    (llama-server drafts at most the tokens remaining less one)."""
    left = [
        48 - 1 - sum(a + 1 for a in record.accepted_per_round[:i]) - 1
        for i in range(len(record.drafted_per_round))
    ]
    return record.drafted_per_round == [min(n_max, n) for n in left]


@pytest.fixture(scope="module", autouse=True)
def environment() -> None:
    assert (BUILD / "llama-server").is_file(), "no llama-server: run `make llamacpp` first"


def test_sps_in_llamacpp_decodes_and_accepts_as_specbench_does(tmp_path: Path) -> None:
    """Greedy SpS (tiny + tiny-ar, gamma 4, f32 GGUF): llama.cpp's tokens are specbench's on
    every prompt, and tokens accepted per step equal specbench's per round within 2%; the
    two cells stay apart in the report."""
    ours, theirs, records = same_tokens(tmp_path, "method=sps", "drafter=tiny-ar", "method.gamma=4")
    assert theirs.accepted_per_round == pytest.approx(ours.accepted_per_round, rel=0.02)
    assert all(max(r.drafted_per_round) == 4 for r in records)
    cells = sorted(load_runs(tmp_path)["cell"])
    assert cells == ["sps γ4 · tiny/tiny-ar", "sps γ4 · tiny/tiny-ar [llamacpp f32]"]
    (run,) = tmp_path.glob("adhoc/*/llamacpp-method.log")
    engine = json.loads((run.parent / "env.json").read_text())["engine"]
    assert engine["build"]["commit"] == "0c1e57098" and "-m" in engine["args"]
    assert not servers()


def test_pld_in_llamacpp_places_the_steps_it_drafted_nothing_for(tmp_path: Path) -> None:
    """PLD as llama.cpp's ngram-simple (3-grams, gamma 4): the same tokens; llama.cpp logs
    only the steps it drafted for, and the replay of its lookup places the others, so every
    output's rounds add up to its tokens with llama.cpp's own totals (checked per response)."""
    pld = ["method=pld", "method.gamma=4", "method.prompt_lookup_min=3"]
    _, theirs, records = same_tokens(tmp_path, *pld)
    for record in records:
        emitted = 1 + sum(a + 1 for a in record.accepted_per_round)
        assert emitted == len(record.method.output_ids)
    assert any(0 in r.drafted_per_round[:-1] for r in records)  # placed, not only last
    assert theirs.accepted_per_round > 0


def test_dflash_exported_as_llama_cpps_dflash_decodes_as_specbench_does(tmp_path: Path) -> None:
    """tiny-dflash as llama.cpp's draft-dflash GGUF (target layers, block, mask token): the
    same tokens, a block of 15 drafts every step but where the length limit leaves fewer, and
    acceptance above specbench's (llama.cpp's DFlash is its own implementation: on these
    4 x 48 tokens 0.90 per step against 0.71 per round; docs/measurement.md)."""
    ours, theirs, records = same_tokens(tmp_path, "method=dflash", "drafter=tiny-dflash")
    assert all(drafted_as_llama_cpp_drafts(record, 15) for record in records)
    assert ours.accepted_per_round < theirs.accepted_per_round < 1.5 * ours.accepted_per_round


def test_eagle3_exported_as_llama_cpps_eagle3_decodes_and_accepts_as_specbench_does(
    tmp_path: Path,
) -> None:
    """tiny-eagle3 as llama.cpp's draft-eagle3 GGUF (the inputs of tiny's layers 1, 3, 5, d2t,
    the target's embeddings), greedy chains of 4: the same tokens on every prompt, a chain of
    4 every step but where the length limit leaves fewer, and the same acceptance round for
    round. specbench's first round is the prefill alone (its drafter has no states yet) where
    llama.cpp's prefill is no step, so llama.cpp's steps are specbench's later rounds (on these
    4 x 48 tokens 0.621 accepted per step on both, specbench's 0.600 per round counting its
    prefill; 20 x 128: docs/measurement.md)."""
    eagle3 = ["method=eagle3", "method.tree=null", "method.gamma=4", "drafter=tiny-eagle3"]
    ours, our_records, theirs, their_records = both_engines(tmp_path, *eagle3)
    for mine, served in zip(our_records, their_records):
        assert drafted_as_llama_cpp_drafts(served, 4)
        assert mine.drafted_per_round[0] == 0
        assert served.accepted_per_round == mine.accepted_per_round[1:]
    drafting = ours.accepted / (ours.n_rounds - len(our_records))
    print(
        f"accepted per round: specbench {ours.accepted_per_round:.3f} ({drafting:.3f} per "
        f"drafting round), llama.cpp {theirs.accepted_per_round:.3f} per step"
    )
    assert theirs.accepted_per_round == pytest.approx(drafting)
    assert not servers()


def test_requests_in_flight_through_slots_are_each_read_back_with_their_own_steps(
    tmp_path: Path,
) -> None:
    """SpS at 2 requests in flight (2 slots): 6 samples, each recorded once with the tokens
    one request at a time decodes, each response's steps read from its own slot's trace
    (their sums are checked against the response's totals), and the level in the name."""
    sps = ["method=sps", "drafter=tiny-ar", "run.limit=6", *LLAMACPP]
    served, served_records = run_cell(tmp_path, *sps, "run.concurrency=2")
    alone, alone_records = run_cell(tmp_path, *sps)
    assert [r.id for r in served_records] == [r.id for r in alone_records]
    for mine, theirs in zip(alone_records, served_records):
        assert theirs.method.output_ids == mine.method.output_ids
        assert theirs.accepted_per_round == mine.accepted_per_round
    assert served.in_flight > 1
    assert "sps γ4 · tiny/tiny-ar [llamacpp f32 c2]" in set(load_runs(tmp_path)["cell"])
    assert not servers()


def ar_in_llamacpp(results: Path) -> list[str]:
    """`specbench-run` of a long plain-decoding cell in llama.cpp, as a separate process."""
    return [
        sys.executable,
        "-m",
        "specbench",
        *CELL[:2],
        "method=ar",
        "run.limit=40",
        "run.max_new_tokens=128",
        *LLAMACPP,
        "logging.wandb.mode=disabled",
        f"run.results_dir={results}",
    ]


def test_an_interrupted_llamacpp_run_leaves_no_server(tmp_path: Path) -> None:
    """Ctrl-C once the servers answer: one line, exit 130, and every server is gone."""
    run = subprocess.Popen(ar_in_llamacpp(tmp_path), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(tmp_path.glob("adhoc/*/records.jsonl")):
        time.sleep(0.5)  # the first record: the server answered and decoding runs
    assert servers(), "no llama-server was running"
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("specbench: interrupted")
    time.sleep(1)
    assert not servers()


def test_a_killed_specbench_takes_its_servers_with_it(tmp_path: Path) -> None:
    """SIGKILL runs no cleanup; the servers die with their parent (PR_SET_PDEATHSIG)."""
    run = subprocess.Popen(
        ar_in_llamacpp(tmp_path), stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not servers():
        time.sleep(0.5)
    assert servers(), "no llama-server was started"
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and servers():
        time.sleep(0.5)
    assert not servers()
