"""The run summary: the one owner of `summary.json`'s schema, which the console, W&B, the
reports and a rerun's skip read, as `Record` owns the records' (the metrics' definitions are
in `specbench.metrics.summary`, which computes them).

A summary is the cell's identity (run id, method, its label, models, task, what losslessness is
with respect to), the method's facts of this config, the run-level metrics of its records (also
per category), the method against every other arm (a `Versus` each: the baseline's under
`BASELINE`, and every reference arm), the cost model's prediction, and the machine. On disk it
is one flat JSON object made by `Metrics.columns`, the one place the flat names are made: the
baseline's comparison under the names the console, the leaderboards and W&B read (`speedup`,
`lossless_rate`, `baseline_tok_s`, ...: `BASELINE_COLUMNS`), the other arms under `vs`, the
method's facts at the top level (they are report columns, as config keys are). A metric the run
has no value for is null: acceptance of drafted tokens where rounds count steps, the baseline's
numbers without a baseline arm, a prediction without a cost model, a metric added after the
file was written; the categories are empty where the task has none.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from types import UnionType
from typing import Any, get_args, get_origin, get_type_hints


@dataclass(kw_only=True)
class Versus:
    """The method arm against another arm on the same samples: that arm's speed and cost, and
    the method's ratios to it."""

    tok_s: float | None
    nfe: float
    tpf: float | None
    positions_per_call: float | None
    quality: dict[str, float]
    speedup: float | None  # pooled tokens over pooled seconds, the method's over this arm's
    speedup_specbench: float | None  # Spec-Bench's mean per-sample speed ratio
    speedup_dflash: float | None = None  # the dflash benchmark's decode-time ratio
    # tokens over the seconds any request was in flight (`throughput_tok_s`), and the ratio
    throughput_tok_s: float | None = None
    throughput_speedup: float | None = None
    nfe_reduction: float | None
    identical_rate: float | None  # token equality with this arm; greedy runs only
    # the share of samples diverging from this arm at a measured tie of its top-2 logits
    tie_flip_rate: float | None = None


BASELINE = "baseline"  # the `vs` arm of the target's own decoding (`run.baseline`)
# the baseline's comparison as flat columns: the names summary.json, the console, the
# leaderboards and W&B know the headline by (null where the cell ran no baseline arm)
BASELINE_COLUMNS = {
    "tok_s": "baseline_tok_s",
    "speedup": "speedup",
    "throughput_tok_s": "baseline_throughput_tok_s",
    "throughput_speedup": "throughput_speedup",
    "speedup_specbench": "speedup_specbench",
    "speedup_dflash": "speedup_dflash",
    "quality": "baseline_quality",
    "nfe": "baseline_nfe",
    "tpf": "baseline_tpf",
    "positions_per_call": "baseline_positions_per_call",
    "nfe_reduction": "nfe_reduction",
    "identical_rate": "lossless_rate",
    "tie_flip_rate": "tie_flip_rate",
}


@dataclass(kw_only=True)
class Metrics:
    """Run-level metrics of a set of records: the cell's, or one category's. Per-round counts
    are in `round_unit`; `acceptance_rate` and `accept_by_position` exist where it is tokens."""

    n_samples: int
    new_tokens: int = 0
    tok_s: float | None = None
    tau: float | None = None  # tokens per target forward
    emitted_hist: dict[str, int] = field(default_factory=dict)  # tokens per forward -> forwards
    round_unit: str | None = None
    n_rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_per_round: float | None = None
    acceptance_rate: float | None = None
    accepted_hist: dict[str, int] = field(default_factory=dict)  # units accepted -> rounds
    accept_by_position: list[float] | None = None  # P(i accepted | i drafted, 1..i-1 accepted)
    accepted_at_position: list[float] | None = None  # vLLM's: P(i accepted) over drafting rounds
    nodes_per_round: float | None = None  # tree drafts: nodes verified per round
    nfe_target: float | None = None
    nfe_drafter: float | None = None
    tpf: float | None = None
    positions_per_call: float | None = None  # the cost a batched verification hides in a call
    draft_share: float | None = None  # of wall time, inside the drafter
    verify_share: float | None = None  # of wall time, in separately timed verifications
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    # serving: output tokens over the seconds at least one request was in flight (at
    # run.concurrency 1 it is tok_s; above, tok_s is the per-user rate), the mean number in
    # flight over those seconds, and per-request latency percentiles (TPOT: time after the
    # first token over the tokens after it, as vLLM's `bench serve` has it)
    throughput_tok_s: float | None = None
    in_flight: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p90_ms: float | None = None
    tpot_p99_ms: float | None = None
    quality: dict[str, float] = field(default_factory=dict)
    # the method against every other arm by name: the baseline (`BASELINE`, absent without
    # one) and the reference arms
    vs: dict[str, Versus] = field(default_factory=dict)
    # the method's throughput over its ceiling's (`vs.oracle`, `run.oracle`): the share of
    # what a perfect drafter buys in this system that this drafter buys
    ceiling_fraction: float | None = None
    # a 95% interval per point, keyed by the point's name in `columns()` (dotted below its
    # top level: `speedup`, `quality.nll`, `vs.oracle.speedup`; specbench.metrics.intervals)
    intervals: dict[str, list[float]] = field(default_factory=dict)
    by_category: dict[str, Metrics] = field(default_factory=dict)

    @property
    def base(self) -> Versus | None:
        """The method against the baseline arm; None where the cell ran none."""
        return self.vs.get(BASELINE)

    def columns(self) -> dict[str, Any]:
        """The flat row: every metric by its field name, the baseline's comparison under
        `BASELINE_COLUMNS`' names, the reference arms under `vs`, each category likewise."""
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        references = {k: asdict(v) for k, v in self.vs.items() if k != BASELINE}
        base = asdict(self.base) if self.base else {}
        return {
            **row,
            **{flat: base.get(name) for name, flat in BASELINE_COLUMNS.items()},
            "vs": references,
            "by_category": {k: part.columns() for k, part in self.by_category.items()},
        }

    def to_json(self) -> dict[str, Any]:
        return self.columns()

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> Metrics:
        return cls(**_owned(cls, row))


