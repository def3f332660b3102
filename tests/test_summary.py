"""Summary metrics from a hand-written records file equal values computed by hand."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from specbench import paths
from specbench.metrics.summary import (
    accepted_at_position,
    accepted_hist,
    first_divergence,
    summarize,
)
from specbench.runs import console
from specbench.runs.acceptance import Acceptance
from specbench.runs.record import Record, tie_tolerance
from specbench.runs.store import read_records
from specbench.runs.summary import Metrics, Summary


def arm(
    tokens: int, wall: float, ttft: float, calls: int, emitted: list[int], rouge: float
) -> dict:
    return {
        "output_ids": list(range(tokens)),
        "wall_s": wall,
        "ttft_s": ttft,
        "target_calls": calls,
        "target_positions": 2 * calls,
        "emitted_per_call": emitted,
        "text": "",
        "quality": {"rouge1": rouge},
    }


RECORDS = [
    # 6 tokens from 3 rounds that drafted 4, 4, 1 tokens and kept 2, 0, 1 of them
    {
        "id": "a",
        "meta": {},
        "prompt_tokens": 5,
        "method": arm(6, 2.0, 0.5, 3, [3, 1, 2], 0.5),
        "drafter_calls": 9,
        "drafted_per_round": [4, 4, 1],
        "accepted_per_round": [2, 0, 1],
        "baseline": arm(6, 3.0, 0.5, 6, [1] * 6, 0.5),
        "references": {"one_token_per_step": arm(6, 6.0, 0.5, 6, [1] * 6, 0.25)},
    },
    {
        "id": "b",
        "meta": {},
        "prompt_tokens": 5,
        "method": {**arm(4, 1.0, 0.3, 2, [2, 2], 0.25), "output_ids": [0, 1, 7, 3]},
        "drafter_calls": 6,
        "drafted_per_round": [4, 2],
        "accepted_per_round": [1, 1],
        "baseline": arm(4, 2.0, 0.3, 4, [1] * 4, 0.75),
        "references": {"one_token_per_step": arm(4, 8.0, 0.3, 8, [1] * 4, 0.5)},
        "first_divergence": 2,
        "divergence_gap": 1e-7,
        "tie_flip": True,
    },
]


@pytest.fixture
def records(tmp_path: Path) -> list[Record]:
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return [Record.from_json(r) for r in read_records(path)]


def test_summary_equals_hand_computed_values(records: list[Record]) -> None:
    s = summarize(records, greedy=True, round_unit="tokens")
    assert s.n_samples == 2 and s.new_tokens == 10
    assert s.tok_s == pytest.approx(10 / 3.0)
    assert s.base.tok_s == pytest.approx(10 / 5.0)
    assert s.base.speedup == pytest.approx((10 / 3.0) / (10 / 5.0))
    # Spec-Bench's speed.py: mean per-sample speed (3, 4) over the baseline's (2, 2)
    assert s.base.speedup_specbench == pytest.approx(3.5 / 2.0)
    # dflash's benchmark: mean per-sample (wall - ttft) / tokens, baseline's over the method's
    method_tpot = ((2.0 - 0.5) / 6 + (1.0 - 0.3) / 4) / 2
    assert s.base.speedup_dflash == pytest.approx(
        ((3.0 - 0.5) / 6 + (2.0 - 0.3) / 4) / 2 / method_tpot
    )
    assert s.tau == pytest.approx(10 / 5)
    assert s.acceptance_rate == pytest.approx(5 / 15)
    assert s.emitted_hist == {"1": 1, "2": 3, "3": 1}
    # position 1: reached in all 5 rounds, kept in 4 (2,1,1,1 accepted >= 1 -> rounds a1, a3, b1, b2)
    # position 2: reached where drafted >= 2 and accepted >= 1: a1, b1, b2 -> kept only in a1
    # position 3: reached in a1 (accepted 2, drafted 4) -> not kept
    assert s.accept_by_position == pytest.approx([4 / 5, 1 / 3, 0.0])
    # rounds (drafted, accepted): a (4,2) (4,0) (1,1), b (4,1) (2,1); bins 0..4 (the longest draft)
    assert s.accepted_hist == {"0": 1, "1": 3, "2": 1, "3": 0, "4": 0}
    # vLLM's per-position rate: over all 5 drafting rounds, not over those that reached i
    assert s.accepted_at_position == pytest.approx([4 / 5, 1 / 5, 0.0, 0.0])
    assert 1 + sum(s.accepted_at_position) == pytest.approx(1 + s.accepted / s.n_rounds)
    assert s.nfe_target == pytest.approx(2.5) and s.nfe_drafter == pytest.approx(7.5)
    assert s.tpf == pytest.approx(10 / 20)
    assert s.positions_per_call == pytest.approx(2.0)
    assert s.ttft_ms == pytest.approx(400.0)
    assert s.tpot_ms == pytest.approx(1000 * 2.2 / 8)
    assert s.base.identical_rate == pytest.approx(0.5)
    assert s.base.tie_flip_rate == pytest.approx(0.5)
    assert s.quality == {"rouge1": pytest.approx(0.375)}
    assert s.base.quality == {"rouge1": pytest.approx(0.625)}
    assert (s.n_rounds, s.drafted, s.accepted) == (5, 15, 5)
    assert s.base.nfe == pytest.approx(5.0) and s.base.tpf == pytest.approx(1.0)
    assert s.base.nfe_reduction == pytest.approx(5.0 / 2.5)
    ref = s.vs["one_token_per_step"]
    assert ref.speedup == pytest.approx((10 / 3.0) / (10 / 14.0))
    assert ref.speedup_specbench == pytest.approx(3.5 / ((1.0 + 0.5) / 2))
    assert ref.speedup_dflash == pytest.approx(
        ((6.0 - 0.5) / 6 + (8.0 - 0.3) / 4) / 2 / method_tpot
    )
    assert ref.nfe_reduction == pytest.approx(7.0 / 2.5) and ref.tpf == pytest.approx(10 / 14)
    assert ref.quality == {"rouge1": pytest.approx(0.375)}
    assert ref.identical_rate == pytest.approx(0.5)


def test_acceptance_is_reported_only_for_drafted_tokens(records: list[Record]) -> None:
    steps = summarize(records, greedy=True, round_unit="steps")
    assert steps.round_unit == "steps" and steps.accepted_per_round == pytest.approx(1.0)
    assert steps.acceptance_rate is None and steps.accept_by_position is None
    assert steps.accepted_at_position is None and steps.accepted_hist["1"] == 3


def test_sampled_runs_report_no_token_level_lossless_rate(records: list[Record]) -> None:
    s = summarize(records, greedy=False)
    assert s.base.identical_rate is None and s.base.tie_flip_rate is None


def test_an_unmeasured_divergence_leaves_the_tie_flip_rate_unknown(records: list[Record]) -> None:
    """A diffusion LLM's decoder has no top-2 logits to read: its divergences are not ties."""
    diverged = next(r for r in records if r.first_divergence is not None)
    diverged.tie_flip = None
    assert summarize(records, greedy=True).base.tie_flip_rate is None
    diverged.tie_flip = False
    assert summarize(records, greedy=True).base.tie_flip_rate == pytest.approx(0.0)


