"""Every method's knobs: the dataclasses Hydra validates `conf/method/<name>.yaml` against,
and their checks.

They live apart from the methods' code, which needs torch, so that composing a config (and
refusing a misspelt key or a knob out of range) imports neither torch nor transformers: a
second, not ten. A method's class names its dataclass as `Config`; this module stores each in
Hydra's ConfigStore as `method/schema_<name>`, the name its YAML's defaults list gives. Each
`check(temperature, max_new)` raises `ConfigError` on a knob its method cannot run, reading no
file's contents and loading no model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from hydra.core.config_store import ConfigStore

from specbench.errors import ConfigError

EXACT_RULES = ("greedy", "rejection")  # acceptance rules that keep the target's output
LENIENT_RULES = ("ratio", "floor", "topk", "typical")  # lossy ones, each with its leniency
Q_SOURCES = ("reveal_step", "final_step", "onehot")  # SpecDiff's proposal distributions
POLICIES = ("quota", "threshold", "dynamic", "localleap", "origin")  # diffusion-LLM unmasking
CONFIDENCES = ("maskgit_plus", "topk_margin", "entropy")


def is_greedy(temperature: float) -> bool:
    """Temperature 0 decodes by argmax (`Warp.greedy`)."""
    return temperature == 0.0


def _bounds(*checks: tuple[str, Any, bool, str]) -> None:
    """Raise on the first (key, value, ok, allowed) that is not ok."""
    for key, value, ok, allowed in checks:
        if not ok:
            raise ConfigError(key, value, allowed)


def check_rule(name: str, leniency: float, temperature: float) -> None:
    """A method's `rule` and `leniency` knobs: a known rule, greedy acceptance only for greedy
    decoding, and a leniency in the rule's range."""
    known = ("auto", *EXACT_RULES, *LENIENT_RULES)
    greedy = is_greedy(temperature)
    _bounds(
        ("method.rule", name, name in known, f"allowed: {', '.join(known)}"),
        (
            "method.rule",
            name,
            name != "greedy" or greedy,
            "greedy acceptance needs run.temperature=0; use auto or rejection",
        ),
        (
            "method.rule",
            name,
            name != "ratio" or not greedy,
            "ratio leniency needs run.temperature > 0",
        ),
    )
    ranges = {
        "ratio": (0 < leniency <= 1, "must be in (0, 1] (1 = exact)"),
        "floor": (0 < leniency < 1, "must be a probability in (0, 1)"),
        "topk": (leniency >= 1 and float(leniency).is_integer(), "must be an integer k >= 1"),
        "typical": (0 < leniency < 1, "must be in (0, 1) (Medusa's epsilon)"),
    }
    if name in ranges:
        _bounds(("method.leniency", leniency, *ranges[name]))


def check_exact_rule(name: str, temperature: float) -> None:
    """A tree method's `rule`: trees are verified exactly, so no lenient rule."""
    allowed = ("auto", *EXACT_RULES)
    _bounds(
        (
            "method.rule",
            name,
            name in allowed,
            f"a tree verifies exactly; allowed: {', '.join(allowed)}",
        )
    )
    check_rule(name, 1.0, temperature)


def check_draft_length(gamma: int, max_new: int) -> None:
    """A draft of 1 to `max_new` tokens: a longer one is cut to the tokens left, silently
    measuring another gamma than the config names."""
    _bounds(
        (
            "method.gamma",
            gamma,
            1 <= gamma <= max_new,
            f"must be an integer in [1, max_new_tokens={max_new}]",
        )
    )


@dataclass
class ARConfig:
    marker: ClassVar[str] = "s"  # its marker in Pareto plots
    name: str = "ar"

    def check(self, temperature: float, max_new: int) -> None:
        return None