# summary.json's version: 2 added `intervals` and `bootstrap`; a file without `schema` is 1
SCHEMA = 2

# the cost model's prediction further than this from the measured speedup, and outside its
# interval, is flagged (`prediction_flag`)
GAP = 0.10

# `in_flight` above this: the requests overlapped (one at a time it is 1 up to rounding)
TOGETHER = 1.01

CEILING = "oracle"  # the reference arm `run.oracle` adds: the method with a perfect drafter


@dataclass(frozen=True)
class Workload:
    """What the target was shown beyond the samples' text: the keys that move acceptance
    (z-lab/dflash#133: thinking mode and chat template take acceptance from 60% to 25%), so a
    report never averages cells that differ in them. `system_prompt` is a hash of the system
    message; `languages` are the samples' where the task knows them."""

    chat_template: bool = False  # the prompts went through the target's chat template
    thinking: bool | None = None  # the template's `enable_thinking`, where it was given one
    system_prompt: str | None = None
    languages: tuple[str, ...] = ()

    # the keys a cell's identity carries (languages belong to its samples)
    CELL_KEYS = ("chat_template", "thinking", "system_prompt")

    def label(self) -> str:
        """Its tags in a display name: `chat`, `think`/`no-think`, `sys:<hash>`."""
        tags = ["chat"] if self.chat_template else []
        if self.thinking is not None:
            tags.append("think" if self.thinking else "no-think")
        if self.system_prompt:
            tags.append(f"sys:{self.system_prompt}")
        return " ".join(tags)


