"""EAGLE-3: both published checkpoint layouts load into one drafter; its logits, chains and
dynamic trees are upstream's (goldens from SafeAILab/EAGLE's cnets.py run outside the
repository on a random fixture in the layout of yuhuili/EAGLE3-LLaMA3.1-Instruct-8B); the
training-time test reads exactly what drafting reads; greedy decoding is token-identical to the
target's on the tiny world, with drafts accepted; the kind refuses a checkpoint that cannot read
its target before any weight loads; `backend=vllm` runs a chain as vLLM's eagle3 and refuses a
tree (tests/test_vllm.py runs it)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig

from conftest import builtin, law_pvalue
from specbench import paths
from specbench.backends.vllm.backend import SPECULATIVE
from specbench.config import ModelConfig
from specbench.decoding.drafters.eagle3.config import Eagle3Config
from specbench.decoding.drafters.eagle3.method import Eagle3, Eagle3Proposer, bind
from specbench.decoding.plain import AutoregressiveDecoder
from specbench.decoding.warp import Warp
from specbench.errors import ConfigError
from specbench.models.causal import CausalLM
from specbench.models.eagle3 import (
    Eagle3Drafter,
    aux_layer_ids,
    eagle3_config,
    load_eagle3,
    save_eagle3,
)
from specbench.models.kinds.eagle3 import check_reads_target
from specbench.models.tiny.eagle3 import ttt_logits
from specbench.models.toy import V, exact_law, toy_lm
from specbench.registry import MODEL_KINDS

GOLDENS_DIR = Path(__file__).parent / "goldens" / "eagle3"
GOLDENS = json.loads((GOLDENS_DIR / "goldens.json").read_text())
TINY_GOLDENS = json.loads((GOLDENS_DIR / "tiny" / "trees.json").read_text())


@pytest.fixture(scope="module")
def fixture_drafter():
    """The fixture in EAGLE's layout (pytorch_model.bin, no embeddings), bound to the target
    embeddings the goldens were made with."""
    model = load_eagle3(GOLDENS_DIR / "eagle-layout")
    model.embedding = load_file(GOLDENS_DIR / "target_embedding.safetensors")["weight"]
    return model


def proposer(model, top_k: int | None = None, budget: int = 0) -> Eagle3Proposer:
    return Eagle3Proposer(model, (0, 1, 2), Warp(), set(), top_k=top_k, budget=budget)


def paths_of(tokens: list[int], parents: list[int]) -> set[tuple[int, ...]]:
    """A tree as the set of its root paths (node order and numbering aside)."""
    paths = []
    for parent, token in zip(parents, tokens):
        paths.append((paths[parent] if parent >= 0 else ()) + (token,))
    return set(paths)


def test_the_speculators_layout_loads_the_same_drafter(fixture_drafter, tmp_path) -> None:
    save_eagle3(fixture_drafter, tmp_path, speculators=True)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["speculators_model_type"] == "eagle3" and "transformer_layer_config" in raw
    stored = load_file(tmp_path / "model.safetensors")
    assert any(key.startswith("layers.0.") for key in stored)
    assert not any(key.startswith("midlayer.") for key in stored)
    again = load_eagle3(tmp_path)
    for (key, value), (_, other) in zip(
        fixture_drafter.state_dict().items(), again.state_dict().items()
    ):
        assert torch.equal(value, other), key


def test_the_context_forward_equals_upstreams(fixture_drafter) -> None:
    """Feature i with the token after it, causally: row i's logits predict ids[i + 2]."""
    for case in GOLDENS["cases"]:
        ids, features = torch.tensor(case["ids"]), torch.tensor(case["features"])
        n = len(features)
        with torch.no_grad():
            states, _ = fixture_drafter(
                ids[None, 1:],
                fixture_drafter.fuse(features[None]),
                torch.arange(n)[None],
                torch.ones(n, n, dtype=torch.bool).tril()[None],
            )
            logits = fixture_drafter.logits(states)[0]
        torch.testing.assert_close(
            logits, torch.tensor(case["context_logits"]), atol=1e-4, rtol=1e-4
        )


