"""The compiled engine: the same logits as the eager engine through every cache move decoding
makes, the same exactness (compiled SpS, DFlash and EAGLE-3 token-identical to the compiled
baseline), and its compile time in env.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import builtin, compose_cfg
from specbench.models.compiled import CompiledCausalLM, static_length
from specbench.pipeline import execute, prepare

# graphs compiled for each cell: minutes in all, so in `make test-slow` (CI runs both)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair():
    """The tiny target eager, and the same weights compiled on a 192-position static cache and
    warmed up, as a run uses it (only the guards that choose among its graphs then run)."""
    eager = builtin("tiny")
    compiled = CompiledCausalLM.from_eager(builtin("tiny"), 192)
    compiled.warm_up()
    return eager, compiled


def test_logits_match_eager_through_prefill_steps_rollback_and_reset(pair) -> None:
    """Every move of a decoding loop: a prompt (eager path), single tokens and a verify block
    (the compiled graphs), a rollback then new tokens over the stale slots, a new sequence
    over the old one's slots."""
    moves = [
        ("prefill", list(range(40, 140))),
        ("feed", [7]),
        ("feed", [8, 9, 10, 11, 12]),
        ("rollback", 3),
        ("feed", [13, 14]),
        ("feed", [15]),
        ("prefill", list(range(300, 350))),
        ("feed", [16, 17, 18]),
        ("rollback", 1),
        ("feed", [19]),
    ]
    for lm in pair:
        lm.trace = []
        for move, arg in moves:
            if move == "prefill":
                lm.trace.append(lm.prefill(arg))
            elif move == "rollback":
                lm.rollback(lm.length - arg)
            else:
                lm.trace.append(lm.forward_tokens(arg))
    eager, compiled = pair
    assert eager.length == compiled.length == 53
    for got, want in zip(compiled.trace, eager.trace, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)


def test_a_sequence_longer_than_the_static_cache_is_refused(pair) -> None:
    compiled = pair[1]
    compiled.prefill(list(range(190)))
    with pytest.raises(ValueError, match="exceed the static cache of 192"):
        compiled.forward_tokens([1, 2, 3])


def test_static_caches_are_sized_in_whole_blocks() -> None:
    assert [static_length(n) for n in (1, 64, 65, 300)] == [64, 64, 128, 320]


def run_records(cell: list[str], engine: str, results: Path) -> tuple[dict, list[dict], dict]:
    """The cell's summary, records and env.json under `engine`: 3 tiny_code prompts x 40, one
    warm-up decode (where a compiled diffusion model builds its graphs)."""
    cfg = compose_cfg(
        *cell,
        "run.warmup=1",
        "task=tiny_code",
        "run.limit=3",
        "run.max_new_tokens=40",
        f"run.engine={engine}",
        f"run.results_dir={results}",
    )
    plan = prepare(cfg)
    summary = execute(plan)
    run_dir = plan.store.run_dir
    records = [json.loads(line) for line in (run_dir / "records.jsonl").open()]
    return summary, records, json.loads((run_dir / "env.json").read_text())