@dataclass
class SpSConfig:
    marker: ClassVar[str] = "o"  # its marker in Pareto plots
    name: str = "sps"
    gamma: int = 4  # tokens drafted per round (the first round's, under `heuristic`)
    schedule: str = "constant"  # or heuristic: HF's (+2 after a fully accepted draft, -1 else)
    rule: str = "auto"  # greedy at temperature 0, rejection above; or a lenient rule (verify.py)
    leniency: float = 1.0  # the lenient rules' knob: ratio l, floor epsilon, top-k k, typical eps
    # null: a chain of gamma tokens; dynamic: EAGLE-2's dynamic draft tree of depth gamma
    tree: str | None = None
    top_k: int = 4  # tree: children per expanded node, and nodes expanded per depth
    budget: int = 16  # tree: nodes verified per round, the root (newest token) not counted

    def check(self, temperature: float, max_new: int) -> None:
        check_draft_length(self.gamma, max_new)
        tree = self.tree is not None
        _bounds(
            (
                "method.schedule",
                self.schedule,
                self.schedule in ("constant", "heuristic"),
                "allowed: constant, heuristic",
            ),
            ("method.tree", self.tree, self.tree in (None, "dynamic"), "allowed: null, dynamic"),
            ("method.top_k", self.top_k, self.top_k >= 1, "must be an integer >= 1"),
            ("method.budget", self.budget, self.budget >= 1, "must be an integer >= 1"),
            (
                "method.schedule",
                self.schedule,
                not tree or self.schedule == "constant",
                "a tree's depth is gamma every round; allowed with a tree: constant",
            ),
        )
        if tree:
            check_exact_rule(self.rule, temperature)
        else:
            check_rule(self.rule, self.leniency, temperature)


@dataclass
class SpecDiffConfig:
    marker: ClassVar[str] = "^"  # its marker in Pareto plots
    name: str = "specdiff"
    gamma: int = 10  # draft length
    steps: int = 4  # T, denoising steps per draft
    q_source: str = "reveal_step"  # the proposal for rejection sampling: or final_step, onehot
    rule: str = "auto"  # greedy at temperature 0, rejection above; or a lenient rule (verify.py)
    leniency: float = 1.0  # the lenient rules' knob: ratio l, floor epsilon, top-k k, typical eps
    # draw MDLM's whole-sequence uniforms (prefix rows too) so a seed reproduces upstream's
    # drafts token for token; off, a step draws uniforms for the block's rows only (same law)
    upstream_rng: bool = False

    def check(self, temperature: float, max_new: int) -> None:
        check_draft_length(self.gamma, max_new)
        _bounds(
            (
                "method.steps",
                self.steps,
                self.steps >= 1,
                "must be an integer >= 1 (T, denoising steps)",
            ),
            (
                "method.q_source",
                self.q_source,
                self.q_source in Q_SOURCES,
                f"allowed: {', '.join(Q_SOURCES)}",
            ),
        )
        check_rule(self.rule, self.leniency, temperature)


@dataclass
class DiffuSpecConfig:
    marker: ClassVar[str] = "v"  # its marker in Pareto plots
    name: str = "diffuspec"
    cps: bool = True
    adl: bool = True
    k: int = 20  # the fixed draft length when adl is off
    k_min: int = 20
    k_max: int = 30
    delta: int = 10
    rho: float = 0.5
    m_max: int = 15
    tau: float = 0.8
    beam: int = 3
    lam: float = 0.5
    refine_steps: int = 1
    ngram_order: int = 3
    # "task": the measured task's training text (`Task.train_texts`); or a text/JSONL file
    ngram_corpus: str = "task"

    def uses_ngram(self) -> bool:
        """CPS mixes the n-gram model in unless its weight is the drafter's alone."""
        return self.cps and self.lam < 1

    def check(self, temperature: float, max_new: int) -> None:
        _bounds(
            (
                "run.temperature",
                temperature,
                is_greedy(temperature),
                "diffuspec verifies greedily here: use 0",
            ),
            ("method.k_min", self.k_min, 1 <= self.k_min <= self.k_max, "must be in [1, k_max]"),
            ("method.k", self.k, self.k >= 1, "must be >= 1"),
            ("method.rho", self.rho, 0 < self.rho <= 1, "must be in (0, 1]"),
            ("method.tau", self.tau, 0 < self.tau <= 1, "must be in (0, 1]"),
            ("method.lam", self.lam, 0 <= self.lam <= 1, "must be in [0, 1]"),
            ("method.m_max", self.m_max, self.m_max >= 1, "must be >= 1"),
            ("method.beam", self.beam, self.beam >= 1, "must be >= 1"),
            ("method.refine_steps", self.refine_steps, self.refine_steps >= 1, "must be >= 1"),
            ("method.ngram_order", self.ngram_order, self.ngram_order >= 1, "must be >= 1"),
            (
                "method.ngram_corpus",
                self.ngram_corpus,
                not self.uses_ngram()
                or self.ngram_corpus == "task"
                or Path(self.ngram_corpus).is_file(),
                "allowed: task, or a text/JSONL file",
            ),
        )


