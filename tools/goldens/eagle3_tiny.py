"""Golden fixtures for specbench's EAGLE-3 drafter on the committed tiny world, made by running
upstream code: the committed `tiny-eagle3` (stored in float16) run in float32 on features of the
committed `tiny` target, as `drafter=tiny-eagle3` runs on `target=tiny`.

Upstream: SafeAILab/EAGLE at cb7e0841fe0c206c6ed74a197ad5e2a1f13f5a2b, `eagle/model/cnets.py`
(`Model`, built as `EaModel` builds it: float32, the checkpoint's tensors copied in, the
target's embeddings), imported from the checkout's `eagle/model` folder named on the command
line, never copied into this repository; the helpers of tools/goldens/eagle3.py are reused:

    python tools/goldens/eagle3_tiny.py /path/to/EAGLE tests/goldens/eagle3/tiny <commit>

For each of the first PROMPTS `tiny_code` prompts, the target's greedy continuation of TOKENS
tokens (plain argmax, float32, transformers' Llama) and the inputs of the target layers the
drafter reads (`eagle_aux_hidden_state_layer_ids`) over it; then, for contexts cut every STRIDE
tokens of that continuation, upstream's `topK_genrate` (depth 7, top_k 10, total_tokens 60:
specbench's gamma 8, top_k 10, budget 59) from a fresh drafter cache. It writes:
  * `trees.json`: per prompt its ids; per cut the context length, the tree (root, tokens,
    parents) and the row of `logits.safetensors` holding the context forward's draft logits;
  * `logits.safetensors`: `context` [cuts, draft vocabulary], float32.
The features are not stored: the test recomputes them with the same transformers model.
"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).parent))
from eagle3 import EConfig, cnets, tree_parents  # noqa: E402  upstream's, through the fixture's

TINY = Path(__file__).parents[2] / "specbench" / "models" / "tiny" / "checkpoints"
PROMPTS, TOKENS, STRIDE = 3, 48, 4
TOP_K, DEPTH, TOTAL = 10, 7, 60


def drafter(embedding: torch.Tensor):
    """Upstream's Model from the committed checkpoint, as EaModel loads it, in float32."""
    config = TINY / "tiny-eagle3" / "config.json"
    econfig = EConfig.from_pretrained(config)
    # as tools/goldens/eagle3.py: the legacy attributes upstream reads, as transformers 4 set
    econfig.rope_scaling = None
    econfig.rope_theta = json.loads(config.read_text())["rope_theta"]
    model = cnets.Model(econfig, load_emb=False, total_tokens=TOTAL, depth=DEPTH, top_k=TOP_K)
    model.embed_tokens.weight.data = embedding.clone()
    model.load_state_dict(load_file(TINY / "tiny-eagle3" / "model.safetensors"), strict=False)
    model.init_tree()
    return model.float().eval()


@torch.no_grad()
def continuation(target: LlamaForCausalLM, prompt: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt])
    for _ in range(TOKENS):
        ids = torch.cat([ids, target(ids).logits[:, -1:].argmax(-1)], 1)
    return ids


@torch.no_grad()
def tree_at(model, features: torch.Tensor, ids: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """Upstream's tree after `ids` [1, c] from `features` [1, c - 1, 3h], and the context
    forward's draft logits (the first the head computes)."""
    rows: list[torch.Tensor] = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: rows.append(out))
    model.reset_kv()
    tokens, _, tree_mask, positions = model.topK_genrate(features, ids, None, None)
    hook.remove()
    tree = {
        "root": int(tokens[0, 0]),
        "tokens": tokens[0, 1:].tolist(),
        "parents": tree_parents(tree_mask[0, 0].bool(), positions.tolist()),
    }
    return tree, rows[0].reshape(-1)


def main() -> None:
    out, commit = Path(sys.argv[2]), sys.argv[3]
    tokenizer = AutoTokenizer.from_pretrained(TINY / "tiny")
    target = LlamaForCausalLM.from_pretrained(TINY / "tiny", dtype=torch.float32).eval()
    model = drafter(target.model.embed_tokens.weight.detach())
    reads = model.config.eagle_aux_hidden_state_layer_ids
    lines = (TINY / "tiny_code.jsonl").read_text().splitlines()[:PROMPTS]
    prompts, logits = [], []
    for line in lines:
        prompt = tokenizer(json.loads(line)["prompt"])["input_ids"]
        ids = continuation(target, prompt)
        with torch.no_grad():
            states = target(ids, output_hidden_states=True).hidden_states
        features = torch.cat([states[i] for i in reads], -1)
        cuts = []
        for length in range(len(prompt) + 1, ids.shape[1] + 1, STRIDE):
            tree, row = tree_at(model, features[:, : length - 1], ids[:, :length])
            cuts.append({"length": length, "logits_row": len(logits), "tree": tree})
            logits.append(row)
        prompts.append({"ids": ids[0].tolist(), "prompt_length": len(prompt), "cuts": cuts})
    source = {
        "repo": "SafeAILab/EAGLE",
        "commit": commit,
        "code": "eagle/model/cnets.py: Model.topK_genrate (the context forward from an empty "
        "cache, then EAGLE-2/3's dynamic tree) on the committed tiny-eagle3 in float32, fed "
        "the committed tiny target's layer inputs; run outside the repository by "
        "tools/goldens/eagle3_tiny.py",
        "settings": {"top_k": TOP_K, "depth": DEPTH, "total_tokens": TOTAL},
        "note": "a cut of length c: the context is ids[:c], its features the target's at "
        "positions 0..c-2 (feature i pairs with ids[i + 1]), the root ids[c - 1]; tokens are "
        "target ids, parents index the tokens list (-1: the root); logits_row: the row of "
        "logits.safetensors' `context` holding the draft logits that predict the root's child",
    }
    out.mkdir(parents=True, exist_ok=True)
    payload = {"source": source, "prompts": prompts}
    (out / "trees.json").write_text(json.dumps(payload, indent=1) + "\n")
    save_file({"context": torch.stack(logits).contiguous()}, out / "logits.safetensors")


if __name__ == "__main__":
    main()