@pytest.mark.parametrize(
    "cell",
    [
        ["method=sps", "drafter=tiny-ar", "method.tree=dynamic", "method.budget=12"],
        ["method=dflash", "drafter=tiny-dflash"],
        ["method=ddtree", "drafter=tiny-dflash", "method.budget=24"],
    ],
    ids=["sps-tree-and-chain", "dflash", "ddtree"],
)
def test_compiled_speculation_is_exact_and_drafts_as_eager_does(cell: list[str], tmp_path) -> None:
    """SpS's tree and its chain arm with a compiled drafter, DFlash with its compiled drafter
    loop reading the compiled target's hidden states: every sample of every arm equal to the
    compiled target's own decoding, and every round accepting what the eager engine's round
    accepts (the same drafts: a wrong cache, mask or captured layer in the compiled drafter
    changes them, never the output)."""
    summary, records, env = run_records(cell, "compiled", tmp_path / "compiled")
    assert summary.n_samples == 3 and summary.base.identical_rate == 1.0
    assert all(arm.identical_rate == 1.0 for arm in summary.vs.values())
    for record in records:
        assert record["method"]["output_ids"] == record["baseline"]["output_ids"]
    _, eager, _ = run_records(cell, "eager", tmp_path / "eager")
    for got, want in zip(records, eager, strict=True):
        assert got["method"]["output_ids"] == want["method"]["output_ids"]
        assert got["accepted_per_round"] == want["accepted_per_round"]
    assert sum(sum(r["accepted_per_round"]) for r in records) > 0  # the drafts were used
    engine = env["engine"]
    assert engine["name"] == "compiled"
    assert engine["target"]["static_cache"] == static_length(128 + 40)
    assert engine["target"]["compile_s"] > 0 and engine["drafter"]["compile_s"] > 0


def test_compiled_eagle3_verifies_on_the_compiled_target_with_its_drafter_eager(tmp_path):
    """EAGLE-3's tree and its chain arm on the compiled target, which captures the layers the
    eager drafter reads: every arm token-identical to the compiled target's decoding, every
    round accepting what the eager engine's accepts (a wrong captured layer changes the drafts),
    the static cache holding a whole tree at the generation's end, and env.json saying the
    drafter ran eager."""
    cell = ["method=eagle3", "drafter=tiny-eagle3"]
    summary, records, env = run_records(cell, "compiled", tmp_path / "compiled")
    assert summary.base.identical_rate == 1.0 and summary.vs["chain"].identical_rate == 1.0
    _, eager, _ = run_records(cell, "eager", tmp_path / "eager")
    for got, want in zip(records, eager, strict=True):
        assert got["method"]["output_ids"] == want["method"]["output_ids"]
        assert got["accepted_per_round"] == want["accepted_per_round"]
    assert sum(sum(r["accepted_per_round"]) for r in records) > 0
    assert env["engine"]["drafter"] == "eager" and env["engine"]["target"]["compile_s"] > 0
    # room for the last round's 59 tree nodes past the longest sequence (128 + 40)
    assert env["engine"]["target"]["static_cache"] == static_length(128 + 40 + 59)


DLM = ["target=tiny-dlm", "drafter=none", "method.prefix_cache=true"]


@pytest.mark.parametrize(
    "cell",
    [
        ["method=specdiff", "drafter=tiny-dlm"],
        ["method=failfast", "drafter=tiny-dlm"],
        [*DLM, "method=dllm", "method.policy=threshold", "method.threshold=0.5"],
        [*DLM, "method=psd", "method.policy=quota", "method.depth=3"],
        [*DLM, "method=spiffy", "method.nodes=5", "method.calibration_samples=3"],
    ],
    ids=["specdiff", "failfast", "dllm", "psd", "spiffy"],
)
def test_compiled_diffusion_decodes_as_eager_does(cell: list[str], tmp_path) -> None:
    """A diffusion drafter or decoded model with its transformer compiled (symbolic shapes):
    a lossless method stays token-identical to its compiled baseline, and every method emits
    what the eager engine emits and accepts the drafts the eager engine accepts."""
    summary, records, env = run_records(cell, "compiled", tmp_path / "compiled")
    _, eager, _ = run_records(cell, "eager", tmp_path / "eager")
    if summary.lossless:
        assert summary.base.identical_rate == 1.0
    for got, want in zip(records, eager, strict=True):
        assert got["method"]["output_ids"] == want["method"]["output_ids"]
        assert got["method"]["emitted_per_call"] == want["method"]["emitted_per_call"]
        assert got["accepted_per_round"] == want["accepted_per_round"]
    compiled_model = env["engine"]["drafter" if "drafter=tiny-dlm" in cell else "target"]
    assert compiled_model == {"dynamic_shapes": ["hidden_states"]}
    assert env["warm_up_s"] > 0
