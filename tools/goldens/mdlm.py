"""Golden fixtures for the native MDLM class and SpecDiff's MDLM drafting, made by running
upstream code.

Upstream: kuleshov-group/mdlm at c112c526d193436838c98d81455ee51f90309470
(models/dit.py: the DiT backbone; diffusion.py: `Diffusion._sample`, `_ddpm_caching_update`,
`_sample_categorical`, `forward`, `_process_sigma`, `_subs_parameterization`;
noise_schedule.py: `LogLinearNoise`).

The hub class (kuleshov-group/mdlm-owt, modeling_mdlm.py, model_type "mdlm") is not in any
mirror, and no unmodified public copy of it was found. Vendored copies (and the patch lists of
CPU forks of it) show it is models/dit.py's DIT with the config keys flattened (hidden_dim,
cond_dim, n_blocks, n_heads, dropout, time_conditioning), `DITBackbone.forward` zeroing sigma
when time_conditioning is false, and `MDLM(PreTrainedModel)` holding it as `backbone`,
returning `MaskedLMOutput` or bare logits by `return_dict`. `HubMDLM` below wraps the
upstream DIT exactly that way, so the parameter names are the hub's
(backbone.vocab_embed.embedding, backbone.rotary_emb.inv_freq, backbone.blocks.N...).

Stand-ins (upstream imports that cannot run on CPU): a `flash_attn` module computing
`apply_rotary_emb_qkv_` (in float32, rotating q and k only, split halves) and
`flash_attn_varlen_qkvpacked_func` (non-causal softmax attention, scale 1/sqrt(head_dim)) with
torch; empty modules for diffusion.py's training-only imports (lightning, torchmetrics, hydra,
dataloader, utils). `Diffusion` itself needs a tokenizer and a GPT-2-large download to build, so
its methods run unbound on `StandIn`, an object with only the attributes they read.

The drafting cases run `Diffusion._sample` with `sampler='ddpm_cache'`, `noise_removal=True`,
the loglinear noise and eps 1e-5, batch 1, after seeding the global RNG with `torch.manual_seed`
(upstream's Gumbel draws use `torch.rand_like`). The only change: `_sample_prior` returns a clean
prompt followed by gamma mask tokens instead of all masks, which is how SpecDiff drafts (the
prompt is never changed: `_ddpm_caching_update` copies every unmasked position).

Rerun (from the repository root, with the upstream environment):
    <python with torch and transformers 4.49> tools/goldens/mdlm.py <kuleshov-group/mdlm checkout>
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import types
from pathlib import Path

import torch
import transformers
import transformers.modeling_outputs
import transformers.modeling_utils  # before the flash_attn stand-in, which has no import spec
from safetensors.torch import load_file, save_file

MDLM_COMMIT = "c112c526d193436838c98d81455ee51f90309470"
OUT = Path(__file__).resolve().parents[2] / "tests" / "goldens" / "mdlm"
VOCAB, MASK_ID, EOS_ID = 50258, 50257, 50256
EPS = 1e-5
TINY = {"hidden_dim": 16, "cond_dim": 16, "n_blocks": 2, "n_heads": 2, "dropout": 0.1}
# (gamma, T, eps): upstream's eps 1e-5 reveals every position by the last step; eps 0.3
# leaves some masked, so the final argmax ("noise removal") decides them
DRAFTS = [(8, 1, EPS), (8, 4, EPS), (16, 8, EPS), (4, 16, EPS), (16, 2, 0.3)]
PROMPT_LENGTHS = [5, 12, 23]
SEEDS = [0, 1]


# --------------------------------------------------------------------------- stand-ins


def rotary_qkv_(qkv, cos, sin, *args, **kwargs):
    """flash_attn.layers.rotary.apply_rotary_emb_qkv_ (non-interleaved): q and k rotated in
    float32 with cos/sin [seq, head_dim / 2], written back in qkv's dtype; v untouched."""
    half = cos.shape[-1]
    cos, sin = cos.float()[None, :, None, :], sin.float()[None, :, None, :]
    for i in (0, 1):
        x = qkv[:, :, i].float()
        x1, x2 = x[..., :half], x[..., half : 2 * half]
        rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        qkv[:, :, i, :, : 2 * half] = rotated.to(qkv.dtype)
    return qkv