@dataclass
class DFlashConfig:
    marker: ClassVar[str] = "*"  # its marker in Pareto plots
    name: str = "dflash"
    # positions per drafter block (the anchor token plus block_size - 1 drafts); null: the
    # checkpoint's own (z-lab's Qwen3 checkpoints: 16)
    block_size: int | None = None
    rule: str = "auto"  # greedy at temperature 0, rejection above; or a lenient rule (verify.py)
    leniency: float = 1.0  # the lenient rules' knob: ratio l, floor epsilon, top-k k, typical eps

    def check(self, temperature: float, max_new: int) -> None:
        _bounds(
            (
                "method.block_size",
                self.block_size,
                self.block_size is None or self.block_size >= 2,
                "must be >= 2, or null (the checkpoint's)",
            )
        )
        check_rule(self.rule, self.leniency, temperature)


@dataclass
class PLDConfig:
    marker: ClassVar[str] = "P"  # its marker in Pareto plots
    name: str = "pld"
    # tokens drafted per round at most (vLLM's num_speculative_tokens; Spec-Bench's PLD: 10)
    gamma: int = 10
    # the n-gram lengths looked up, longest first (vLLM's prompt_lookup_min/max; PLD's max: 3)
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 3

    def check(self, temperature: float, max_new: int) -> None:
        check_draft_length(self.gamma, max_new)
        _bounds(
            (
                "method.prompt_lookup_min",
                self.prompt_lookup_min,
                self.prompt_lookup_min >= 1,
                "must be an integer >= 1",
            ),
            (
                "method.prompt_lookup_max",
                self.prompt_lookup_max,
                self.prompt_lookup_max >= self.prompt_lookup_min,
                f"must be an integer >= method.prompt_lookup_min ({self.prompt_lookup_min})",
            ),
        )


@dataclass
class DDTreeConfig:
    marker: ClassVar[str] = "P"  # its marker in Pareto plots
    name: str = "ddtree"
    block_size: int | None = None  # as DFlash's: null uses the drafter checkpoint's
    budget: int = 32  # tree nodes verified per round, the root (newest token) not counted
    rule: str = "auto"  # greedy at temperature 0, exact tree sampling above; no lenient rules

    def check(self, temperature: float, max_new: int) -> None:
        DFlashConfig(block_size=self.block_size).check(temperature, max_new)
        check_exact_rule(self.rule, temperature)
        _bounds(("method.budget", self.budget, self.budget >= 1, "must be an integer >= 1"))


