"""Quality metrics shared by tasks: ROUGE against a reference, and an oracle LM's likelihood.

ROUGE comes from Google's `rouge-score` package directly: `evaluate.load("rouge")` fetches its
metric script from the hub and so fails offline, while rouge-score computes the same F-measures
(with the Porter stemmer, as `evaluate` configures it) anywhere.
"""

from __future__ import annotations

import logging
from functools import cache

from specbench.config import ModelConfig

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


@cache
def _rouge_scorer():
    from rouge_score import rouge_scorer

    logging.getLogger("absl").setLevel(logging.WARNING)  # its INFO line per scorer is noise
    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)


def rouge(prediction: str, reference: str) -> dict[str, float]:
    """ROUGE-1/2/L F-measures."""
    scores = _rouge_scorer().score(reference, prediction)
    return {name: scores[name].fmeasure for name in ROUGE_TYPES}


class OracleLM:
    """A causal LM that scores completions: mean negative log-likelihood per completion token
    given the prompt, each text tokenised by the oracle's own tokenizer. Loaded on first use."""

    def __init__(self, name_or_path: str):
        self.name_or_path = name_or_path

    @property
    def lm(self):
        return _load_oracle(self.name_or_path)

    def nll(self, prompt: str, completion: str) -> float | None:
        """None for an empty completion, which has no likelihood to speak of."""
        import torch  # here, not at the top: tasks import this module while a config composes

        lm = self.lm
        prompt_ids = lm.tokenizer(prompt)["input_ids"]
        completion_ids = lm.tokenizer(completion)["input_ids"]
        if not completion_ids:
            return None
        from specbench.models.loading import max_positions

        context = max_positions(lm.model.config) or len(prompt_ids) + len(completion_ids)
        prompt_ids = prompt_ids[-max(1, context - len(completion_ids)) :]
        completion_ids = completion_ids[: context - len(prompt_ids)]
        lm.reset()
        logits = lm.forward_tokens(prompt_ids + completion_ids)[len(prompt_ids) - 1 : -1]
        targets = torch.tensor(completion_ids, device=logits.device)
        return torch.nn.functional.cross_entropy(logits.float(), targets).item()


@cache
def _load_oracle(name_or_path: str):
    from specbench.devices import resolve_device
    from specbench.models.kinds.causal import load_causal_lm

    cfg = ModelConfig(name="oracle", name_or_path=name_or_path)
    return load_causal_lm(cfg, "task.oracle", resolve_device("auto"), "auto")
