"""The per-sample record: the one owner of the schema that `records.jsonl`, the summary, W&B
and the tests read.

A record holds the method arm's decoding of one sample, the baseline arm's and any reference
arms' decodings of the same sample (same seed, same prompt), the method's per-round counters in
its own unit, and the losslessness check: the first index where the method's tokens leave the
baseline's and, there, the baseline target's top-2 logit gap, so a numerical tie flip can be
told from a real divergence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the run directory is opened and checked before torch is imported
    import torch

# part of every run's identity: records of another schema live in another run directory
SCHEMA = 2


TIE_ULPS = 4.0  # the largest top-2 logit gap, in units in the last place, that is a tie


def ulp(dtype: torch.dtype, top_logit: float) -> float:
    """One unit in the last place of the logits' dtype at the top logit's magnitude."""
    import torch

    return torch.finfo(dtype).eps * max(1.0, abs(top_logit))


def tie_tolerance(dtype: torch.dtype, top_logit: float) -> float:
    """The largest top-2 logit gap that counts as a tie: `TIE_ULPS` units in the last place.
    Two forwards of one prefix that differ only in shape (a gamma + 1-token verification
    against a one-token step, a batch of drafts against one row, another engine's kernels)
    accumulate their sums in another order and differ by a few such units, so a gap below this
    can flip either way; a divergence above it is not rounding."""
    return TIE_ULPS * ulp(dtype, top_logit)


@dataclass
class Arm:
    """One arm's decoding of one sample, every turn of it."""

    output_ids: list[int]
    wall_s: float
    ttft_s: float
    target_calls: int
    target_positions: int  # token positions the target's forwards read (rows x length)
    emitted_per_call: list[int]  # tokens each target forward committed
    text: str | list[str]  # the scored answer (one per turn)
    quality: dict[str, float]
    # Unix time the first turn was sent: with requests in flight together (run.concurrency)
    # throughput needs when each ran, not only how long (None in records written before it)
    started_s: float | None = None
    # the target's top-2 logit gap before each output token, in `ulp`s, measured by specbench's
    # engine (cells on another backend, greedy): where specbench's own tokens leave these,
    # whether that was a tie (report/agreement.py); None elsewhere
    top2_ulps: list[float] | None = None

    @property
    def new_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def tok_s(self) -> float:
        return self.new_tokens / self.wall_s

    @property
    def decode_s(self) -> float:
        """Wall time after the first token."""
        return self.wall_s - self.ttft_s


def key_of(row: dict[str, Any]) -> tuple[str, int]:
    """A stored record's key, read from its JSON row: its sample id and its trial."""
    return row["id"], row.get("trial", 0)


@dataclass
class Record:
    id: str
    meta: dict[str, Any]
    prompt_tokens: int
    method: Arm
    drafter_calls: int = 0
    draft_s: float = 0.0  # time inside the drafter
    verify_s: float = 0.0  # time in separately timed verification forwards (Spiffy)
    # per round, in the method's round unit (the summary's `round_unit`)
    drafted_per_round: list[int] = field(default_factory=list)
    accepted_per_round: list[int] = field(default_factory=list)
    nodes_per_round: list[int] = field(default_factory=list)  # tree drafts: nodes verified
    rounds: list[dict] = field(default_factory=list)  # per-round facts a drafter reports
    exact: bool = True  # the method's claim for this config, with respect to the baseline arm
    facts: dict[str, Any] = field(default_factory=dict)  # `Method.facts` of this config
    baseline: Arm | None = None
    references: dict[str, Arm] = field(default_factory=dict)
    first_divergence: int | None = None  # first index where method and baseline tokens differ
    divergence_gap: float | None = None  # the baseline target's top-2 logit gap there
    tie_flip: bool | None = None  # whether that gap is within `tie_tolerance`
    # which decoding of the whole sample set this is (`run.repeats`): a record is keyed by
    # (sample, trial), so a resumed run neither redoes nor repeats a trial's sample
    trial: int = 0

    @property
    def key(self) -> tuple[str, int]:
        """What `records.jsonl` is keyed by: as `key_of` reads it from the stored row."""
        return self.id, self.trial

    def to_json(self) -> dict[str, Any]:
        """The record as `records.jsonl` holds it; trial 0 is left out, so a run of one trial
        writes the records it wrote before trials existed."""
        row = asdict(self)
        if not self.trial:
            del row["trial"]
        return row

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> Record:
        """A record read back; a row of another schema raises ValueError naming the keys."""
        names = {f.name for f in fields(cls)}
        if set(row) - names or {"id", "method"} - set(row):
            extra, missing = sorted(set(row) - names), sorted({"id", "method"} - set(row))
            raise ValueError(
                f"not a schema-{SCHEMA} specbench record (unknown {extra}, missing {missing})"
            )
        arms = {
            "method": Arm(**row["method"]),
            "baseline": Arm(**row["baseline"]) if row.get("baseline") else None,
            "references": {k: Arm(**v) for k, v in row.get("references", {}).items()},
        }
        return cls(**{**row, **arms})
