"""Golden fixtures for the native Dream model (`specbench/models/native/dream.py`).

Builds a tiny seeded random Dream checkpoint with the UPSTREAM classes, in the hub's format
(config.json with the hub's model_type "Dream", auto_map, mask id 151666 and vocabulary size
152064; generation_config.json as the hub ships it; bfloat16 safetensors under the hub's
parameter names), runs the upstream code on it in float32 and writes
`tests/goldens/dream/{config.json, generation_config.json, model.safetensors, goldens.json}`.

Upstream (run, not copied; imported from the checkout given on the command line):
  NVlabs/Fast-dLLM @ 24cc59e75f20a6384bae8c905965bb090b96388e, dream/model/:
    configuration_dream.py, modeling_dream.py  (the hub's Dream files with a KV cache added),
    generation_utils.py        (the hub's `diffusion_generate`, plus Fast-dLLM's
                                `confidence_threshold` alg),
    generation_utils_block.py  (Fast-dLLM's block decoding with prefix / dual KV cache).
Dream's own files need no flash_attn (SDPA only), so no stand-in module is installed.

Cases (greedy: temperature 0, top_p None, top_k None, as Fast-dLLM's dream/eval.py passes them;
prompts are seeded random ids below Qwen2's special ids):
  * `diffusion_generate` with alg maskgit_plus, topk_margin, entropy: 24 tokens in 24 and in
    10 steps;
  * entropy in 10 steps with top_k/top_p NOT passed (`-topk50`): the generation config is then
    built by `from_model_config`, which under transformers 4 copies the model config's legacy
    defaults top_k=50, top_p=1.0, so confidences come from a softmax over the top 50 logits;
  * alg origin, deterministic under `torch.manual_seed(case seed)` set just before the call:
    each step draws `torch.rand(n_masked)` once from torch's global CPU generator (n_masked =
    mask positions in the canvas at that step, row-major), the last step included;
  * Fast-dLLM's alg confidence_threshold (uncached "parallel"), 24 tokens in 8 steps,
    thresholds 0.9 and 0.3;
  * Fast-dLLM's cached block decoding (prefix cache and dual cache), blocks of 8, alg entropy
    (steps 24) and alg confidence_threshold (thresholds 0.9 and 0.3).
`forwards` counts the upstream model's forward calls; `commit_forward[j]` is the 0-based
forward whose step committed generated position j (from canvas snapshots before each forward).

Rerun (from the repository root):
  mkdir -p /tmp/fdllm && git -C <Fast-dLLM git dir> archive HEAD dream | tar -x -C /tmp/fdllm
  <python with torch and transformers 4.49> tools/goldens/dream.py /tmp/fdllm \
      --commit 24cc59e75f20a6384bae8c905965bb090b96388e
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from specbench import cpu_kernels  # noqa: E402 (os alone; no specbench dependency)

cpu_kernels.pin()  # before torch loads: the bf16 goldens are the AVX2 kernels' output

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "tests" / "goldens" / "dream"
SEED = 1234
MASK_ID = 151666
VOCAB = 152064
FIRST_SPECIAL = 151643  # Qwen2's <|endoftext|>; every id from here on is a special/added token
PROMPT_LENGTHS = (6, 11, 17)
NEW_TOKENS = 24
# Fast-dLLM's default, which this model's top probabilities (about 0.1-0.6) never reach, so
# every step commits one token; and one they often reach, so steps commit several
THRESHOLDS = (0.9, 0.3)
# greedy with no truncation, as Fast-dLLM's dream/eval.py calls it (top_p=None, top_k=None)
GREEDY = {"temperature": 0.0, "top_p": None, "top_k": None}
UPSTREAM_FILES = [
    "dream/model/configuration_dream.py",
    "dream/model/modeling_dream.py",
    "dream/model/generation_utils.py",
    "dream/model/generation_utils_block.py",
]

# Dream-org/Dream-v0-Base-7B's config.json with the dimensions shrunk (hidden 3584 -> 8,
# intermediate 18944 -> 32, 28 -> 2 layers, 28 -> 2 heads, 4 -> 1 KV heads); every other key as
# the hub has it.
CONFIG = {
    "architectures": ["DreamModel"],
    "attention_dropout": 0.0,
    "auto_map": {
        "AutoConfig": "configuration_dream.DreamConfig",
        "AutoModel": "modeling_dream.DreamModel",
    },
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 8,
    "initializer_range": 0.02,
    "intermediate_size": 32,
    "mask_token_id": MASK_ID,
    "max_position_embeddings": 131072,
    "max_window_layers": 28,
    "model_type": "Dream",
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "num_key_value_heads": 1,
    "pad_token_id": 151643,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.46.2",
    "use_cache": False,
    "use_sliding_window": False,
    "vocab_size": VOCAB,
}

# Dream-org/Dream-v0-Instruct-7B's generation_config.json (its mask id is null there: the
# generate code takes it from config.json through `from_model_config`).
GENERATION_CONFIG = {
    "_from_model_config": True,
    "alg": "origin",
    "alg_temp": None,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "eps": 0.001,
    "mask_token_id": None,
    "output_history": False,
    "pad_token_id": 151643,
    "steps": 512,
    "temperature": 0.0,
    "top_k": None,
    "top_p": None,
    "transformers_version": "4.46.2",
}


def upstream_commit(root: Path, given: str | None) -> str:
    """The commit the checkout came from: given, or read from its git work tree."""
    if given:
        return given
    out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True)
    if out.returncode != 0:
        sys.exit("the checkout is no git work tree: pass --commit")
    return out.stdout.decode().strip()


def import_upstream(root: Path) -> types.SimpleNamespace:
    """Fast-dLLM's dream/model package, imported as `model` the way its dream/eval.py does."""
    sys.path.insert(0, str(root / "dream"))
    from model import generation_utils, generation_utils_block  # noqa: PLC0415
    from model.configuration_dream import DreamConfig  # noqa: PLC0415
    from model.modeling_dream import DreamModel  # noqa: PLC0415

    return types.SimpleNamespace(
        DreamConfig=DreamConfig,
        DreamModel=DreamModel,
        plain=generation_utils.DreamGenerationMixin,
        block=generation_utils_block.DreamGenerationMixin,
    )


