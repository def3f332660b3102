"""Golden fixtures for specbench's SuffixDecoding drafter (`specbench/decoding/drafters/suffix/`),
made by running upstream's own suffix trees and cache.

Upstream: snowflakedb/ArcticInference at 9d4643881608178f0f58a33d1b61919ca246997f, its
`csrc/suffix_decoding` (the C++ `SuffixTree`) built with its own CMakeLists.txt (nanobind,
g++ 12 / libstdc++, Release) into `arctic_inference/suffix_decoding/_C`, and its
`arctic_inference/suffix_decoding/cache.py` (`SuffixDecodingCache`) imported unmodified from
that checkout (the package's top-level `__init__.py`, which imports vLLM, replaced by an empty
one). Ties in the best-first tree fall as libstdc++'s `std::priority_queue` orders them.

Two stages, so that the second needs no torch:

1. `requests` (specbench's environment): the first tiny_code prompts, tokenised by the tiny
   world's tokenizer, each with the tiny target's greedy continuation as its response; and
   synthetic requests over small vocabularies (seeded; prompts repeat, so a restarted
   request's cached response is evicted). Written to requests.json.
2. `drafts` (an environment that imports upstream's `arctic_inference.suffix_decoding`): each
   case (a config and a request set) runs the requests in order through one
   `SuffixDecodingCache`, as specbench's loop drives its drafter: `start_request(prompt,
   prompt)` (the prompt is the request id), then per round `speculate(prompt, prompt +
   response[:at], min(max_spec_tokens, left - 1), ...)`, the round committing the draft's nodes
   that follow the response from the root plus one token (`add_active_response`), and
   `stop_request` at the end. Each round's `at` and upstream's draft (`token_ids`, `parents`,
   `probs`, `score`, `match_len`) go to drafts.json with the upstream commit.

Rerun (from the repository root; UPSTREAM is a checkout with `_C` built as above):
    .venv/bin/python tools/goldens/suffix.py requests tests/goldens/suffix/requests.json
    <python with numpy> tools/goldens/suffix.py drafts UPSTREAM \
        tests/goldens/suffix/requests.json tests/goldens/suffix/drafts.json
"""

from __future__ import annotations

import json
import random
import sys

UPSTREAM = {
    "repo": "snowflakedb/ArcticInference",
    "commit": "9d4643881608178f0f58a33d1b61919ca246997f",
    "files": ["csrc/suffix_decoding/suffix_tree.cc", "arctic_inference/suffix_decoding/cache.py"],
    "build": "csrc/suffix_decoding/CMakeLists.txt, nanobind 2, g++ 12.2 (libstdc++), Release",
}
TINY_PROMPTS, TINY_RESPONSE = 6, 48

DEFAULTS = {
    "max_spec_tokens": 16,
    "max_tree_depth": 64,
    "max_cached_requests": -1,
    "max_spec_factor": 1.0,
    "max_spec_offset": 0.0,
    "min_token_prob": 0.1,
    "use_tree_spec": True,
}
CONFIGS = [
    DEFAULTS,
    {**DEFAULTS, "use_tree_spec": False},
    {
        **DEFAULTS,
        "max_spec_tokens": 24,
        "max_tree_depth": 8,
        "max_cached_requests": 2,
        "max_spec_factor": 2.0,
        "max_spec_offset": -1.0,
        "min_token_prob": 0.0,
    },
    {
        **DEFAULTS,
        "max_spec_tokens": 8,
        "max_tree_depth": 16,
        "max_cached_requests": 0,
        "max_spec_factor": 0.5,
        "max_spec_offset": 2.0,
        "min_token_prob": 0.3,
        "use_tree_spec": False,
    },
    {**DEFAULTS, "max_cached_requests": 1, "min_token_prob": 0.05, "max_spec_factor": 3.0},
]


