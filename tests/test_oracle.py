"""The ceiling (`run.oracle`): every draft-verify method's own decoder drafting the target's own
continuation, beside it on every sample. Each of its rounds accepts its whole draft unless the
generation budget or a stop cuts it; its tokens are the baseline's; each summary carries the
method's fraction of it; and configs with nothing to replace are refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from scipy.stats import chisquare

from conftest import compose_cfg
from specbench.decoding.drafters.diffuspec.config import DiffuSpecConfig
from specbench.decoding.drafters.diffuspec.method import AdaptiveDraftLength
from specbench.decoding.generation import Draft
from specbench.decoding.speculative import OracleDrafter
from specbench.errors import ConfigError
from specbench.pipeline import execute, prepare
from specbench.runs.store import load_records

# (cell, tokens a full round emits: its draft's depth + the bonus)
CELLS = {
    "sps": (["method=sps", "drafter=tiny-ar", "method.gamma=4"], 5),
    "sps-tree": (["method=sps", "drafter=tiny-ar", "method.tree=dynamic", "method.gamma=3"], 4),
    "dflash": (["method=dflash", "drafter=tiny-dflash", "method.block_size=8"], 8),
    "ddtree": (["method=ddtree", "drafter=tiny-dflash", "method.block_size=6"], 6),
    "specdiff": (["method=specdiff", "drafter=tiny-dlm", "method.gamma=5"], 6),
    "diffuspec": (["method=diffuspec", "drafter=tiny-dlm", "method.adl=false", "method.k=7"], 8),
}
# DiffuSpec's adaptive length (k_max 30, then its EMA of what a round generated): every round
# still accepts its whole draft, of whatever length the schedule chose
ADAPTIVE = ["method=diffuspec", "drafter=tiny-dlm", "method.adl=true"]


@pytest.mark.parametrize("name", CELLS)
def test_the_oracle_accepts_every_draft_in_the_methods_own_shape(name: str, tmp_path: Path) -> None:
    cell, full = CELLS[name]
    cfg = compose_cfg(
        *cell,
        "task=tiny_code",
        "run.limit=2",
        "run.max_new_tokens=33",
        "run.oracle=true",
        f"run.results_dir={tmp_path}",
    )
    plan = prepare(cfg)
    summary = execute(plan)
    records = load_records(plan.store.run_dir / "records.jsonl", plan.run_id)
    for r in records:
        oracle = r.references["oracle"]
        assert oracle.output_ids == r.baseline.output_ids
        rounds = oracle.emitted_per_call
        assert rounds[:-1] == [full] * (len(rounds) - 1), rounds  # only the last round is cut
        assert sum(rounds) == len(oracle.output_ids)
    assert summary.ceiling_fraction == pytest.approx(summary.vs["oracle"].speedup)
    assert 0 < summary.ceiling_fraction < 1  # a real drafter is slower than a perfect one


@pytest.mark.parametrize(
    "overrides, why",
    [
        (["method=ar"], "method ar has no drafts to replace"),
        (["method=sps", "drafter=tiny-ar", "run.baseline=false"], "needs run.baseline=true"),
        (["method=sps", "drafter=tiny-ar", "run.temperature=0.7"], "needs run.temperature=0"),
    ],
)
def test_a_ceiling_without_drafts_a_baseline_or_greedy_decoding_is_refused(
    overrides: list[str], why: str, tmp_path: Path
) -> None:
    cfg = compose_cfg(*overrides, "run.oracle=true", f"run.results_dir={tmp_path}")
    with pytest.raises(ConfigError, match="run.oracle") as err:
        prepare(cfg)
    assert why in str(err.value) and "\n" not in str(err.value)


def test_a_simulated_length_is_accepted_on_every_round_and_the_output_stays_the_targets(
    tmp_path: Path,
) -> None:
    cfg = compose_cfg(
        "method=sps",
        "drafter=tiny-ar",
        "method.gamma=4",
        "task=tiny_code",
        "run.limit=2",
        "run.max_new_tokens=33",
        "run.oracle=true",
        "run.simulated_acceptance=2",
        f"run.results_dir={tmp_path}",
    )
    plan = prepare(cfg)
    execute(plan)
    for r in load_records(plan.store.run_dir / "records.jsonl", plan.run_id):
        oracle = r.references["oracle"]
        assert oracle.output_ids == r.baseline.output_ids
        assert oracle.emitted_per_call[:-1] == [3] * (len(oracle.emitted_per_call) - 1)


def test_a_simulated_rate_accepts_geometric_runs() -> None:
    """Accepted lengths of drafts of 4 at rate 0.6: P(k) = 0.6^k 0.4 for k < 4, P(4) = 0.6^4
    (chi-square over 20000 seeded rounds)."""
    drafter = OracleDrafter(as_tree=False, vocab_size=100, simulated=0.6)
    drafter.rng.seed(7)
    counts = [0] * 5
    for _ in range(20_000):
        counts[drafter.right(4)] += 1
    expected = [20_000 * 0.6**k * 0.4 for k in range(4)] + [20_000 * 0.6**4]
    assert chisquare(counts, expected).pvalue > 0.01
    drafter.script = [5, 6, 7, 8, 9, 10]
    draft = drafter.draft([5, 6], 4, None)
    right = next((i for i, (a, b) in enumerate(zip(draft.tokens, [7, 8, 9, 10])) if a != b), 4)
    assert draft.tokens[:right] == [7, 8, 9, 10][:right] and len(draft.tokens) == 4


@pytest.mark.parametrize(
    "overrides, key, why",
    [
        (["run.simulated_acceptance=2"], "run.simulated_acceptance", "set run.oracle=true"),
        (
            ["run.oracle=true", "run.simulated_acceptance=2.5"],
            "run.simulated_acceptance",
            "integer",
        ),
    ],
)
def test_a_simulated_acceptance_without_an_oracle_or_of_half_a_token_is_refused(
    overrides: list[str], key: str, why: str, tmp_path: Path
) -> None:
    cfg = compose_cfg("method=sps", "drafter=tiny-ar", *overrides, f"run.results_dir={tmp_path}")
    with pytest.raises(ConfigError, match=key) as err:
        prepare(cfg)
    assert why in str(err.value)


def test_the_oracle_under_an_adaptive_draft_length_accepts_every_draft(tmp_path: Path) -> None:
    cfg = compose_cfg(
        *ADAPTIVE,
        "task=tiny_code",
        "run.limit=1",
        "run.max_new_tokens=100",
        "run.oracle=true",
        f"run.results_dir={tmp_path}",
    )
    plan = prepare(cfg)
    execute(plan)
    [r] = load_records(plan.store.run_dir / "records.jsonl", plan.run_id)
    oracle = r.references["oracle"]
    assert oracle.output_ids == r.baseline.output_ids
    # every draft is accepted whole: ADL's lengths as they run when every round generates and
    # accepts its k tokens (k_max = 30 first), each round emitting k + 1
    cfg = DiffuSpecConfig()
    adl = AdaptiveDraftLength(cfg.k_min, cfg.k_max, cfg.delta, cfg.rho)
    ks = [adl.start]
    while sum(k + 1 for k in ks) < 100:
        k = ks[-1]
        ks.append(adl.next(k, k, Draft([0] * k, None, 0, 0.0, info={"L_gen": k})))
    rounds = oracle.emitted_per_call
    assert len(rounds) >= 3 and rounds[:-1] == [k + 1 for k in ks[: len(rounds) - 1]], rounds