def test_without_baseline_there_is_no_speedup(records: list[Record]) -> None:
    for r in records:
        r.baseline = None
    s = summarize(records, greedy=True)
    columns = s.columns()
    assert s.base is None and "baseline" not in s.vs
    assert columns["speedup"] is None and columns["baseline_tok_s"] is None
    assert columns["lossless_rate"] is None and Metrics.from_json(columns).base is None


def a_summary(records: list[Record]) -> Summary:
    for r, category in zip(records, ["qa", "math"]):
        r.meta["category"] = category
    return Summary.of(
        summarize(records, greedy=True, round_unit="tokens"),
        run_id="sps-tiny-tiny-ar-tiny_code-0123abcd",
        method="sps",
        label="sps γ4",
        target="tiny",
        drafter="tiny-ar",
        task="tiny_code",
        baseline="the target's autoregressive decoding",
        lossless=True,
        lossless_wrt="the target's autoregressive decoding",
        facts={"approximate_cache": False},
        env="fixture machine | config 0123abcd",
        forward_ms={"target_1": 5.0},
        predicted_speedup=1.5,
        prediction_gap=0.1,
        prediction_flag=False,
    )


def test_a_summary_reads_back_as_it_was_written(records: list[Record]) -> None:
    """Through JSON and back: the categories and reference arms typed, the method's facts at
    the top level of the file and back in `facts`."""
    summary = a_summary(records)
    row = json.loads(json.dumps(summary.to_json()))
    assert row["approximate_cache"] is False and "facts" not in row
    # the baseline's comparison as the flat columns the reports read, not a `vs` arm
    assert (row["speedup"], row["lossless_rate"]) == (summary.base.speedup, 0.5)
    assert row["baseline_quality"] == summary.base.quality and "baseline" not in row["vs"]
    assert Summary.from_json(row) == summary
    assert Summary.from_json(row).by_category["math"].n_samples == 1
    assert Summary.from_json(row).vs["one_token_per_step"].identical_rate == pytest.approx(0.5)


def kept(old: object, new: object) -> bool:
    """`new` holds every value of `old`; the keys only `new` has are null or empty."""
    if not isinstance(old, dict):
        return old == new
    return (
        isinstance(new, dict)
        and all(k in new and kept(v, new[k]) for k, v in old.items())
        and all(new[k] in (None, {}) for k in set(new) - set(old))
    )


