"""Golden fixtures for specbench's native LLaDA (`specbench/models/native/llada.py`).

Builds a tiny seeded random LLaDA checkpoint with the UPSTREAM model class, in the hub format
(the hub's config.json keys, model_type "llada", auto_map, mask id 126336, vocabulary 126464;
tiny dimensions), writes it to tests/goldens/llada/ (config.json, model.safetensors in
bfloat16), runs the upstream decoders on it in float32 and writes goldens.json: the logits of
one forward, and the tokens and forward counts of greedy decodes.

Upstream code run (imported from the checkouts named on the command line, not copied):
  * NVlabs/Fast-dLLM @ 24cc59e75f20a6384bae8c905965bb090b96388e: llada/model/modeling_llada.py
    and configuration_llada.py (the hub's LLaDAModelLM plus a KV cache) are the model for every
    case; llada/generate.py gives `generate` (threshold or fixed schedule),
    `generate_with_prefix_cache` and `generate_with_dual_cache`. This commit has no `factor`
    (dynamic) rule, so there are no factor cases.
  * ML-GSAI/LLaDA @ b7e6c3565f194352da44b38dd12b6970597309f3: generate.py `generate`.

goldens.json follows the shared brief, plus: `logits.bfloat16` (the same forward with the
upstream model cast to bfloat16: values, argmax, logsumexp), per case `repo`, `nfe` (the count
Fast-dLLM's functions return; equal to `forwards`) and `margins`: over the masked positions
every forward fed, the smallest top-1/top-2 logit gap, the smallest gap between two confidences
and (threshold cases) the smallest |confidence - threshold|, lower bounds on how far each
decision was from a float tie.

Rerun (checkouts made with `git archive` of those commits, outside the repository):

    <python with torch and transformers 4.49> tools/goldens/llada.py <Fast-dLLM checkout> <LLaDA checkout>

Fast-dLLM wraps SDPA in `@torch.compile()`; the script sets TORCHDYNAMO_DISABLE=1 so that
wrapper runs eagerly (the same `F.scaled_dot_product_attention` call, no compiler needed on a
CPU). flash_attn is not imported: the config keeps the hub's `flash_attention: false`. Every
upstream run computes in float32 from weights that are exactly representable in bfloat16, so the
stored bfloat16 file loads back to the very weights used here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TORCHDYNAMO_DISABLE"] = "1"  # before torch is imported
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from specbench import cpu_kernels  # noqa: E402 (os alone; no specbench dependency)

cpu_kernels.pin()  # the bf16 goldens are the AVX2 kernels' output, as the tests compare them

import argparse  # noqa: E402
import copy  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

FAST_DLLM = ("NVlabs/Fast-dLLM", "24cc59e75f20a6384bae8c905965bb090b96388e")
LLADA = ("ML-GSAI/LLaDA", "b7e6c3565f194352da44b38dd12b6970597309f3")
OUT = Path(__file__).resolve().parents[2] / "tests" / "goldens" / "llada"
MASK_ID = 126336
SEED = 20250627

# The hub's config.json for GSAI-ML/LLaDA-8B-Instruct, key for key, with tiny dimensions
# (d_model, n_heads, n_kv_heads, n_layers, mlp_hidden_size, max_sequence_length) swapped in.
CONFIG = {
    "activation_type": "silu",
    "alibi": False,
    "alibi_bias_max": 8.0,
    "architectures": ["LLaDAModelLM"],
    "attention_dropout": 0.0,
    "attention_layer_norm": False,
    "attention_layer_norm_with_affine": True,
    "auto_map": {
        "AutoConfig": "configuration_llada.LLaDAConfig",
        "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
        "AutoModel": "modeling_llada.LLaDAModelLM",
    },
    "bias_for_layer_norm": False,
    "block_group_size": 1,
    "block_type": "llama",
    "d_model": 8,
    "embedding_dropout": 0.0,
    "embedding_size": 126464,
    "eos_token_id": 126081,
    "flash_attention": False,
    "include_bias": False,
    "include_qkv_bias": False,
    "init_cutoff_factor": None,
    "init_device": "meta",
    "init_fn": "mitchell",
    "init_std": 0.02,
    "input_emb_norm": False,
    "layer_norm_type": "rms",
    "layer_norm_with_affine": True,
    "mask_token_id": MASK_ID,
    "max_sequence_length": 256,
    "mlp_hidden_size": 16,
    "mlp_ratio": 4,
    "model_type": "llada",
    "multi_query_attention": None,
    "n_heads": 2,
    "n_kv_heads": 2,
    "n_layers": 2,
    "pad_token_id": 126081,
    "precision": "amp_bf16",
    "residual_dropout": 0.0,
    "rms_norm_eps": 1e-05,
    "rope": True,
    "rope_full_precision": True,
    "rope_theta": 500000.0,
    "scale_logits": False,
    "transformers_version": "4.46.3",
    "use_cache": False,
    "vocab_size": 126464,
    "weight_tying": False,
}

# Weight std per parameter-name suffix: wide enough that greedy top-1/top-2 gaps are far from
# float ties and that the confidence of a prediction often passes the threshold cases' 0.9.
STD = {"wte.weight": 1.0, "transformer.ff_out.weight": 4.0}
BLOCK_STD = 0.6
NORM_JITTER = 0.2
THRESHOLDS = (0.9, 0.5)  # 0.9 as the task asks; 0.5 commits several tokens more often
PROMPT_LENGTHS = (5, 11, 17)


def load_module(name: str, path: Path):
    """Import one upstream file under a unique name (both repos call theirs generate.py)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build_model(fast_dllm: Path):
    """The upstream LLaDAModelLM with seeded weights rounded to bfloat16 values, in float32."""
    sys.path.insert(0, str(fast_dllm / "llada"))
    from model.configuration_llada import LLaDAConfig
    from model.modeling_llada import LLaDAModelLM

    config = LLaDAConfig(**{k: v for k, v in CONFIG.items() if k != "model_type"})
    model = LLaDAModelLM(config, init_params=False).float().eval()
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("norm.weight") or name.endswith("ln_f.weight"):
                value = 1.0 + NORM_JITTER * noise
            else:
                std = next((s for key, s in STD.items() if name.endswith(key)), BLOCK_STD)
                value = std * noise
            param.copy_(value.to(torch.bfloat16).float())
    return model


