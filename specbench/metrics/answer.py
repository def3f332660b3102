"""The final number of a GSM8K-style answer, extracted and compared as lm-eval's gsm8k task
does: `strict` takes "The answer is N" or the dataset's own "#### N", `flexible` the last
number. Every task that asks for a final number (`gsm8k`, `tiny_math`) and the math world's
trainer score through this one module.
"""

from __future__ import annotations

import re

STRICT = re.compile(r"The answer is (\-?[0-9\.\,]+).|#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")


def normalise(answer: str) -> str:
    """lm-eval's exact_match normalisation: no commas or dollar signs, no trailing period."""
    answer = re.sub(r"(?s).*#### ", "", answer.strip())
    return re.sub(r"\.$", "", answer.replace(",", "").replace("$", "")).strip()


def extract_strict(text: str) -> str | None:
    match = STRICT.search(text)
    return None if match is None else next(g for g in match.groups() if g is not None)


def extract_flexible(text: str) -> str | None:
    matches = FLEXIBLE.findall(text)
    return None if not matches else next(g for g in matches[-1] if g)


def score_answer(reference: str, completion: str) -> dict[str, float]:
    """Exact match of the completion's answer, strict and flexible: every task that asks for
    a GSM8K-style final number (`tiny_math` too) scores through this one function."""
    strict, flexible = extract_strict(completion), extract_flexible(completion)
    return {
        "exact_match_strict": float(strict is not None and normalise(strict) == reference),
        "exact_match_flexible": float(flexible is not None and normalise(flexible) == reference),
    }