def seeded_weights(model: torch.nn.Module) -> None:
    """Wide random weights, rounded to bfloat16: logits spread over several units, so greedy
    top-1/top-2 gaps stay far above float32 noise; norms and q/k/v biases are random too, so a
    dropped norm weight or bias shows."""
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if "norm" in name:
                value = 1.0 + 0.3 * noise
            elif name.endswith("bias"):
                value = 0.5 * noise
            elif "embed_tokens" in name:
                value = noise
            elif "lm_head" in name:  # equal-norm rows: no few tokens win every argmax
                value = 64.0 * noise / noise.norm(dim=1, keepdim=True)
            else:
                value = 1.5 * noise / param.shape[1] ** 0.5
            param.copy_(value.bfloat16().float())


def write_checkpoint(up: types.SimpleNamespace) -> None:
    """config.json and generation_config.json as the hub has them, bf16 safetensors under the
    upstream model's own state-dict names."""
    OUT.mkdir(parents=True, exist_ok=True)
    config = up.DreamConfig(**{k: v for k, v in CONFIG.items() if k != "torch_dtype"})
    torch.manual_seed(SEED)
    model = up.DreamModel(config)
    seeded_weights(model)
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, OUT / "model.safetensors", metadata={"format": "pt"})
    (OUT / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    (OUT / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2) + "\n")


