"""Summary metrics from a hand-written records file equal values computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbench.metrics.summary import first_divergence, summarize
from specbench.results.store import read_records

RECORDS = [
    # 6 tokens from 3 rounds that drafted 4, 4, 1 tokens and kept 2, 0, 1 of them
    {
        "id": "a",
        "new_tokens": 6,
        "wall_s": 2.0,
        "ttft_s": 0.5,
        "decode_s": 1.5,
        "target_calls": 3,
        "drafter_calls": 9,
        "draft_tokens": 9,
        "accepted_tokens": 3,
        "draft_lengths": [4, 4, 1],
        "accepted_per_round": [2, 0, 1],
        "accept_lengths": [3, 1, 2],
        "quality": {"rouge1": 0.5},
        "first_divergence": None,
        "baseline": {"new_tokens": 6, "wall_s": 3.0, "target_calls": 6, "quality": {"rouge1": 0.5}},
    },
    {
        "id": "b",
        "new_tokens": 4,
        "wall_s": 1.0,
        "ttft_s": 0.3,
        "decode_s": 0.7,
        "target_calls": 2,
        "drafter_calls": 6,
        "draft_tokens": 6,
        "accepted_tokens": 2,
        "draft_lengths": [4, 2],
        "accepted_per_round": [1, 1],
        "accept_lengths": [2, 2],
        "quality": {"rouge1": 0.25},
        "first_divergence": 2,
        "baseline": {
            "new_tokens": 4,
            "wall_s": 2.0,
            "target_calls": 4,
            "quality": {"rouge1": 0.75},
        },
    },
]


@pytest.fixture
def records(tmp_path: Path) -> list[dict]:
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return read_records(path)


def test_summary_equals_hand_computed_values(records: list[dict]) -> None:
    s = summarize(records, greedy=True)
    assert s["n_samples"] == 2 and s["new_tokens"] == 10
    assert s["tok_s"] == pytest.approx(10 / 3.0)
    assert s["baseline_tok_s"] == pytest.approx(10 / 5.0)
    assert s["speedup"] == pytest.approx((10 / 3.0) / (10 / 5.0))
    assert s["speedup_mean_ratio"] == pytest.approx(((6 / 2) / (6 / 3) + (4 / 1) / (4 / 2)) / 2)
    assert s["tau"] == pytest.approx(10 / 5)
    assert s["acceptance_rate"] == pytest.approx(5 / 15)
    assert s["accept_hist"] == {"1": 1, "2": 3, "3": 1}
    # position 1: reached in all 5 rounds, kept in 4 (2,1,1,1 accepted >= 1 -> rounds a1, a3, b1, b2)
    # position 2: reached where drafted >= 2 and accepted >= 1: a1, b1, b2 -> kept only in a1
    # position 3: reached in a1 (accepted 2, drafted 4) -> not kept
    assert s["accept_by_position"] == pytest.approx([4 / 5, 1 / 3, 0.0])
    assert s["nfe_target"] == pytest.approx(2.5) and s["nfe_drafter"] == pytest.approx(7.5)
    assert s["tpf"] == pytest.approx(10 / 20)
    assert s["ttft_ms"] == pytest.approx(400.0)
    assert s["tpot_ms"] == pytest.approx(1000 * 2.2 / 8)
    assert s["lossless_rate"] == pytest.approx(0.5)
    assert s["quality"] == {"rouge1": pytest.approx(0.375)}
    assert s["baseline_quality"] == {"rouge1": pytest.approx(0.625)}
    assert (s["n_rounds"], s["draft_tokens"]) == (5, 15)
    assert s["baseline_nfe"] == pytest.approx(5.0) and s["baseline_tpf"] == pytest.approx(1.0)


def test_sampled_runs_report_no_token_level_lossless_rate(records: list[dict]) -> None:
    assert summarize(records, greedy=False)["lossless_rate"] is None


def test_without_baseline_there_is_no_speedup(records: list[dict]) -> None:
    for r in records:
        r["baseline"] = None
    assert "speedup" not in summarize(records, greedy=True)


def test_first_divergence() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def test_the_cost_model_predicts_from_acceptance_and_forward_costs() -> None:
    from specbench.metrics.cost import predict_speculative, verdict

    # gamma 3, alpha 0.8, 0.5, 0.5: E = 1 + 0.8 + 0.4 + 0.2 = 2.4 tokens per round; a round costs
    # 3 drafter calls of 1 ms and a 4-token verification of 6 ms; plain decoding 5 ms per token
    costs = {"target_1": 5.0, "target_4": 6.0, "drafter_call": 1.0}
    predicted = predict_speculative([0.8, 0.5, 0.5], 3, costs, 3)
    assert predicted == pytest.approx(2.4 * 5.0 / (3 * 1.0 + 6.0))
    assert verdict(predicted, predicted * 1.05)["prediction_flag"] is False
    assert verdict(predicted, predicted * 0.85)["prediction_gap"] == pytest.approx(-0.15)
    assert verdict(predicted, predicted * 0.85)["prediction_flag"] is True
