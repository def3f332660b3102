"""specbench's diffusion-LLM decoders are token-identical to the authors' reference code.

`tests/goldens/<family>/goldens.json` holds what the upstream functions (LLaDA's `generate`,
Fast-dLLM's threshold and cached decoding, Dream's `diffusion_generate`) produced on a tiny
seeded checkpoint in the upstream format, with the upstream commit named; `tools/goldens/`
regenerates them. Each case is decoded here by the native model behind its adapter and the
block decoder configured as that function was called: the generated tokens must be equal, and
the number of model forwards (less the forwards upstream spends on a block with no mask left).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModel

from specbench import cpu_kernels
from specbench.decoding.dllm.vanilla.config import DLLMConfig
from specbench.decoding.dllm.vanilla.method import BlockDecoder
from specbench.decoding.generation import Stop
from specbench.decoding.knobs import SpatialConfig
from specbench.models.diffusion import DreamDiffusionLM, LLaDADiffusionLM, MaskedDiffusionLM

GOLDENS = Path(__file__).parent / "goldens"
ADAPTERS = {"llada": LLaDADiffusionLM, "dream": DreamDiffusionLM}


# the checkpoints' own dtype beside float32: bf16 makes equal confidences common, and then the
# row a reference ranks over decides which position wins (`policies.py`); bf16 matrix products
# on an AVX2 CPU are emulated, minutes for the cases, so bf16 is in `make test-slow`
DTYPES = ("float32", pytest.param("bfloat16", marks=pytest.mark.slow))


def golden_file(family: str, dtype: str) -> Path:
    return GOLDENS / family / ("goldens.json" if dtype == "float32" else f"goldens_{dtype}.json")


def cases(family: str, dtype: str = "float32") -> list[dict]:
    return json.loads(golden_file(family, dtype).read_text())["cases"]


def decoded_model(family: str, dtype: str = "float32") -> MaskedDiffusionLM:
    model = AutoModel.from_pretrained(GOLDENS / family, dtype=getattr(torch, dtype))
    config = json.loads((GOLDENS / family / "config.json").read_text())
    return ADAPTERS[family](model, config["mask_token_id"], None, family)


# upstream settings with no specbench counterpart (their cases are listed, not decoded):
# Fast-dLLM's Dream `confidence_threshold` carries unfilled quota over to later steps; Fast-dLLM's cached Dream
# decoder (generation_utils_block.py) commits a block's first position from the full forward
# whatever its confidence; a top-k or top-p truncation of Dream's confidence softmax (greedy
# decoders here rank untruncated distributions)
UNSUPPORTED = ("confidence_threshold", "generation_utils_block")


def supported(case: dict) -> bool:
    args = case["args"]
    truncated = args.get("top_k") is not None or args.get("top_p") is not None
    return not truncated and not any(
        u in case["function"] or u == args.get("alg") for u in UNSUPPORTED
    )


def spatial(case: dict) -> tuple[SpatialConfig, int]:
    """The block decoder's knobs for an upstream call, and the generation length."""
    args, function = case["args"], case["function"]
    if function.endswith("diffusion_generate"):
        n, alg = args["max_new_tokens"], args["alg"]
        if alg == "origin":
            return SpatialConfig(block_length=n, steps=args["steps"], policy="origin"), n
        cfg = SpatialConfig(block_length=n, steps=args["steps"], schedule="dream", confidence=alg)
        return cfg, n
    cache = {"prefix_cache": "cache" in function, "dual_cache": "dual_cache" in function}
    if case.get("repo", "").endswith("Fast-dLLM"):
        cache["reference"] = "fast_dllm"  # Fast-dLLM's generate ranks in float64, LLaDA's not
    if args.get("threshold") is not None:
        policy = {"policy": "threshold", "threshold": args["threshold"]}
    else:
        policy = {"steps": args["steps"]}
    return SpatialConfig(block_length=args["block_length"], **policy, **cache), args["gen_length"]


def decode(dlm: MaskedDiffusionLM, cfg: SpatialConfig, case: dict, n: int):
    """The generation (with the case's seed, as upstream's global RNG had it), and how many
    blocks the first step finished."""
    decoder = BlockDecoder(dlm, DLLMConfig(**vars(cfg)))
    first_steps: dict[int, bool] = {}

    def observe(block: torch.Tensor, logits: torch.Tensor, lo: int) -> None:
        first_steps.setdefault(lo, not (block == dlm.mask_id).any())

    decoder.observe = observe
    generator = torch.Generator().manual_seed(case.get("seed", 0))
    got = decoder.generate(case["prompt"], n, generator, Stop(frozenset()))
    return got, sum(first_steps.values())


def reference_forwards(case: dict, finished_at_first_step: int) -> int:
    """Upstream's forwards less those it spends on a block with no mask left, which change
    nothing and which specbench does not spend: Dream's loop runs all its steps (under `origin`
    the last masks are often revealed early; `commit_forward` says when), and Fast-dLLM's cached
    loops test for a finished block only after a cached forward, so a block that its first
    (full) forward finished costs them one more."""
    if "commit_forward" in case:
        return max(case["commit_forward"]) + 1
    cached = "cache" in case["function"]
    return case["forwards"] - (finished_at_first_step if cached else 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", sorted(ADAPTERS))
def test_every_reference_case_is_token_identical_with_equal_forwards(family, dtype) -> None:
    if not golden_file(family, dtype).exists():
        pytest.fail(
            f"no {dtype} goldens for {family}: run tools/goldens/{family}.py --dtype {dtype}"
        )
    if dtype == "bfloat16":  # bf16 ties flip with the kernels (cpu_kernels.py); conftest pins them
        assert torch.backends.cpu.get_cpu_capability() == cpu_kernels.CAPABILITY
    dlm = decoded_model(family, dtype)
    checked, mismatched = 0, []
    for case in filter(supported, cases(family, dtype)):
        cfg, n = spatial(case)
        got, finished = decode(dlm, cfg, case, n)
        checked += 1
        if got.tokens != case["tokens"] or got.target_calls != reference_forwards(case, finished):
            mismatched.append((case["id"], got.target_calls, case["forwards"]))
    assert checked >= 24 and not mismatched, mismatched