def load_upstream(up: types.SimpleNamespace, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """The upstream class loading the written files in `dtype` (bf16 -> f32 is exact; bf16 is
    the dtype the hub's checkpoints ship in and load in)."""
    model = up.DreamModel.from_pretrained(OUT, torch_dtype=dtype).eval()
    names = {n for n, _ in model.named_parameters()}
    from safetensors import safe_open  # noqa: PLC0415

    with safe_open(OUT / "model.safetensors", "pt") as f:
        assert set(f.keys()) == names, "checkpoint names differ from the upstream model's"
    return model


def canvas_of(tensor: torch.Tensor) -> torch.Tensor:
    """The whole canvas behind a forward's input: the cached steps feed slices (views) of it."""
    return tensor if tensor._base is None else tensor._base


class ForwardLog:
    """Counts the model's forwards and snapshots the canvas before each one."""

    def __init__(self, model: torch.nn.Module):
        self.snapshots: list[torch.Tensor] = []
        self.handle = model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        ids = args[0] if args else kwargs["input_ids"]
        self.snapshots.append(canvas_of(ids).clone())

    def close(self) -> None:
        self.handle.remove()


def commit_forwards(snapshots: list[torch.Tensor], final: torch.Tensor, start: int) -> list:
    """For each generated position, the forward whose step committed it (None: never)."""
    canvases = [s[0, start:] for s in snapshots] + [final[0, start:]]
    order = []
    for j in range(canvases[0].shape[0]):
        step = next(
            (k for k in range(len(snapshots)) if canvases[k + 1][j] != MASK_ID),
            None,
        )
        order.append(step)
    return order


def effective_settings(model, args: dict) -> dict:
    """What `_sample` reads from the generation config the call builds. Without an explicit
    top_k/top_p it is transformers 4's model-config defaults (top_k 50, top_p 1.0), which
    `from_model_config` copies in."""
    config = model._prepare_generation_config(None, **args)
    keys = ("temperature", "top_p", "top_k", "eps", "alg_temp", "mask_token_id", "steps")
    return {key: getattr(config, key) for key in keys} | {"return_dict_in_generate": True}


def run_case(model, up, case_id: str, prompt: list[int], kind: str, args: dict, seed=None):
    """One upstream generate call, with its forwards counted and commit order recorded."""
    if kind == "block":
        model.diffusion_generate = types.MethodType(up.block.diffusion_generate, model)
        model._sample = types.MethodType(up.block._sample, model)
        function = "dream/model/generation_utils_block.py:DreamGenerationMixin.diffusion_generate"
    else:
        model.diffusion_generate = types.MethodType(up.plain.diffusion_generate, model)
        model._sample = types.MethodType(up.plain._sample, model)
        function = "dream/model/generation_utils.py:DreamGenerationMixin.diffusion_generate"
    ids = torch.tensor([prompt])
    log = ForwardLog(model)
    if seed is not None:
        torch.manual_seed(seed)
    with contextlib.redirect_stdout(io.StringIO()):  # Fast-dLLM prints step counts and times
        out = model.diffusion_generate(ids, return_dict_in_generate=True, **args)
    log.close()
    sequence = out.sequences
    recorded = {**effective_settings(model, args), **args, "attention_mask": None}
    if kind == "block":
        recorded.setdefault("threshold", 0.9)
        recorded.setdefault("dual_cache", False)
    case = {
        "id": case_id,
        "function": function,
        "args": recorded,
        "prompt": prompt,
        "tokens": sequence[0, len(prompt) :].tolist(),
        "forwards": len(log.snapshots),
        "commit_forward": commit_forwards(log.snapshots, sequence, len(prompt)),
    }
    if seed is not None:
        case["seed"] = seed
        case["rng"] = (
            "torch.manual_seed(seed) just before the call; each step draws torch.rand(n_masked) "
            "(float32, global CPU generator; n_masked = mask positions of the canvas at that "
            "step, row-major), the last step included; nothing else draws"
        )
    return case


def cases_for(model, up, index: int, prompt: list[int]) -> list[dict]:
    """Every golden case on one prompt."""
    cases = []
    name = f"p{index}"
    for alg in ("maskgit_plus", "topk_margin", "entropy"):
        for steps in (NEW_TOKENS, 10):
            args = {"max_new_tokens": NEW_TOKENS, "steps": steps, "alg": alg, **GREEDY}
            cases.append(run_case(model, up, f"{name}-{alg}-s{steps}", prompt, "plain", args))
    # the hub's README call shape: no top_k given, so transformers 4's default top_k=50 applies
    args = {"max_new_tokens": NEW_TOKENS, "steps": 10, "alg": "entropy", "temperature": 0.0}
    cases.append(run_case(model, up, f"{name}-entropy-s10-topk50", prompt, "plain", args))
    for steps in (NEW_TOKENS, 10):
        args = {"max_new_tokens": NEW_TOKENS, "steps": steps, "alg": "origin", **GREEDY}
        seed = 100 + 10 * index + steps
        cases.append(run_case(model, up, f"{name}-origin-s{steps}", prompt, "plain", args, seed))
    for threshold in THRESHOLDS:
        args = {
            "max_new_tokens": NEW_TOKENS,
            "steps": 8,
            "alg": "confidence_threshold",
            "threshold": threshold,
            **GREEDY,
        }
        case_id = f"{name}-confidence_threshold{threshold}-s8"
        cases.append(run_case(model, up, case_id, prompt, "plain", args))
    for dual in (False, True):
        cache = "dual" if dual else "prefix"
        args = {
            "max_new_tokens": NEW_TOKENS,
            "steps": NEW_TOKENS,
            "alg": "entropy",
            **GREEDY,
            "block_length": 8,
            "dual_cache": dual,
        }
        cases.append(run_case(model, up, f"{name}-block-{cache}-entropy", prompt, "block", args))
        for threshold in THRESHOLDS:
            args = {
                "max_new_tokens": NEW_TOKENS,
                "steps": NEW_TOKENS,
                "alg": "confidence_threshold",
                "threshold": threshold,
                **GREEDY,
                "block_length": 8,
                "dual_cache": dual,
            }
            case_id = f"{name}-block-{cache}-threshold{threshold}"
            cases.append(run_case(model, up, case_id, prompt, "block", args))
    return cases


def logits_golden(model) -> dict:
    """Float32 logits of one canvas (random ids with mask tokens inside and at the end)."""
    gen = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, FIRST_SPECIAL, (1, 20), generator=gen)
    ids[0, 5] = MASK_ID
    ids[0, 12:] = MASK_ID
    columns = torch.randperm(VOCAB, generator=gen)[:512]
    if MASK_ID not in columns:
        columns[-1] = MASK_ID
    columns = columns.sort().values
    with torch.no_grad():
        logits = model(ids).logits.float()
    return {
        "input_ids": ids.tolist(),
        "positions": "all",
        "columns": columns.tolist(),
        "values": logits[:, :, columns].tolist(),
        "argmax": logits.argmax(-1).tolist(),
        "logsumexp": logits.logsumexp(-1).tolist(),
    }