def recorded(drafter: Eagle3Proposer, ids: list[int], n: int) -> tuple[object, list]:
    """A draft of `n` after `ids` and the draft logits of each drafter forward it made."""
    rows: list[torch.Tensor] = []
    hook = drafter.model.lm_head.register_forward_hook(lambda module, args, out: rows.append(out))
    try:
        return drafter.draft(ids, n, torch.Generator()), rows
    finally:
        hook.remove()


def assert_same_rows(got: torch.Tensor, want: list[list[float]]) -> None:
    """The same rows in any order (upstream orders a level's nodes by score, specbench by
    node number)."""
    want_rows = torch.tensor(want)
    assert got.shape == want_rows.shape
    distance = torch.cdist(got, want_rows)
    assert sorted(distance.argmin(0).tolist()) == list(range(len(want_rows)))
    assert float(distance.min(0).values.max()) < 1e-3


def test_a_greedy_chain_equals_upstreams(fixture_drafter) -> None:
    """Each draft fed back with the state that predicted it, one position on, mapped to target
    ids by d2t; the drafts leave the cache."""
    for case in GOLDENS["cases"]:
        drafter = proposer(fixture_drafter)
        drafter.observe(torch.tensor(case["features"]))
        n = len(case["chain"]) + 1
        draft, rows = recorded(drafter, case["ids"], n)
        assert draft.tokens[:-1] == case["chain"]
        for got, want in zip(rows[1:], case["chain_logits"]):
            torch.testing.assert_close(got[0], torch.tensor(want), atol=1e-4, rtol=1e-4)
        assert draft.nfe == n  # the context's forward, then one per draft fed
        assert drafter.cached == len(case["features"])


def test_the_dynamic_tree_equals_upstreams(fixture_drafter) -> None:
    """Upstream's depth d grows d + 1 levels; its total_tokens counts the root. Each level's
    forward reads its nodes' ancestors, as upstream's tree mask lets it."""
    for case in GOLDENS["cases"]:
        tree = case["tree"]
        drafter = proposer(fixture_drafter, tree["top_k"], tree["total_tokens"] - 1)
        drafter.observe(torch.tensor(case["features"]))
        draft, rows = recorded(drafter, case["ids"], tree["depth"] + 1)
        assert case["ids"][-1] == tree["root"]
        assert paths_of(draft.tokens, draft.parents) == paths_of(tree["tokens"], tree["parents"])
        assert len(rows) == len(tree["level_logits"]) == draft.nfe
        for got, want in zip(rows, tree["level_logits"]):
            assert_same_rows(got, want)


def tiny_eagle3() -> tuple[CausalLM, Eagle3Drafter, tuple[int, ...]]:
    """tiny-eagle3 (stored in float16) as `drafter=tiny-eagle3` loads it for `target=tiny` in
    float32, bound to the target."""
    target = builtin("tiny")
    drafter = MODEL_KINDS["eagle3"]().load(
        ModelConfig(name="tiny-eagle3", name_or_path="specbench:tiny-eagle3", kind="eagle3"),
        "drafter",
        torch.device("cpu"),
        "float32",
    )
    return target, drafter, bind(drafter, target)


@pytest.fixture(scope="module")
def tiny_drafts() -> list[tuple[dict, object, torch.Tensor]]:
    """Per golden cut: its case, specbench's tree (upstream's settings, no stop tokens: a
    drafter's function) and the context forward's draft logits."""
    target, drafter, reads = tiny_eagle3()
    settings = TINY_GOLDENS["source"]["settings"]
    drafts = []
    for prompt in TINY_GOLDENS["prompts"]:
        ids = torch.tensor([prompt["ids"]])
        with torch.no_grad():
            states = target.model(ids, output_hidden_states=True).hidden_states
        features = torch.cat([states[i + 1] for i in reads], -1)[0]
        for cut in prompt["cuts"]:
            length = cut["length"]
            tree = proposer(drafter, settings["top_k"], settings["total_tokens"] - 1)
            tree.observe(features[: length - 1])
            draft, rows = recorded(tree, prompt["ids"][:length], settings["depth"] + 1)
            drafts.append((cut, draft, rows[0][0]))
    return drafts


