"""What every method's config shares, with no torch: the acceptance rules' names and checks,
a draft length's bound, the diffusion-LLM decoders' spatial knobs (`SpatialConfig`), and
`bounds`, the one-line refusal each config's `check` raises through.

A method's own config sits in its package (`<method>/config.py`), beside its torch code
(`method.py`); those modules and this one import no torch, so composing a config (and refusing
a misspelt key or a knob out of range) takes a second, not ten. Each
`check(temperature, max_new)` raises `ConfigError` on a knob its method cannot run, reading no
file's contents and loading no model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specbench.errors import ConfigError

EXACT_RULES = ("greedy", "rejection")  # acceptance rules that keep the target's output
LENIENT_RULES = ("ratio", "floor", "topk", "typical")  # lossy ones, each with its leniency
POLICIES = ("quota", "threshold", "dynamic", "localleap", "origin")  # diffusion-LLM unmasking
CONFIDENCES = ("maskgit_plus", "topk_margin", "entropy")


def is_greedy(temperature: float) -> bool:
    """Temperature 0 decodes by argmax (`Warp.greedy`)."""
    return temperature == 0.0


def bounds(*checks: tuple[str, Any, bool, str]) -> None:
    """Raise on the first (key, value, ok, allowed) that is not ok."""
    for key, value, ok, allowed in checks:
        if not ok:
            raise ConfigError(key, value, allowed)


def check_rule(name: str, leniency: float, temperature: float) -> None:
    """A method's `rule` and `leniency` knobs: a known rule, greedy acceptance only for greedy
    decoding, and a leniency in the rule's range."""
    known = ("auto", *EXACT_RULES, *LENIENT_RULES)
    greedy = is_greedy(temperature)
    bounds(
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
        bounds(("method.leniency", leniency, *ranges[name]))


def check_exact_rule(name: str, temperature: float) -> None:
    """A tree method's `rule`: trees are verified exactly, so no lenient rule."""
    allowed = ("auto", *EXACT_RULES)
    bounds(
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
    bounds(
        (
            "method.gamma",
            gamma,
            1 <= gamma <= max_new,
            f"must be an integer in [1, max_new_tokens={max_new}]",
        )
    )


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
        bounds(
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
        bounds(
            (
                "method.policy",
                self.policy,
                self.policy != "origin",
                f"is random, so it cannot draft; allowed: {allowed}",
            )
        )
