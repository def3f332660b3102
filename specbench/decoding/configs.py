"""Every method's knobs: the dataclasses Hydra validates `conf/method/<name>.yaml` against.

They live apart from the methods' code, which needs torch, so that composing a config (and
reporting a misspelt key) imports neither torch nor transformers: a second, not ten. A method's
class names its dataclass as `Config`; this module stores each in Hydra's ConfigStore as
`method/schema_<name>`, the name its YAML's defaults list gives.
"""

from __future__ import annotations

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore


@dataclass
class ARConfig:
    name: str = "ar"


@dataclass
class SpSConfig:
    name: str = "sps"
    gamma: int = 4  # tokens drafted per round (the first round's, under `heuristic`)
    schedule: str = "constant"  # or heuristic: HF's (+2 after a fully accepted draft, -1 else)
    rule: str = "auto"  # greedy at temperature 0, rejection above; or a lenient rule (verify.py)
    leniency: float = 1.0  # the lenient rules' knob: ratio l, floor epsilon, top-k k, typical eps


@dataclass
class SpecDiffConfig:
    name: str = "specdiff"
    gamma: int = 10  # draft length
    steps: int = 4  # T, denoising steps per draft
    q_source: str = "reveal_step"  # the proposal for rejection sampling: or final_step, onehot
    rule: str = "auto"  # greedy at temperature 0, rejection above; or a lenient rule (verify.py)
    leniency: float = 1.0  # the lenient rules' knob: ratio l, floor epsilon, top-k k, typical eps
    # draw MDLM's whole-sequence uniforms (prefix rows too) so a seed reproduces upstream's
    # drafts token for token; off, a step draws uniforms for the block's rows only (same law)
    upstream_rng: bool = False


@dataclass
class DiffuSpecConfig:
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


@dataclass
class DFlashConfig:
    name: str = "dflash"
    # positions per drafter block (the anchor token plus block_size - 1 drafts); null: the
    # checkpoint's own (z-lab's Qwen3 checkpoints: 16)
    block_size: int | None = None
    rule: str = "auto"  # greedy at temperature 0, rejection above; or a lenient rule (verify.py)
    leniency: float = 1.0  # the lenient rules' knob: ratio l, floor epsilon, top-k k, typical eps


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


@dataclass
class DLLMConfig(SpatialConfig):
    name: str = "dllm"


@dataclass
class PSDConfig(DLLMConfig):
    name: str = "psd"
    policy: str = "threshold"  # PSD(Confidence), the paper's main variant (threshold 0.9)
    depth: int = 3  # d: drafts D_1 .. D_d per iteration (0 = the policy's decoder); paper: 3
    # tokens each deeper draft adds under a confidence-driven policy: `last` (as many as the
    # policy's step just committed) or `replay` (the policy on the stale scores); quota
    # policies always replay (their counts are known)
    draft_width: str = "last"


@dataclass
class SpiffyConfig(DLLMConfig):
    name: str = "spiffy"
    nodes: int = 5  # D, the calibrated graph's size
    keep: int | None = None  # D*, nodes kept per call after online pruning; null = ceil(D / 2)
    graph: str | None = None  # a saved graph (JSON); null = calibrate (cached)
    # "task": the measured task's held-out samples (`Task.heldout`), in its own prompt format;
    # or a JSONL file of {"prompt"} rows. Either is refused if it overlaps the measured samples.
    calibration: str = "task"
    calibration_samples: int = 50
    calibration_new_tokens: int = 128


def _register() -> None:
    store = ConfigStore.instance()
    for schema in (
        ARConfig,
        SpSConfig,
        SpecDiffConfig,
        DiffuSpecConfig,
        DFlashConfig,
        DLLMConfig,
        PSDConfig,
        SpiffyConfig,
    ):
        store.store(group="method", name=f"schema_{schema.name}", node=schema)


_register()
