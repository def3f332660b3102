"""A run's records: the losslessness check separates a tie flip from a real divergence by the
baseline target's own top-2 logit gap where the outputs part."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from conftest import builtin, compose_cfg
from specbench.backends.specbench.backend import Specbench
from specbench.pipeline import execute, prepare
from specbench.runs.record import tie_tolerance, ulp


def test_a_divergence_carries_the_baseline_targets_top2_gap_there(tmp_path) -> None:
    """SpS with top-3 acceptance (lossy) leaves the target's greedy output; each record names
    where, the gap a fresh forward of the baseline's prefix gives there, and whether that gap
    is a tie (it is not: random-gpt2's top-2 logits are far apart at these points)."""
    cfg = compose_cfg(
        "target=random-gpt2",
        "drafter=random-gpt2-draft",
        "task=prompts",
        "method.rule=topk",
        "method.leniency=3",
        "run.limit=4",
        "run.max_new_tokens=24",
        f"run.results_dir={tmp_path}",
    )
    plan = prepare(cfg)
    summary = execute(plan)
    assert not summary.lossless and summary.lossless_wrt is None
    diverged = [r for r in plan.store.records if r.first_divergence is not None]
    assert diverged and summary.base.identical_rate == 1 - len(diverged) / 4
    target = builtin("random-gpt2")
    for r in diverged:
        prefix = plan.prompt_ids[r.id] + r.baseline.output_ids[: r.first_divergence]
        top = target.prefill(prefix).topk(2).values
        assert r.baseline.output_ids[r.first_divergence] == int(target.prefill(prefix).argmax())
        assert r.divergence_gap == pytest.approx(float(top[0] - top[1]), abs=1e-4)  # fp64 copy
        assert r.tie_flip is (r.divergence_gap <= tie_tolerance(torch.float32, float(top[0])))
    assert summary.base.tie_flip_rate == sum(bool(r.tie_flip) for r in diverged) / 4


def test_cells_of_another_backend_record_the_targets_top2_gap_before_every_token(
    tmp_path, monkeypatch
) -> None:
    """The arms vLLM decodes carry the target's top-2 gap in ulps before each output token,
    from one forward of the whole output, so that a later difference from specbench's tokens
    finds its gap: each equals a fresh forward of that prefix's (here specbench's arms stand in
    for vLLM's, with the same flag)."""
    build = Specbench.arms

    def flagged(*args, **kwargs):
        target, arms, engine = build(*args, **kwargs)
        return target, replace(arms, measure_ties=True), engine

    monkeypatch.setattr(Specbench, "arms", flagged)
    cfg = compose_cfg(
        "target=random-gpt2",
        "drafter=random-gpt2-draft",
        "task=prompts",
        "run.limit=2",
        "run.max_new_tokens=12",
        f"run.results_dir={tmp_path}",
    )
    plan = prepare(cfg)
    execute(plan)
    target = builtin("random-gpt2")
    for r in plan.store.records:
        for arm in (r.method, r.baseline):
            assert len(arm.top2_ulps) == len(arm.output_ids)
            for i in range(len(arm.output_ids)):
                first, second = (
                    target.prefill(plan.prompt_ids[r.id] + arm.output_ids[:i]).topk(2).values
                )
                gap = float(first - second) / ulp(torch.float32, float(first))
                assert arm.top2_ulps[i] == pytest.approx(gap, rel=1e-3, abs=0.05)