def varlen_qkvpacked(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, causal=False, **kwargs):
    """flash_attn_varlen_qkvpacked_func: qkv [(b s), 3, h, d] -> [(b s), h, d], no mask."""
    assert not causal and dropout_p == 0.0
    out = []
    for lo, hi in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
        q, k, v = (qkv[lo:hi, i].transpose(0, 1) for i in range(3))  # [h, s, d]
        scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        out.append((scores.softmax(-1) @ v.float()).transpose(0, 1).to(qkv.dtype))
    return torch.cat(out, dim=0)


def install_stand_ins(checkout: Path) -> types.ModuleType:
    """Stub modules for what upstream imports but the sampler never uses; returns diffusion."""
    flash = types.ModuleType("flash_attn")
    flash.layers = types.ModuleType("flash_attn.layers")
    flash.layers.rotary = types.ModuleType("flash_attn.layers.rotary")
    flash.layers.rotary.apply_rotary_emb_qkv_ = rotary_qkv_
    flash.flash_attn_interface = types.ModuleType("flash_attn.flash_attn_interface")
    flash.flash_attn_interface.flash_attn_varlen_qkvpacked_func = varlen_qkvpacked
    sys.modules.update(
        {
            "flash_attn": flash,
            "flash_attn.layers": flash.layers,
            "flash_attn.layers.rotary": flash.layers.rotary,
            "flash_attn.flash_attn_interface": flash.flash_attn_interface,
        }
    )
    lightning = types.ModuleType("lightning")
    lightning.LightningModule = torch.nn.Module
    metrics = types.ModuleType("torchmetrics")
    metrics.aggregation = types.SimpleNamespace(MeanMetric=object)
    hydra = types.ModuleType("hydra")
    hydra.utils = types.ModuleType("hydra.utils")
    for name, module in {
        "lightning": lightning,
        "torchmetrics": metrics,
        "hydra": hydra,
        "hydra.utils": hydra.utils,
        "dataloader": types.ModuleType("dataloader"),
        "utils": types.ModuleType("utils"),
    }.items():
        sys.modules[name] = module
    sys.path.insert(0, str(checkout))
    models = types.ModuleType("models")  # models/__init__ also imports mamba; only dit is used
    models.__path__ = [str(checkout / "models")]
    sys.modules["models"] = models
    import diffusion
    import models.dit  # noqa: F401

    return diffusion


# --------------------------------------------------------------------------- the hub class