@dataclass
class SpatialConfig:
    """The knobs every diffusion-LLM decoder shares (the method configs extend it)."""

    block_length: int = 32
    steps: int | None = (
        None  # quota: denoising steps over the whole generation; null = one per token
    )
    policy: str = "quota"
    confidence: str = "maskgit_plus"
    schedule: str = "llada"  # quota only: llada | dream
    threshold: float = 0.9  # threshold; localleap's anchor threshold
    factor: float = 1.0  # dynamic
    relaxed_threshold: float = 0.7  # localleap
    window: int = 2  # localleap
    prefix_cache: bool = False  # Fast-dLLM's prefix cache (approximate)
    dual_cache: bool = False  # Fast-dLLM's DualCache: the suffix's keys and values kept too
    # whose code scores and ranks (policies.py): auto = LLaDA's `generate` for quota without a
    # cache, Fast-dLLM's otherwise, Dream's on Dream; fast_dllm = Fast-dLLM's (float64) for
    # quota without a cache too, whose bf16 ties fall otherwise than in LLaDA's bf16 ranking
    reference: str = "auto"

    def check(self, temperature: float, max_new: int) -> None:
        _bounds(
            (
                "run.temperature",
                temperature,
                is_greedy(temperature),
                "diffusion-LLM decoders here are greedy; allowed: 0",
            ),
            ("method.block_length", self.block_length, self.block_length >= 1, "must be >= 1"),
            (
                "method.steps",
                self.steps,
                self.steps is None or self.steps >= 1,
                "must be null (one token per step) or >= 1",
            ),
            (
                "method.policy",
                self.policy,
                self.policy in POLICIES,
                f"allowed: {', '.join(POLICIES)}",
            ),
            (
                "method.confidence",
                self.confidence,
                self.confidence in CONFIDENCES,
                f"allowed: {', '.join(CONFIDENCES)}",
            ),
            (
                "method.confidence",
                self.confidence,
                self.policy == "quota" or self.confidence != "entropy",
                f"policy {self.policy} compares confidences with thresholds in [0, 1]; "
                "allowed: maskgit_plus, topk_margin",
            ),
            (
                "method.schedule",
                self.schedule,
                self.schedule in ("llada", "dream"),
                "allowed: llada, dream",
            ),
            (
                "method.reference",
                self.reference,
                self.reference in ("auto", "llada", "fast_dllm"),
                "allowed: auto, llada, fast_dllm",
            ),
            *(
                (
                    f"method.{key}",
                    getattr(self, key),
                    0 <= getattr(self, key) <= 1,
                    "must be in [0, 1]",
                )
                for key in ("threshold", "relaxed_threshold")
            ),
            ("method.factor", self.factor, self.factor > 0, "must be > 0"),
            ("method.window", self.window, self.window >= 0, "must be >= 0"),
        )

    def check_replayable(self) -> None:
        """Speculation replays the policy to draft: a random policy has nothing to replay."""
        allowed = ", ".join(p for p in POLICIES if p != "origin")
        _bounds(
            (
                "method.policy",
                self.policy,
                self.policy != "origin",
                f"is random, so it cannot draft; allowed: {allowed}",
            )
        )


@dataclass
class DLLMConfig(SpatialConfig):
    marker: ClassVar[str] = "*"  # its marker in Pareto plots
    name: str = "dllm"


@dataclass
class PSDConfig(DLLMConfig):
    marker: ClassVar[str] = "D"  # its marker in Pareto plots
    name: str = "psd"
    policy: str = "threshold"  # PSD(Confidence), the paper's main variant (threshold 0.9)
    depth: int = 3  # d: drafts D_1 .. D_d per iteration (0 = the policy's decoder); paper: 3
    # tokens each deeper draft adds under a confidence-driven policy: `last` (as many as the
    # policy's step just committed) or `replay` (the policy on the stale scores); quota
    # policies always replay (their counts are known)
    draft_width: str = "last"

    def check(self, temperature: float, max_new: int) -> None:
        super().check(temperature, max_new)
        self.check_replayable()
        _bounds(
            (
                "method.depth",
                self.depth,
                self.depth >= 0,
                "must be >= 0 (0 = the policy's decoder)",
            ),
            (
                "method.draft_width",
                self.draft_width,
                self.draft_width in ("last", "replay"),
                "allowed: last, replay",
            ),
        )