def synthetic(rng: random.Random) -> list[dict]:
    """Repetitive requests: a few prompts over small vocabularies, some repeated, responses
    that copy spans of their prompt and of each other."""
    prompts = []
    for _ in range(4):
        vocab = rng.choice([3, 5, 12])
        prompts.append([rng.randrange(vocab) for _ in range(rng.randint(4, 30))])
    requests, earlier = [], []
    for _ in range(10):
        prompt = rng.choice(prompts)
        response: list[int] = []
        while len(response) < 40:
            source = rng.choice([prompt, *earlier]) if earlier else prompt
            start = rng.randrange(len(source))
            response += source[start : start + rng.randint(1, 8)]
            if rng.random() < 0.3:
                response.append(rng.randrange(20))
        response = response[:40]
        earlier.append(response)
        requests.append({"prompt": prompt, "response": response})
    return requests


def make_requests(out: str) -> None:
    import torch
    from transformers import AutoTokenizer

    from specbench import paths
    from specbench.config import ModelConfig
    from specbench.decoding.plain import AutoregressiveDecoder
    from specbench.decoding.warp import Warp
    from specbench.models.kinds.causal import load_causal_lm

    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    rows = [json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").open()]
    target = load_causal_lm(
        ModelConfig(name="tiny", name_or_path="specbench:tiny"),
        "target",
        torch.device("cpu"),
        "float32",
    )
    decoder = AutoregressiveDecoder(target, Warp())
    tiny = []
    for row in rows[:TINY_PROMPTS]:
        prompt = tokenizer(row["prompt"])["input_ids"]
        response = decoder.generate(prompt, TINY_RESPONSE, torch.Generator()).tokens
        tiny.append({"prompt": prompt, "response": response})
    sets = {"tiny_code": tiny, "synthetic": synthetic(random.Random(0))}
    with open(out, "w") as f:
        json.dump(sets, f, separators=(",", ":"))
        f.write("\n")


def accepted(response: list[int], token_ids: list[int], parents: list[int]) -> int:
    """How many draft nodes follow `response` from the root: what greedy verification by a
    target whose output is `response` accepts."""
    node, depth = -1, 0
    while depth < len(response):
        child = next(
            (k for k, p in enumerate(parents) if p == node and token_ids[k] == response[depth]),
            None,
        )
        if child is None:
            break
        node, depth = child, depth + 1
    return depth


def run_case(cache_cls, cfg: dict, requests: list[dict]) -> list[list[dict]]:
    cache = cache_cls(
        max_tree_depth=cfg["max_tree_depth"], max_cached_requests=cfg["max_cached_requests"]
    )
    runs = []
    for request in requests:
        prompt, response = request["prompt"], request["response"]
        rid = tuple(prompt)
        cache.start_request(rid, prompt)
        at, rounds = 0, []
        while at < len(response):
            draft = cache.speculate(
                rid,
                prompt + response[:at],
                max_spec_tokens=min(cfg["max_spec_tokens"], len(response) - at - 1),
                max_spec_factor=cfg["max_spec_factor"],
                max_spec_offset=cfg["max_spec_offset"],
                min_token_prob=cfg["min_token_prob"],
                use_tree_spec=cfg["use_tree_spec"],
            )
            rounds.append(
                {
                    "at": at,
                    "token_ids": list(draft.token_ids),
                    "parents": list(draft.parents),
                    "probs": [float(p) for p in draft.probs],
                    "score": float(draft.score),
                    "match_len": draft.match_len,
                }
            )
            step = accepted(response[at:], list(draft.token_ids), list(draft.parents)) + 1
            cache.add_active_response(rid, response[at : at + step])
            at += step
        cache.stop_request(rid)
        runs.append(rounds)
    return runs


def make_drafts(upstream: str, requests_file: str, out: str) -> None:
    sys.path.insert(0, upstream)
    from arctic_inference.suffix_decoding import SuffixDecodingCache

    with open(requests_file) as f:
        sets = json.load(f)
    cases = [
        {"set": name, "config": cfg, "rounds": run_case(SuffixDecodingCache, cfg, requests)}
        for name, requests in sets.items()
        for cfg in CONFIGS
    ]
    with open(out, "w") as f:
        json.dump({"upstream": UPSTREAM, "cases": cases}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    if sys.argv[1] == "requests":
        make_requests(sys.argv[2])
    else:
        make_drafts(*sys.argv[2:5])