def test_the_tiny_drafters_logits_equal_upstreams(tiny_drafts) -> None:
    """The committed drafter, stored in float16 and run in float32, is upstream's function:
    its rotary frequencies are float32, not rounded by the storage dtype (a rounded table moves
    these logits by about 2e-3)."""
    golden = load_file(GOLDENS_DIR / "tiny" / "logits.safetensors")["context"]
    for cut, _, logits in tiny_drafts:
        want = golden[cut["logits_row"]]
        torch.testing.assert_close(logits, want, atol=1e-4, rtol=0)


def test_the_tiny_drafters_trees_equal_upstreams_node_for_node(tiny_drafts) -> None:
    """Every cut's tree has upstream's nodes: where two nodes' scores are close at the budget
    edge, a rounded rotary table swaps one."""
    for cut, draft, _ in tiny_drafts:
        tree = cut["tree"]
        assert paths_of(draft.tokens, draft.parents) == paths_of(tree["tokens"], tree["parents"])
        assert len(draft.tokens) == len(tree["tokens"])


def test_the_target_layers_follow_upstreams_rule_unless_named() -> None:
    config = eagle3_config(json.loads((GOLDENS_DIR / "eagle-layout" / "config.json").read_text()))
    assert aux_layer_ids(config, 32) == [2, 16, 29]  # Llama 3.1 8B: the inputs of these layers
    config.aux_layer_ids = [1, 3, 5]
    assert aux_layer_ids(config, 6) == [1, 3, 5]