def test_every_committed_summary_reads_back_unchanged() -> None:
    """The stored results the figures are built from keep every value through the typed
    summary; the metrics they predate come back null."""
    stored = sorted(paths.REPO_ROOT.glob("results/**/summary.json"))
    assert len(stored) > 50
    for path in stored:
        row = json.loads(path.read_text())
        read = json.loads(json.dumps(Summary.from_json(row).to_json()))
        assert read.pop("schema") == row.pop("schema", 1), path  # no `schema`: version 1
        assert kept(row, read), path


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda row: row.pop("run_id"), r"missing \['run_id'\]"),
        (lambda row: row["vs"]["one_token_per_step"].update(speed=1), r"unknown \['speed'\]"),
        (lambda row: row["by_category"]["qa"].update(drafts=1), r"unknown \['drafts'\]"),
    ],
)
def test_a_file_of_another_schema_is_refused_by_name(records, change, why) -> None:
    row = a_summary(records).to_json()
    change(row)
    with pytest.raises(ValueError, match=why):
        Summary.from_json(row)


def test_a_record_of_another_schema_is_refused_by_name() -> None:
    old = {**RECORDS[0], "draft_lengths": [4]}
    with pytest.raises(ValueError, match=r"unknown \['draft_lengths'\]"):
        Record.from_json(old)


def test_tie_tolerance_is_a_few_units_in_the_last_place() -> None:
    assert tie_tolerance(torch.float32, 10.0) == pytest.approx(4 * 2**-23 * 10)
    assert tie_tolerance(torch.bfloat16, 0.5) == pytest.approx(4 * 2**-7)
    # the flip: top-2 gap 2.4e-7 at a logit near 3 is a float32 tie, 1e-3 is not
    assert 2.4e-7 <= tie_tolerance(torch.float32, 3.0) < 1e-3


def test_first_divergence() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


def test_the_cost_model_predicts_from_acceptance_and_forward_costs() -> None:
    from specbench.decoding.cost import predict_speculative, verdict

    # gamma 3, alpha 0.8, 0.5, 0.5: E = 1 + 0.8 + 0.4 + 0.2 = 2.4 tokens per round; a round costs
    # 3 drafter calls of 1 ms and a 4-token verification of 6 ms; plain decoding 5 ms per token
    costs = {"target_1": 5.0, "target_4": 6.0, "drafter_call": 1.0}
    predicted = predict_speculative([0.8, 0.5, 0.5], 3, costs, 3)
    assert predicted == pytest.approx(2.4 * 5.0 / (3 * 1.0 + 6.0))
    assert verdict(predicted, predicted * 1.05)["prediction_flag"] is False
    assert verdict(predicted, predicted * 0.85)["prediction_gap"] == pytest.approx(-0.15)
    assert verdict(predicted, predicted * 0.85)["prediction_flag"] is True


def test_the_drafter_is_timed_on_contexts_a_decoding_could_reach() -> None:
    """A compiled engine's static cache holds the prompt and max_new_tokens: a timed draft of
    n tokens past the mean generation's end would overflow it (warm-up: tau 1, gamma 4)."""
    from specbench.decoding.cost import draft_contexts

    prompt, room = list(range(10)), 64
    for grow, n in [(1, 4), (3, 4), (2, 16), (5, 1)]:
        contexts = draft_contexts(prompt, room, grow, n)
        assert max(len(c) for c in contexts) + n <= len(prompt) + room
        assert len({len(c) for c in contexts}) > 1  # the context grows round by round
        assert all(c[: len(prompt)] == prompt for c in contexts)


def test_a_predicted_slowdown_says_what_the_forwards_cost_in_target_steps() -> None:
    from specbench.decoding.cost import why_slow

    verify = {"target_1": 27.6, "target_5": 85.6, "drafter_call": 1.8}
    assert why_slow(verify) == "verifying 5 tokens costs 3.1 target steps, a drafter call 0.07"
    rows = {"call_1_row": 25.0, "call_4_rows": 60.0}
    assert why_slow(rows) == "a call over 4 rows costs 2.4 one-row calls"


def test_rounds_that_drafted_nothing_are_in_the_histogram_not_in_vllms_rates() -> None:
    """DFlash's first round is the target's prefill alone (0 drafted): a round of the
    histogram's bin 0, but not a draft vLLM's per-position rate counts."""
    rounds = SimpleNamespace(drafted_per_round=[0, 3, 3, 2], accepted_per_round=[0, 3, 1, 0])
    assert accepted_at_position([rounds]) == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    assert accepted_hist([rounds]) == {"0": 2, "1": 1, "2": 0, "3": 1}


def test_console_and_report_render_one_acceptance_view() -> None:
    """Shares of rounds by units accepted (the console cuts the bins past the last reached,
    the report keeps them) and the per-position rates, from one view of the metrics."""
    metrics = Metrics(
        n_samples=1,
        round_unit="tokens",
        accepted_hist={"0": 1, "1": 3, "2": 1, "3": 0},
        accept_by_position=[0.8, 0.25],
    )
    view = Acceptance.of(metrics)
    assert view.shares == {0: 0.2, 1: 0.6, 2: 0.2, 3: 0.0} and view.rounds == 5
    assert view.reached == {0: 0.2, 1: 0.6, 2: 0.2}
    assert console._acceptance_line(metrics) == (
        "accepted per round: 0:20% 1:60% 2:20% | P(i accepted | reached): 0.80 0.25"
    )