def prompts() -> list[list[int]]:
    gen = torch.Generator().manual_seed(SEED + 2)
    return [torch.randint(0, FIRST_SPECIAL, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("fast_dllm", type=Path, help="checkout of NVlabs/Fast-dLLM (has dream/)")
    parser.add_argument("--commit", help="the checkout's commit, when it is no git work tree")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="float32 writes the checkpoint and goldens.json; bfloat16 loads that checkpoint in "
        "bf16 and writes goldens_bfloat16.json (the cases only)",
    )
    opts = parser.parse_args()
    torch.set_num_threads(2)
    up = import_upstream(opts.fast_dllm)
    if opts.dtype == "float32":
        write_checkpoint(up)
    model = load_upstream(up, getattr(torch, opts.dtype))
    cases = []
    for index, prompt in enumerate(prompts()):
        cases += cases_for(model, up, index, prompt)
    if opts.dtype == "bfloat16":
        upstream = {
            "repo": "NVlabs/Fast-dLLM",
            "commit": upstream_commit(opts.fast_dllm, opts.commit),
        }
        goldens = {"upstream": [{**upstream, "files": UPSTREAM_FILES}], "dtype": "bfloat16"}
        (OUT / "goldens_bfloat16.json").write_text(json.dumps({**goldens, "cases": cases}) + "\n")
        return
    goldens = {
        "upstream": [
            {
                "repo": "NVlabs/Fast-dLLM",
                "commit": upstream_commit(opts.fast_dllm, opts.commit),
                "files": UPSTREAM_FILES,
            }
        ],
        "logits": logits_golden(model),
        "cases": cases,
    }
    (OUT / "goldens.json").write_text(json.dumps(goldens) + "\n")
    for case in cases:
        print(case["id"], case["forwards"], case["tokens"])


if __name__ == "__main__":
    main()