def save_checkpoint(model) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, OUT / "model.safetensors", metadata={"format": "pt"})


def prompts() -> list[list[int]]:
    """Seeded random ids below LLaDA's special-token range (126080 on), so no mask/eos/bos."""
    generator = torch.Generator().manual_seed(SEED + 1)
    return [torch.randint(0, 126000, (n,), generator=generator).tolist() for n in PROMPT_LENGTHS]


def logits_golden(model) -> dict:
    """One batch-2 forward over prompt + masked canvas, as a decoder's first step feeds it, in
    float32 and (as "bfloat16", same input and columns) with the upstream model cast to bf16."""
    generator = torch.Generator().manual_seed(SEED + 2)
    rows = [torch.randint(0, 126000, (12,), generator=generator).tolist() + [MASK_ID] * 8]
    rows.append(torch.randint(0, 126000, (20,), generator=generator).tolist())
    rows[1][5] = rows[1][13] = MASK_ID
    columns = torch.randperm(CONFIG["vocab_size"], generator=generator)[:512].sort().values
    golden = {"input_ids": rows, "positions": "all", "columns": columns.tolist()}
    golden |= logits_summary(model, rows, columns)
    golden["bfloat16"] = logits_summary(copy.deepcopy(model).to(torch.bfloat16), rows, columns)
    return golden


def logits_summary(model, rows: list[list[int]], columns: torch.Tensor) -> dict:
    with torch.no_grad():
        logits = model(torch.tensor(rows)).logits.float()
    return {
        "values": logits[:, :, columns].tolist(),
        "argmax": logits.argmax(-1).tolist(),
        "logsumexp": torch.logsumexp(logits, -1).tolist(),
    }


class ForwardCounter:
    """Counts calls of the upstream model's forward (one per denoiser evaluation) and keeps,
    over the masked positions each call fed, the smallest top-1/top-2 logit gap, the smallest
    gap between two confidences (float64 softmax of the top-1) and the smallest distance of a
    confidence from the case's threshold: how far each decision is from a float tie."""

    def __init__(self, model):
        self.inner = model.forward
        model.forward = self
        self.reset(None)

    def reset(self, threshold: float | None) -> None:
        self.calls = 0
        self.threshold = threshold
        self.margins = {"logit_gap": float("inf"), "confidence_gap": float("inf")}
        if threshold is not None:
            self.margins["threshold_gap"] = float("inf")

    def __call__(self, input_ids, *args, **kwargs):
        self.calls += 1
        out = self.inner(input_ids, *args, **kwargs)
        masked = input_ids[0] == MASK_ID
        if masked.any():
            self.observe(out.logits[0, masked].double())
        return out

    def observe(self, logits: torch.Tensor) -> None:
        top = logits.topk(2, dim=-1).values
        confidence = torch.softmax(logits, -1).max(-1).values.sort().values
        gaps = {"logit_gap": (top[:, 0] - top[:, 1]).min()}
        if len(confidence) > 1:
            gaps["confidence_gap"] = confidence.diff().min()
        if self.threshold is not None:
            gaps["threshold_gap"] = (confidence - self.threshold).abs().min()
        for key, gap in gaps.items():
            self.margins[key] = min(self.margins[key], float(gap))