@dataclass
class SpiffyConfig(DLLMConfig):
    marker: ClassVar[str] = "P"  # its marker in Pareto plots
    name: str = "spiffy"
    nodes: int = 5  # D, the calibrated graph's size
    keep: int | None = None  # D*, nodes kept per call after online pruning; null = ceil(D / 2)
    graph: str | None = None  # a saved graph (JSON); null = calibrate (cached)
    # "task": the measured task's held-out samples (`Task.heldout`), in its own prompt format;
    # or a JSONL file of {"prompt"} rows. Either is refused if it overlaps the measured samples.
    calibration: str = "task"
    calibration_samples: int = 50
    calibration_new_tokens: int = 128

    def check(self, temperature: float, max_new: int) -> None:
        super().check(temperature, max_new)
        self.check_replayable()
        _bounds(
            ("method.nodes", self.nodes, self.nodes >= 1, "must be >= 1"),
            (
                "method.keep",
                self.keep,
                self.keep is None or 1 <= self.keep <= self.nodes,
                f"must be null or in [1, nodes={self.nodes}]",
            ),
            (
                "method.graph",
                self.graph,
                self.graph is None or Path(self.graph).exists(),
                "no such file; null calibrates a graph",
            ),
            (
                "method.calibration",
                self.calibration,
                self.calibration == "task" or Path(self.calibration).exists(),
                "allowed: task, or a JSONL file of prompts",
            ),
            *(
                (f"method.{key}", getattr(self, key), getattr(self, key) >= 1, "must be >= 1")
                for key in ("calibration_samples", "calibration_new_tokens")
            ),
        )


@dataclass
class FailFastConfig:
    """FailFast's knobs, named as in its code (ruipeterpan/failfast `failfast.py` and its
    Fast-dLLM v2 fork's `generate_draft_tokens_arbitrary_length`), defaults its CLI's."""

    marker: ClassVar[str] = "X"  # its marker in Pareto plots
    name: str = "failfast"
    spec_len: int = 10  # the draft length every round starts from (`--spec_len`)
    incr_len: int = 10  # N: tokens a confident draft grows by (`--sweep_incr_len`)
    max_spec_len: int = 60  # N_max: stop growing once this many confidences were seen
    lowconf_threshold: float = 0.45  # tau: any draft confidence below it ends the draft
    threshold: float = 0.05  # Fast-dLLM's unmasking threshold (`--drafter_thresholds`)
    block_size: int = 32  # Fast-dLLM v2's block, aligned to absolute positions
    small_block_size: int = 8  # denoised left to right inside a block
    rule: str = "auto"  # greedy at temperature 0, rejection (one-hot proposal) above

    def check(self, temperature: float, max_new: int) -> None:
        _bounds(
            *(
                (f"method.{key}", getattr(self, key), getattr(self, key) >= 1, "must be >= 1")
                for key in ("spec_len", "incr_len", "max_spec_len", "small_block_size")
            ),
            *(
                (
                    f"method.{key}",
                    getattr(self, key),
                    0 <= getattr(self, key) <= 1,
                    "must be in [0, 1]",
                )
                for key in ("lowconf_threshold", "threshold")
            ),
            (
                "method.block_size",
                self.block_size,
                self.block_size >= self.small_block_size
                and self.block_size % self.small_block_size == 0,
                f"must be a multiple of method.small_block_size ({self.small_block_size})",
            ),
            (
                "method.rule",
                self.rule,
                self.rule in ("auto", *EXACT_RULES),
                f"failfast verifies exactly; allowed: auto, {', '.join(EXACT_RULES)}",
            ),
            (
                "method.rule",
                self.rule,
                self.rule != "greedy" or is_greedy(temperature),
                "greedy acceptance needs run.temperature=0; use auto or rejection",
            ),
        )


# every method's config by its name: composing a config and reading a stored cell's facts
# (its plot marker) need no torch
SCHEMAS = {
    schema.name: schema
    for schema in (
        ARConfig,
        SpSConfig,
        SpecDiffConfig,
        DiffuSpecConfig,
        DFlashConfig,
        PLDConfig,
        DDTreeConfig,
        DLLMConfig,
        PSDConfig,
        SpiffyConfig,
        FailFastConfig,
    )
}


def _register() -> None:
    store = ConfigStore.instance()
    for name, schema in SCHEMAS.items():
        store.store(group="method", name=f"schema_{name}", node=schema)


_register()