class HubMDLMConfig(transformers.PretrainedConfig):
    model_type = "mdlm"

    def __init__(
        self,
        vocab_size=50258,
        model_length=1024,
        hidden_dim=768,
        cond_dim=128,
        n_blocks=12,
        n_heads=12,
        dropout=0.1,
        time_conditioning=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size, self.model_length = vocab_size, model_length
        self.hidden_dim, self.cond_dim = hidden_dim, cond_dim
        self.n_blocks, self.n_heads, self.dropout = n_blocks, n_heads, dropout
        self.time_conditioning = time_conditioning


def hub_model_class(dit):
    class HubMDLM(transformers.modeling_utils.PreTrainedModel):
        """The hub's MDLM wrapper around upstream's DIT (see the module docstring)."""

        config_class = HubMDLMConfig
        base_model_prefix = "mdlm"

        def __init__(self, config):
            super().__init__(config)
            model = {
                "hidden_size": config.hidden_dim,
                "cond_dim": config.cond_dim,
                "n_blocks": config.n_blocks,
                "n_heads": config.n_heads,
                "dropout": config.dropout,
                "scale_by_sigma": True,
            }
            self.backbone = dit.DIT({"model": model}, vocab_size=config.vocab_size)

        def _init_weights(self, module):
            pass  # weights are set by `randomise`

        def forward(self, input_ids=None, timesteps=None, return_dict=None):
            if not self.config.time_conditioning:
                timesteps = torch.zeros_like(timesteps)
            logits = self.backbone(input_ids, timesteps)
            return_dict = self.config.use_return_dict if return_dict is None else return_dict
            if return_dict:
                return transformers.modeling_outputs.MaskedLMOutput(logits=logits)
            return logits

    return HubMDLM


def randomise(model: torch.nn.Module) -> None:
    """Wide weights (upstream zero-initialises adaLN and the output layer, which would make every
    logit 0): distinct logits with gaps far from float ties, and a sigma that matters."""
    torch.manual_seed(1234)
    for name, p in model.named_parameters():
        if "norm" in name:
            p.data = 1.0 + 0.2 * torch.randn_like(p)
        elif "embedding" in name:
            p.data = torch.randn_like(p)
        elif "output_layer.linear.weight" in name:
            p.data = 0.2 * torch.randn_like(p)
        elif "adaLN_modulation" in name:
            p.data = 0.1 * torch.randn_like(p)
        elif "sigma_map" in name:
            p.data = 0.5 * torch.randn_like(p)
        else:
            p.data = torch.randn_like(p) / math.sqrt(p.shape[-1])


def write_checkpoint(HubMDLM, out: Path) -> None:
    """config.json as the hub has it (time conditioning off; `return_dict` false, which the hub
    file needs for diffusion.py's `self.backbone(x, sigma)` to get a tensor) plus a variant with
    time conditioning on; one safetensors file, weights in bfloat16 (inv_freq in float32) to keep it small."""
    config = HubMDLMConfig(vocab_size=VOCAB, model_length=1024, return_dict=False, **TINY)
    config.architectures = ["MDLM"]
    config.auto_map = {
        "AutoConfig": "configuration_mdlm.MDLMConfig",
        "AutoModelForMaskedLM": "modeling_mdlm.MDLM",
    }
    model = HubMDLM(config)
    randomise(model)
    state = {
        k: v.contiguous() if k.endswith("inv_freq") else v.to(torch.bfloat16).contiguous()
        for k, v in model.state_dict().items()
    }
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    for name, time_conditioning in (("config.json", False), ("config_tc.json", True)):
        config.time_conditioning = time_conditioning
        text = json.loads(config.to_json_string(use_diff=False))
        for key in ("_name_or_path", "transformers_version", "torch_dtype", "dtype"):
            text.pop(key, None)
        keep = set(TINY) | {"vocab_size", "model_length", "time_conditioning", "return_dict"}
        keep |= {"architectures", "auto_map", "model_type"}
        text = {k: v for k, v in sorted(text.items()) if k in keep}
        text["torch_dtype"] = "float32"  # as the hub's; the stored weights are bf16-rounded
        (out / name).write_text(json.dumps(text, indent=2) + "\n")


def load_upstream(HubMDLM, out: Path, time_conditioning: bool):
    config = HubMDLMConfig(**json.loads((out / "config.json").read_text()))
    config.time_conditioning = time_conditioning
    model = HubMDLM(config)
    state = {k: v.float() for k, v in load_file(str(out / "model.safetensors")).items()}
    model.load_state_dict(state, strict=True)
    return model.float().eval()


# --------------------------------------------------------------------------- running upstream


class StandIn:
    """Holds only what `Diffusion._sample` and the methods it calls read."""

    def __init__(self, diffusion, noise_schedule, backbone, time_conditioning, prior):
        cfg = {
            "loader": {"eval_batch_size": 1},
            "model": {"length": prior.shape[1]},
            "sampling": {"steps": None, "noise_removal": True},
            "noise": {"type": "loglinear"},
        }
        self.config = json.loads(json.dumps(cfg), object_hook=lambda d: types.SimpleNamespace(**d))
        self.backbone, self.prior = backbone, prior
        self.noise = noise_schedule.LogLinearNoise()
        self.parameterization, self.sampler = "subs", "ddpm_cache"
        self.time_conditioning = time_conditioning
        self.mask_index, self.neg_infinity = MASK_ID, -1000000.0
        self.device = torch.device("cpu")
        for name in ("forward", "_process_sigma", "_subs_parameterization"):
            setattr(self, name, types.MethodType(getattr(diffusion.Diffusion, name), self))
        self._ddpm_caching_update = types.MethodType(diffusion.Diffusion._ddpm_caching_update, self)

    def _sample_prior(self, *batch_dims):
        return self.prior.clone()


def count_forwards(model):
    """Wraps model.forward; returns the list of input ids each call saw."""
    seen = []
    inner = model.forward

    def forward(*args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        seen.append(ids[0].tolist())
        return inner(*args, **kwargs)

    model.forward = forward
    return seen


def logits_golden(model, generator: torch.Generator, timesteps: list[float] | None) -> dict:
    ids = torch.randint(0, EOS_ID, (2, 24), generator=generator)
    ids[0, 5:9] = MASK_ID
    ids[1, ::3] = MASK_ID
    columns = torch.randperm(MASK_ID, generator=generator)[:511]
    columns = torch.cat([columns, torch.tensor([MASK_ID])]).sort().values  # the mask's too
    sigma = torch.tensor(timesteps or [0.0, 0.0])
    with torch.no_grad():
        logits = model(input_ids=ids, timesteps=sigma, return_dict=True).logits.float()
    return {
        "input_ids": ids.tolist(),
        "timesteps": sigma.tolist(),
        "positions": "all",
        "columns": columns.tolist(),
        "values": logits[:, :, columns].tolist(),
        "argmax": logits.argmax(-1).tolist(),
        "logsumexp": logits.logsumexp(-1).tolist(),
    }


def prompts(generator: torch.Generator) -> list[list[int]]:
    return [torch.randint(0, EOS_ID, (n,), generator=generator).tolist() for n in PROMPT_LENGTHS]


def draft_case(diffusion, noise_schedule, model, tc, prompt, draft, seed) -> dict:
    gamma, steps, eps = draft
    prior = torch.tensor([prompt + [MASK_ID] * gamma])
    stand_in = StandIn(diffusion, noise_schedule, model, tc, prior)
    seen = count_forwards(model)
    torch.manual_seed(seed)
    with torch.no_grad():
        x = diffusion.Diffusion._sample(stand_in, num_steps=steps, eps=eps)
    del model.forward  # drop the counting wrapper
    before_removal = seen[-1][len(prompt) :]
    # whether the denoiser output cached before the final argmax is stale: x changed after the
    # last forward of the T steps (with time conditioning upstream never reuses one)
    stale = len(seen) < 2 or seen[-2] != seen[-1] or tc
    return {
        "id": f"{'tc' if tc else 'notc'}-g{gamma}-T{steps}-e{eps:g}-p{len(prompt)}-s{seed}",
        "function": "diffusion.Diffusion._sample (ddpm_cache -> _ddpm_caching_update)",
        "args": {
            "num_steps": steps,
            "eps": eps,
            "sampler": "ddpm_cache",
            "noise": "loglinear (eps 1e-3)",
            "noise_removal": True,
            "mask_index": MASK_ID,
            "neg_infinity": -1000000.0,
            "time_conditioning": tc,
            "gamma": gamma,
            "prior": "prompt + [mask] * gamma",
            "global_seed": seed,
        },
        "prompt": prompt,
        "tokens": x[0, len(prompt) :].tolist(),
        "forwards": len(seen),
        "masked_before_noise_removal": before_removal.count(MASK_ID),
        "cache_stale_at_noise_removal": bool(stale),
    }


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: tools/goldens/mdlm.py <kuleshov-group/mdlm checkout>")
    checkout = Path(sys.argv[1])
    diffusion = install_stand_ins(checkout)
    import models.dit as dit
    import noise_schedule

    HubMDLM = hub_model_class(dit)
    write_checkpoint(HubMDLM, OUT)
    generator = torch.Generator().manual_seed(2024)
    upstream = {False: load_upstream(HubMDLM, OUT, False), True: load_upstream(HubMDLM, OUT, True)}
    goldens = {
        "upstream": [
            {
                "repo": "kuleshov-group/mdlm",
                "commit": MDLM_COMMIT,
                "files": ["models/dit.py", "diffusion.py", "noise_schedule.py"],
            }
        ],
        "hub_class": "models/dit.py DIT wrapped as the hub's MDLM (see tools/goldens/mdlm.py)",
        "mask_id": MASK_ID,
        "logits": logits_golden(upstream[False], generator, None),
        "logits_tc": logits_golden(upstream[True], generator, [0.3, 2.5]),
        "cases": [],
    }
    goldens["logits_tc"]["config"] = "config_tc.json"
    for tc in (False, True):
        for prompt in prompts(generator):
            for draft in DRAFTS:
                for seed in SEEDS:
                    goldens["cases"].append(
                        draft_case(diffusion, noise_schedule, upstream[tc], tc, prompt, draft, seed)
                    )
    (OUT / "goldens.json").write_text(json.dumps(goldens) + "\n")
    revision = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"wrote {OUT} ({len(goldens['cases'])} cases; checkout HEAD {revision or 'n/a'})")


if __name__ == "__main__":
    main()