def case_specs() -> list[tuple[str, str, str, dict]]:
    """(id, repo key, function name, arguments besides model and prompt)."""
    specs = []
    for name, gen, steps, block in [
        ("one_block", 16, 16, 16),
        ("blocks_fewer_steps", 24, 12, 8),
        ("blocks_uneven_steps", 24, 9, 8),
        ("blocks_full_steps", 24, 24, 8),
    ]:
        args = {"steps": steps, "gen_length": gen, "block_length": block}
        llada = {**args, "attention_mask": None, "temperature": 0.0, "cfg_scale": 0.0}
        llada |= {"remasking": "low_confidence", "mask_id": MASK_ID}
        llada |= {"logits_eos_inf": False, "confidence_eos_eot_inf": False}
        specs.append((f"llada_generate_{name}", "llada", "generate", llada))
    for function in ("generate", "generate_with_prefix_cache", "generate_with_dual_cache"):
        runs = [(None, 12), (None, 24)] + [(threshold, 24) for threshold in THRESHOLDS]
        for threshold, steps in runs:
            args = {"steps": steps, "gen_length": 24, "block_length": 8, "temperature": 0.0}
            args |= {"remasking": "low_confidence", "mask_id": MASK_ID, "threshold": threshold}
            rule = "fixed" if threshold is None else f"threshold{threshold}"
            specs.append((f"fastdllm_{function}_{rule}_s{steps}", "fast", function, args))
    return specs


def run_cases(model, modules: dict, counter: ForwardCounter) -> list[dict]:
    cases = []
    for prompt_index, prompt in enumerate(prompts()):
        for case_id, repo, function, args in case_specs():
            counter.reset(args.get("threshold"))
            out = getattr(modules[repo], function)(model, torch.tensor([prompt]), **args)
            tokens, nfe = (out, None) if repo == "llada" else out
            record = {
                "id": f"{case_id}_p{prompt_index}",
                "function": ("generate." if repo == "llada" else "llada.generate.") + function,
                "repo": (LLADA if repo == "llada" else FAST_DLLM)[0],
                "args": args,
                "prompt": prompt,
                "tokens": tokens[0, len(prompt) :].tolist(),
                "forwards": counter.calls,
                "margins": counter.margins,
            }
            if nfe is not None:
                record["nfe"] = int(nfe)
                assert nfe == counter.calls, (case_id, nfe, counter.calls)
            cases.append(record)
    return cases


def summarise(cases: list[dict]) -> None:
    """Print what the threshold cases did, so the chosen threshold is seen to bite."""
    for case in cases:
        gen = case["args"]["gen_length"]
        margins = " ".join(f"{k}={v:.2e}" for k, v in case["margins"].items())
        print(f"{case['id']:56s} forwards={case['forwards']:3d} gen={gen} {margins}")
        assert MASK_ID not in case["tokens"], case["id"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fast_dllm", type=Path, help="checkout of NVlabs/Fast-dLLM")
    parser.add_argument("llada", type=Path, help="checkout of ML-GSAI/LLaDA")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="float32 writes the checkpoint and goldens.json; bfloat16 runs the same weights "
        "cast to bf16 (as the checkpoint loads) and writes goldens_bfloat16.json (the cases)",
    )
    paths = parser.parse_args()
    torch.manual_seed(SEED)
    model = build_model(paths.fast_dllm)
    if paths.dtype == "float32":
        save_checkpoint(model)
    modules = {
        "fast": load_module("fastdllm_generate", paths.fast_dllm / "llada" / "generate.py"),
        "llada": load_module("llada_generate", paths.llada / "generate.py"),
    }
    golden = {
        "upstream": [
            {
                "repo": FAST_DLLM[0],
                "commit": FAST_DLLM[1],
                "files": [
                    "llada/model/modeling_llada.py",
                    "llada/model/configuration_llada.py",
                    "llada/generate.py",
                ],
            },
            {"repo": LLADA[0], "commit": LLADA[1], "files": ["generate.py"]},
        ],
    }
    if paths.dtype == "bfloat16":
        model = model.to(torch.bfloat16)
        golden["dtype"] = "bfloat16"
    else:
        golden["logits"] = logits_golden(model)
    counter = ForwardCounter(model)
    golden["cases"] = run_cases(model, modules, counter)
    summarise(golden["cases"])
    name = "goldens.json" if paths.dtype == "float32" else f"goldens_{paths.dtype}.json"
    (OUT / name).write_text(json.dumps(golden) + "\n")


if __name__ == "__main__":
    main()