def toy_drafter(target, draft_vocab: int = V - 1, seed: int = 1):
    """A random EAGLE-3 drafter for the toy target (its embeddings, its layers 1-3) whose
    draft vocabulary lacks the last token, with weights large enough to prefer tokens."""
    config = LlamaConfig(
        vocab_size=V,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    config.draft_vocab_size, config.target_hidden_size = draft_vocab, 16
    config.norm_before_residual, config.aux_layer_ids = False, [1, 2, 3]
    torch.manual_seed(seed)
    model = Eagle3Drafter(config).eval()
    for param in model.parameters():
        if param.dim() == 2:
            torch.nn.init.normal_(param, std=0.5)
    model.t2d[:draft_vocab] = True  # d2t stays 0: draft id d is target id d
    return model


@pytest.mark.slow
@pytest.mark.parametrize(
    "cfg",
    [Eagle3Config(tree=None, gamma=2), Eagle3Config(gamma=2, top_k=2, budget=4)],
    ids=["chain", "tree"],
)
def test_sampled_eagle3_samples_the_target_law(cfg) -> None:
    """A chain's proposal is the drafter's warped law over the target's vocabulary (zero off
    its draft vocabulary), a tree is verified by the exact tree rule: the output is the
    target's law either way."""
    length, draws, prompt, warp = 3, 2000, [1, 3, 0], Warp(temperature=1.0)
    target = toy_lm(n_layer=4, seed=0)
    method = Eagle3(cfg, warp)
    assert method.exact()
    decoder = method.build(target, toy_drafter(target), None)
    generator = torch.Generator().manual_seed(0)
    counts, accepted = Counter(), 0
    for _ in range(draws):
        got = decoder.generate(prompt, length, generator)
        counts[tuple(got.tokens)] += 1
        accepted += sum(got.accepted)
    assert accepted > draws / 4  # drafts are accepted and rejected
    assert law_pvalue(counts, exact_law(target, prompt, length, warp), draws) > 1e-3


def test_training_reads_what_drafting_reads(fixture_drafter) -> None:
    """The training-time test's step k at position p (its own states fed back, one position on,
    reading step 0's keys up to p and its chain's) gives the logits a drafted chain gives, when
    the data's next tokens are the chain's drafts."""
    case, steps, anchor = GOLDENS["cases"][2], 3, 5
    drafter = proposer(fixture_drafter)
    drafter.observe(torch.tensor(case["features"][: anchor + 1]))
    draft, rows = recorded(drafter, case["ids"][: anchor + 2], steps)
    ids = torch.tensor([case["ids"][: anchor + 2] + draft.tokens])
    features = torch.tensor([case["features"][: anchor + steps + 2]])
    with torch.no_grad():
        trained = ttt_logits(fixture_drafter, ids, features[:, : ids.shape[1]], steps)
    for step in range(steps):
        torch.testing.assert_close(trained[step][0, anchor], rows[step][-1], atol=1e-4, rtol=1e-4)


def llama_target(directory: Path, layers: int, hidden: int = 64) -> ModelConfig:
    """A target checkpoint's config alone (the checks read no weights)."""
    LlamaConfig(
        vocab_size=256, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4
    ).save_pretrained(directory)
    return ModelConfig(name="target", name_or_path=str(directory))


@pytest.mark.parametrize(
    ("layers", "hidden", "why"),
    [
        (8, 64, None),  # upstream's rule: the inputs of layers 2, 4 and 5
        (6, 64, "naming one twice"),  # 2, 3, 3
        (8, 32, "reads target states of size 64"),
    ],
)
def test_the_kind_refuses_a_target_it_cannot_read(tmp_path, layers, hidden, why) -> None:
    drafter = ModelConfig(
        name="fixture", name_or_path=str(GOLDENS_DIR / "eagle-layout"), kind="eagle3"
    )
    target = llama_target(tmp_path, layers, hidden)
    if why is None:
        check_reads_target(drafter, target)
    else:
        with pytest.raises(ConfigError, match=why):
            check_reads_target(drafter, target)


@pytest.mark.parametrize(
    "cfg",
    [Eagle3Config(tree=None, gamma=4), Eagle3Config(gamma=4, top_k=4, budget=16)],
    ids=["chain", "tree"],
)
def test_greedy_eagle3_equals_the_targets_greedy_output(cfg) -> None:
    """tiny-eagle3 as `drafter=tiny-eagle3` loads it (EAGLE's layout, the target's
    embeddings): token-identical to the target's greedy decoding, drafts accepted."""
    from transformers import AutoTokenizer

    target, drafter, _ = tiny_eagle3()
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    rows = [json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").open()][:4]
    decoder = Eagle3(cfg, Warp()).build(target, drafter, None)
    baseline = AutoregressiveDecoder(target, Warp())
    accepted = 0
    for row in rows:
        prompt = tokenizer(row["prompt"])["input_ids"]
        got = decoder.generate(prompt, 32, torch.Generator())
        assert got.tokens == baseline.generate(prompt, 32, torch.Generator()).tokens
        accepted += sum(got.accepted)
    assert accepted > 0


def test_a_chain_maps_to_vllms_eagle3() -> None:
    """`backend=vllm`: vLLM's eagle3 drafts gamma tokens from the drafter's own directory."""
    method = Eagle3(Eagle3Config(tree=None, gamma=4), Warp())
    assert SPECULATIVE["eagle3"](method, "/drafter") == {
        "method": "eagle3",
        "model": "/drafter",
        "num_speculative_tokens": 4,
    }


@pytest.mark.parametrize(
    ("cfg", "why"),
    [
        (Eagle3Config(), "method.tree='dynamic': vLLM's eagle3 runs method.tree=null only"),
        (
            Eagle3Config(tree=None, rule="typical"),
            "method.rule='typical': vLLM's eagle3 runs method.rule=greedy only",
        ),
    ],
    ids=["tree", "lenient"],
)
def test_vllm_refuses_what_its_eagle3_cannot_run(cfg, why) -> None:
    """vLLM drafts a chain and verifies exactly: eagle3's default tree (pass method.tree=null)
    and a lenient rule are refused in one line."""
    with pytest.raises(ConfigError) as err:
        SPECULATIVE["eagle3"](Eagle3(cfg, Warp()), "/drafter")
    assert str(err.value).startswith(why)