@dataclass(kw_only=True)
class Summary(Metrics):
    """A cell's summary: who it is, what it claims, what it measured, what was predicted."""

    run_id: str
    method: str
    label: str
    target: str
    drafter: str
    task: str
    baseline: str | None  # the baseline arm's decoding, in words (None: no baseline arm)
    lossless: bool  # the method's claim for this config, with respect to `lossless_wrt`
    lossless_wrt: str | None
    env: str  # the machine and software, then the config's hash
    # the machine class (`Machine.label`) the reports group by; None in summaries written
    # before it, whose reader derives it from the run's env.json
    machine: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)  # `Method.facts` of this config
    workload: dict[str, Any] = field(default_factory=dict)  # a `Workload`, as a dict
    # the cost model's prediction (metrics.cost), where the method has one
    forward_ms: dict[str, float] | None = None
    predicted_speedup: float | None = None
    prediction_gap: float | None = None
    prediction_flag: bool | None = None
    # why the cost model made no prediction: the run was contended, or its forwards timed
    # inconsistently after re-timing (`decoding.cost.consistent`); None where it made one
    prediction_refused: str | None = None
    # the machine's load before, across and after the timed arms (`runs.load`), and whether
    # other work shared the machine with them (None: not sampled, as before schema 2)
    load: dict[str, Any] = field(default_factory=dict)
    contended: bool | None = None
    schema: int = SCHEMA
    bootstrap: dict[str, Any] = field(default_factory=dict)  # how `intervals` were made
    # a repeated run's (`run.repeats`) speedup and tokens per second of each trial, by point
    # name (`metrics.summary.by_trial`); empty for one trial
    by_trial: dict[str, list[float | None]] = field(default_factory=dict)

    @property
    def trials(self) -> int:
        """Decodings of the sample set summarised: `n_samples` counts every trial's."""
        return len(self.by_trial.get("tok_s", [])) or 1

    @classmethod
    def of(cls, metrics: Metrics, **identity: Any) -> Summary:
        """The cell's summary from its metrics and the identity fields."""
        return cls(**{f.name: getattr(metrics, f.name) for f in fields(Metrics)}, **identity)

    def to_json(self) -> dict[str, Any]:
        """The file's object; a value that is not a finite number where a number is refused
        (ValueError naming the field): JSON has no NaN, and a NaN written is a column that
        vanishes from every table."""
        row = self.columns()
        facts = row.pop("facts")
        row = {**row, **facts}
        bad = non_finite(row)
        if bad:
            raise ValueError(f"summary {self.run_id}: not a finite number: {', '.join(bad)}")
        return row

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> Summary:
        """A summary read back; the keys it does not own are the method's facts. A file that
        lacks the identity raises ValueError naming what is missing."""
        names = ({f.name for f in fields(cls)} | set(BASELINE_COLUMNS.values())) - {"facts"}
        missing = sorted(f.name for f in fields(cls) if _required(f) and f.name not in row)
        if missing:
            raise ValueError(f"not a specbench run summary (missing {missing})")
        facts = {k: v for k, v in row.items() if k not in names}
        owned = _owned(cls, {"schema": 1, **{k: v for k, v in row.items() if k in names}})
        _check_types(cls, owned)
        return cls(**owned, facts=facts)

    def scalars(self) -> dict[str, Any]:
        """The top-level values that are one number, flag or string (W&B's and the reports'
        columns)."""
        return {
            k: v
            for k, v in self.to_json().items()
            if v is None or isinstance(v, (bool, int, float, str))
        }


def _required(f: Field) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _known(cls: type, row: dict[str, Any]) -> dict[str, Any]:
    """`row`, whose keys must all be fields of `cls`: an unknown key raises ValueError (a file
    of another schema)."""
    unknown = sorted(set(row) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"not a specbench run summary (unknown {unknown})")
    return row


def _owned(cls: type, row: dict[str, Any]) -> dict[str, Any]:
    """The row's fields of `cls` from its flat columns, the comparisons (the baseline's from
    its columns) and categories in it typed."""
    flat = {k: row.get(k) for k in BASELINE_COLUMNS.values()}
    row = {k: v for k, v in row.items() if k not in flat}
    vs = {k: _typed(Versus, _known(Versus, v)) for k, v in row.get("vs", {}).items()}
    if flat["baseline_nfe"] is not None:  # the cell ran a baseline arm
        base = {name: flat[column] for name, column in BASELINE_COLUMNS.items()}
        vs[BASELINE] = _typed(Versus, {**base, "quality": base["quality"] or {}})
    return {
        **_known(cls, row),
        "vs": vs,
        "by_category": {k: Metrics.from_json(v) for k, v in row.get("by_category", {}).items()},
    }


def _check_types(cls: type, row: dict[str, Any]) -> None:
    """ValueError naming the first field whose value has the wrong JSON type (a number as a
    string, a list for a rate): read as it is, it fails far from the file, in a table."""
    hints = get_type_hints(cls)
    for name, value in row.items():
        hint = hints[name]
        kinds = tuple(
            get_origin(k) or k for k in (get_args(hint) if isinstance(hint, UnionType) else (hint,))
        )
        if Any in kinds or (value is None and type(None) in kinds):
            continue
        kinds += (int,) if float in kinds else ()
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            shown = " or ".join(k.__name__ for k in kinds if k is not int or float not in kinds)
            raise ValueError(f"{name} is {value!r}, not {shown}")


def _typed(cls: type, row: dict[str, Any]) -> Any:
    """`cls(**row)`, once every value has its field's type."""
    _check_types(cls, row)
    return cls(**row)


def non_finite(row: dict[str, Any], prefix: str = "") -> list[str]:
    """`key=value` for every NaN or infinite number in `row`, nested keys dotted."""
    found = []
    for key, value in row.items():
        if isinstance(value, dict):
            found += non_finite(value, f"{prefix}{key}.")
        elif isinstance(value, float) and not math.isfinite(value):
            found.append(f"{prefix}{key}={value}")
    return found


def finite(row: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`row` with every NaN or infinite number (top level, or in a dict under it) replaced by
    None, so it reads as missing, and the `key=value` of each one replaced."""
    out = {}
    for key, value in row.items():
        if isinstance(value, dict):
            value = finite(value)[0]
        elif isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = value
    return out, non_finite(row)
