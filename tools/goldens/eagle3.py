"""Golden fixtures for specbench's EAGLE-3 drafter (`specbench/models/eagle3.py`,
`specbench/decoding/drafters/eagle3/method.py`), made by running upstream code.

Upstream: SafeAILab/EAGLE at cb7e0841fe0c206c6ed74a197ad5e2a1f13f5a2b, `eagle/model/cnets.py`
(`Model`, EAGLE-3's drafter, and its `topK_genrate`, EAGLE-2/3's dynamic tree), imported from
the checkout's `eagle/model` folder named on the command line (its `configs.py` supplies
`EConfig`), never copied into this repository:

    python tools/goldens/eagle3.py /path/to/EAGLE tests/goldens/eagle3 <commit>

It writes, under the output folder:
  * `eagle-layout/`: a seeded random drafter in the layout of
    yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, shrunk (hidden 64, 4 heads, 2 key-value heads,
    vocabulary 256, draft vocabulary 96): its config.json keys and pytorch_model.bin tensors
    (`fc.weight`, `midlayer.*`, `norm.weight`, `lm_head.weight`, `d2t`, `t2d`; no embeddings);
  * `target_embedding.safetensors`: the target embeddings the drafter reads;
  * `goldens.json`: per case (random ids and fused-layer features), upstream's context-forward
    logits, a greedy chain of 3 drafts fed back with the drafter's own states and its logits,
    and the dynamic tree `topK_genrate` builds (top_k 3, depth 3, total_tokens 11) with every
    drafter forward's logits.

Stand-in: under transformers 5 the config folds `rope_theta` into `rope_parameters` and leaves
a `rope_scaling` dict without upstream's "type" key; the script sets the legacy attributes
upstream reads (`rope_scaling=None`, `rope_theta`), which is what transformers 4 gave it.
"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(sys.argv[1]) / "eagle" / "model"))
import cnets  # noqa: E402  upstream's
from configs import EConfig  # noqa: E402

H, HEADS, KV, FFN, V, VD = 64, 4, 2, 128, 256, 96
CONFIG = {  # the keys of yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's config.json, shrunk
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 128000 % V,
    "eos_token_id": 128001 % V,
    "hidden_act": "silu",
    "hidden_size": H,
    "initializer_range": 0.02,
    "intermediate_size": FFN,
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
    "num_hidden_layers": 1,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "transformers_version": "4.28.1",
    "use_cache": True,
    "vocab_size": V,
    "draft_vocab_size": VD,
}


def w(*shape: int, scale: float = 0.08) -> torch.Tensor:
    return torch.randn(*shape) * scale


def fixture() -> tuple[dict, torch.Tensor]:
    """The drafter's tensors under upstream's names, and the target's embeddings."""
    torch.manual_seed(0)
    kept = torch.randperm(V)[:VD].sort().values
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[kept] = True
    state = {
        "fc.weight": w(H, 3 * H),
        "midlayer.hidden_norm.weight": 1 + w(H, scale=0.1),
        "midlayer.input_layernorm.weight": 1 + w(H, scale=0.1),
        "midlayer.post_attention_layernorm.weight": 1 + w(H, scale=0.1),
        "midlayer.self_attn.q_proj.weight": w(H, 2 * H),
        "midlayer.self_attn.k_proj.weight": w(KV * H // HEADS, 2 * H),
        "midlayer.self_attn.v_proj.weight": w(KV * H // HEADS, 2 * H),
        "midlayer.self_attn.o_proj.weight": w(H, H),
        "midlayer.mlp.gate_proj.weight": w(FFN, H),
        "midlayer.mlp.up_proj.weight": w(FFN, H),
        "midlayer.mlp.down_proj.weight": w(H, FFN),
        "norm.weight": 1 + w(H, scale=0.1),
        "lm_head.weight": w(VD, H, scale=0.5),
        "d2t": kept - torch.arange(VD),
        "t2d": t2d,
    }
    return state, w(V, H, scale=1.0)


def upstream(config_path: Path, state: dict, embedding: torch.Tensor):
    """Upstream's Model as EaModel builds it (embeddings from the target, state loaded
    non-strictly), with the tree shape of the goldens."""
    econfig = EConfig.from_pretrained(config_path)
    econfig.rope_scaling, econfig.rope_theta = None, CONFIG["rope_theta"]  # see the docstring
    model = cnets.Model(econfig, load_emb=False, total_tokens=11, depth=3, top_k=3)
    model.embed_tokens.weight.data = embedding.clone()
    model.load_state_dict(state, strict=False)
    model.init_tree()
    return model.eval()


def rounded(rows: torch.Tensor) -> list:
    return [[round(x, 6) for x in row] for row in rows.tolist()]


@torch.no_grad()
def case(model, ids: torch.Tensor, features: torch.Tensor) -> dict:
    """The context forward, a greedy chain of 3 fed back with its own states, and the tree."""
    states, kv = model(features, input_ids=ids[:, 1:], use_cache=True)
    logits = [model.lm_head(model.norm(states))[0]]
    chain, last = [], states[:, -1:]
    for _ in range(3):
        draft = int(logits[-1][-1].argmax())
        chain.append(draft + int(model.d2t[draft]))
        last, kv = model(
            last, input_ids=torch.tensor([[chain[-1]]]), past_key_values=kv, use_cache=True
        )
        logits.append(model.lm_head(model.norm(last))[0])
    model.reset_kv()
    levels: list[torch.Tensor] = []
    hook = model.lm_head.register_forward_hook(
        lambda module, args, out: levels.append(out.reshape(-1, VD))
    )
    tokens, _, tree_mask, positions = model.topK_genrate(features, ids, None, None)
    hook.remove()
    return {
        "ids": ids[0].tolist(),
        "features": rounded(features[0]),
        "context_logits": rounded(logits[0]),
        "chain": chain,
        "chain_logits": [[round(x, 6) for x in row[-1].tolist()] for row in logits[1:]],
        "tree": {
            "top_k": 3,
            "depth": 3,
            "total_tokens": 11,
            "root": int(tokens[0, 0]),
            "tokens": tokens[0, 1:].tolist(),
            "parents": tree_parents(tree_mask[0, 0].bool(), positions.tolist()),
            "level_logits": [rounded(level) for level in levels],
        },
    }


def tree_parents(tree_mask: torch.Tensor, positions: list[int]) -> list[int]:
    """Node i's parent (index into the nodes after the root; -1: the root): the earlier node
    it reads one position before it."""
    parents = []
    for i in range(1, len(positions)):
        above = [j for j in range(1, i) if tree_mask[i, j] and positions[j] == positions[i] - 1]
        parents.append(above[-1] - 1 if above else -1)
    return parents


def main() -> None:
    out, commit = Path(sys.argv[2]), sys.argv[3]
    state, embedding = fixture()
    layout = out / "eagle-layout"
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    torch.save(state, layout / "pytorch_model.bin")
    save_file({"weight": embedding}, out / "target_embedding.safetensors")
    g = torch.Generator().manual_seed(1)
    cases = []
    for i in range(3):
        n = 6 + 3 * i
        ids = torch.randint(0, V, (1, n + 1), generator=g)
        features = torch.randn(1, n, 3 * H, generator=g)
        cases.append(case(upstream(layout / "config.json", state, embedding), ids, features))
    source = {
        "repo": "SafeAILab/EAGLE",
        "commit": commit,
        "code": "eagle/model/cnets.py: Model.forward (the context forward, then a chain "
        "feeding back its own states) and Model.topK_genrate (EAGLE-2/3's dynamic tree); "
        "run outside the repository by tools/goldens/eagle3.py on the fixture in "
        "eagle-layout/ (random weights in the layout of yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, "
        "shrunk) with the target's embeddings from target_embedding.safetensors",
        "note": "feature i pairs with ids[i + 1]; the context logits' row i predicts "
        "ids[i + 2]; tokens are target ids (draft id + d2t); tree parents index the tokens "
        "list, -1 the root (the last id); upstream's depth 3 is a tree of depth 4; "
        "level_logits: each drafter forward's draft logits in upstream's row order (the "
        "expanded nodes by score)",
    }
    payload = {"source": source, "cases": cases}
    (out / "goldens.json").write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
