"""What a decoding method is: one class per method owns every fact about it for one config.

The harness (run, evaluate, summary, report) asks a `Method` instead of knowing any method by
name: which models it takes, its knob checks, its decoder and the arms it is measured against,
what its output is exact with respect to, its cost model, its counters' unit, its label and
marker. Adding a method is one module with one `Method` subclass registered with
`@METHODS.register`, one small YAML under `conf/method/`, and tests.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from specbench.config import ModelConfig
from specbench.decoding.generation import Decoder
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.runs.summary import Summary


class Method(ABC):
    """One method under one config (`self.cfg`, an instance of `Config`) and sampling warp.

    Class attributes declare what never depends on the config; methods answer what does."""

    name: ClassVar[str]
    Config: ClassVar[type]  # the dataclass its YAML is validated against
    target_kind: ClassVar[str] = "causal"  # causal | diffusion
    drafter_kind: ClassVar[str | None] = None  # causal | diffusion | dflash; None: no drafter
    # what one round's `drafted_per_round` / `accepted_per_round` count: "tokens" (drafted
    # tokens, so acceptance is a probability per token), "steps" (denoising steps of a
    # diffusion LLM, each committing one or more tokens), or None (no rounds)
    round_unit: ClassVar[str | None] = None
    # the baseline arm, in words: what `exact` is with respect to
    baseline_name: ClassVar[str] = "the target's autoregressive decoding"
    # whether its drafts can be replaced by the target's own continuation (`run.oracle`)
    has_ceiling: ClassVar[bool] = False

    def __init__(self, cfg: Any, warp: Warp):
        self.cfg, self.warp = cfg, warp

    def check_target(self, target: ModelConfig) -> None:
        """Raise `ConfigError` on knobs that the target's config rules out."""
        return None

    def check_task(self, task: Any, samples: list) -> None:
        """Raise `ConfigError` when this config cannot be measured on these samples (a
        calibration set that overlaps them)."""
        return None

    @abstractmethod
    def build(self, target: Any, drafter: Any, task: Any) -> Decoder:
        """The decoder this config runs."""

    def baseline(self, target: Any) -> Decoder:
        """The arm every speedup is measured against and losslessness is checked against:
        the target's own plain decoding unless a method says otherwise."""
        return AutoregressiveDecoder(target, self.warp)

    def references(self, target: Any, drafter: Any) -> dict[str, Decoder | None]:
        """Further arms run on every sample, each summarised as `vs.<name>` (a paper's own
        baseline where it differs from `baseline`, or a tree's chain from the same drafter);
        None names the baseline arm itself, so a summary always carries the comparison
        without decoding twice."""
        return {}

    def ceiling(
        self, decoder: Decoder, baseline: Decoder, simulated: float | None = None
    ) -> Decoder | None:
        """Its decoder with a perfect drafter (`run.oracle`), where `has_ceiling`; `simulated`
        forces its acceptance (`run.simulated_acceptance`)."""
        return None

    def tree_nodes(self) -> int:
        """The most draft-tree nodes one verification writes past the newest token; 0 where
        its drafts are chains (a chain shrinks as the generation nears its end, a tree's node
        budget does not). The compiled engine sizes its static cache to hold them."""
        return 0

    def drafts_trees(self) -> bool:
        """Whether its drafts are trees: the compiled engine then builds its target's graphs
        under an ancestor mask too."""
        return self.tree_nodes() > 0

    def exact(self) -> bool:
        """Whether the output is the baseline arm's: token for token at temperature 0, in
        distribution above it."""
        return True

    def lossless_wrt(self) -> str | None:
        """What `exact` is with respect to, in words; None for a lossy config."""
        return self.baseline_name if self.exact() else None

    def top2_logits(self, target: Any, prefix: list[int]) -> tuple[tuple[float, float], Any] | None:
        """The target's two largest next-token logits after `prefix` and their dtype: how
        close the baseline's choice was where the method's output first left it. None where
        the target has no next-token logits (a diffusion LLM commits out of order)."""
        return target.top2(prefix)

    def cost_model(self, decoder: Any, prompt_ids: list[int], summary: Summary) -> dict:
        """The predicted speedup and the forward costs behind it (empty: no model)."""
        return {}

    def label(self) -> str:
        """A short display name of this config's knobs (the report adds target and drafter);
        never an identity: cells are identified by their run ids."""
        return self.name

    def facts(self, decoder: Any) -> dict[str, Any]:
        """Facts about this config that every record and the summary carry."""
        return {}
