"""Spiffy: its tokens equal the vanilla decoder's (static and threshold unmasking, with and
without the prefix cache, D in 3, 5, 8); the verification mask forbids real-to-draft and
draft-to-replaced-block attention, on the mask and by perturbation; calibration is
deterministic; graphs round-trip through versioned JSON and select by degree-1 accumulation."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from transformers import AutoTokenizer

from conftest import compose_cfg
from specbench import paths
from specbench.config import ModelConfig
from specbench.decoding.dllm.spiffy.calibrate import calibrate, count_nodes
from specbench.decoding.dllm.spiffy.config import SpiffyConfig
from specbench.decoding.dllm.spiffy.graph import DraftGraph, Node, rankings, select
from specbench.decoding.dllm.spiffy.method import SpiffyDecoder
from specbench.decoding.dllm.vanilla.config import DLLMConfig
from specbench.decoding.dllm.vanilla.method import BlockDecoder
from specbench.decoding.generation import Stop
from specbench.errors import ConfigError
from specbench.models.diffusion import MaskedDiffusionLM, tree_mask
from specbench.models.kinds.diffusion import load_diffusion_lm
from specbench.pipeline import execute, prepare

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def world() -> tuple[MaskedDiffusionLM, list[list[int]], list[list[int]]]:
    cfg = ModelConfig(
        name="tiny-dlm", name_or_path="specbench:tiny-dlm", kind="diffusion", adapter="tiny"
    )
    dlm = load_diffusion_lm(cfg, "target", CPU, "float32")
    tokenizer = AutoTokenizer.from_pretrained(paths.TINY_DIR / "tiny")
    rows = [json.loads(line) for line in (paths.TINY_DIR / "tiny_code.jsonl").open()]
    prompts = [tokenizer(r["prompt"])["input_ids"] for r in rows]
    return dlm, prompts[:32], prompts[60:68]  # evaluation prompts, calibration prompts


def node(*pairs: tuple[int, int]) -> Node:
    return Node(len(pairs), frozenset(pairs))


def test_selection_is_degree_one_accumulation_over_a_connected_subgraph() -> None:
    counts = Counter(
        {
            node((0, 0)): 10,
            node((1, 0)): 3,
            node((0, 0), (1, 0)): 8,  # parents (0,0) and (1,0): worth 8 + 10 + 3
            node((0, 0), (2, 0)): 9,  # parent (0,0) only: worth 9 + 10
            node((5, 0), (6, 0)): 50,  # no parent among the candidates: never reachable
        }
    )
    assert select(counts, 3) == [node((0, 0)), node((0, 0), (1, 0)), node((0, 0), (2, 0))]
    assert select(counts, 2) == [node((0, 0)), node((0, 0), (1, 0))]
    graph = DraftGraph(select(counts, 4))
    deep = graph.nodes.index(node((0, 0), (1, 0)))
    assert sorted(graph.parents(deep)) == sorted(
        [graph.nodes.index(node((0, 0))), graph.nodes.index(node((1, 0)))]
    )


def test_graphs_round_trip_through_versioned_json(tmp_path) -> None:
    graph = DraftGraph([node((0, 0)), node((0, 0), (1, 2))], {"model": "m"})
    graph.save(tmp_path / "g.json")
    loaded = DraftGraph.load(tmp_path / "g.json")
    assert loaded.nodes == graph.nodes and loaded.meta == graph.meta
    data = json.loads((tmp_path / "g.json").read_text())
    (tmp_path / "old.json").write_text(json.dumps({**data, "version": 0}))
    with pytest.raises(ValueError, match="version"):
        DraftGraph.load(tmp_path / "old.json")


def test_calibration_counts_each_later_state_under_the_steps_own_ranking() -> None:
    """A hand-made decoding of a 4-position block (mask 5) under fixed logits: position 2 is
    committed first, then 1, 0, 3. Confidence ranks the masked positions 1 > 0 > 3; each
    committed token is its position's top token except position 3's (token 0, second)."""
    mask = 5
    log_probs = torch.full((4, 6), -9.0)
    log_probs[1, 4], log_probs[0, 1], log_probs[3, 2], log_probs[3, 0] = -0.1, -0.2, -0.3, -0.4
    log_probs[2, 3] = -0.01
    conf = torch.tensor([0.8, 0.9, 0.99, 0.5])
    states = [[mask, mask, 3, mask], [mask, 4, 3, mask], [1, 4, 3, mask], [1, 4, 3, 0]]
    steps = []
    for state in states:
        block = torch.tensor(state)
        steps.append((block, rankings(log_probs, block == mask, conf), 0))
    counts = count_nodes(steps, 3, mask)
    assert counts == {
        Node(1, frozenset({(0, 0)})): 2,  # from step 0 (position 1 first) and step 1 (position 0)
        Node(2, frozenset({(0, 0), (1, 0)})): 1,
        Node(3, frozenset({(0, 0), (1, 0), (2, 1)})): 1,
        Node(2, frozenset({(0, 0), (1, 1)})): 1,
        Node(1, frozenset({(0, 1)})): 1,
    }
    # a later block's states are never counted against this block's steps
    steps[2] = (steps[2][0], steps[2][1], 32)
    assert count_nodes(steps, 3, mask) == {Node(1, frozenset({(0, 0)})): 1}


def test_calibration_is_deterministic_and_finds_the_next_tokens(world) -> None:
    dlm, _, calibration = world
    cfg = SpiffyConfig(nodes=5, calibration_new_tokens=32)
    first = calibrate(dlm, cfg, calibration[:4])
    assert first.nodes == calibrate(dlm, cfg, calibration[:4]).nodes
    assert len(first.nodes) == 5 and first.nodes[0].depth == 1
    for k in range(len(first.nodes)):  # connected: every deeper node has a parent inside
        assert first.nodes[k].depth == 1 or first.parents(k)


def test_the_mask_forbids_real_to_draft_and_draft_to_replaced_block() -> None:
    cached, lo, n, drafts = 3, 5, 2, 2  # prefix 0..4 (0..2 cached), real 5-6, drafts 7-8, 9-10
    mask = tree_mask(cached, lo, n, drafts)
    query = lambda i: i - cached  # noqa: E731
    real, first, second = [5, 6], [7, 8], [9, 10]
    for q in real:
        assert mask[query(q)].nonzero()[:, 0].tolist() == [*range(5), *real]
    for block in (first, second):
        for q in block:
            assert mask[query(q)].nonzero()[:, 0].tolist() == [*range(5), *block]
    for q in (3, 4):  # prefix tokens: causal, never a block
        assert mask[query(q)].nonzero()[:, 0].tolist() == list(range(q + 1))


def test_changing_a_draft_never_changes_the_real_logits(world) -> None:
    dlm, prompts, _ = world
    reading = dlm.reading(prefix_cache=True)
    prompt = prompts[0]
    lo, n = len(prompt), 8
    canvas = torch.tensor([prompt + [dlm.mask_id] * n])
    alone = dlm.canvas_logits(canvas, lo, lo + n, reading)[0]
    drafts = torch.tensor([[5] + [dlm.mask_id] * 7, [5, 6] + [dlm.mask_id] * 6])
    first = dlm.tree_logits(canvas, lo, lo + n, drafts, reading)
    changed = drafts.clone()
    changed[:, 0] = 9
    second = dlm.tree_logits(canvas, lo, lo + n, changed, reading)
    assert torch.equal(first[0], second[0])  # the real block never sees a draft
    torch.testing.assert_close(first[0], alone, atol=1e-4, rtol=0)
    for b in range(2):  # a draft reads as if it were the block (not the real one)
        row = canvas.clone()
        row[0, lo:] = drafts[b]
        torch.testing.assert_close(
            first[1 + b], dlm.canvas_logits(row, lo, lo + n, reading)[0], atol=1e-4, rtol=0
        )


@pytest.mark.parametrize("nodes", [3, 5, 8])
@pytest.mark.parametrize(
    "spatial",
    [
        dict(block_length=32, prefix_cache=True),
        dict(block_length=16, policy="threshold", threshold=0.4),
    ],
    ids=["static", "threshold"],
)
def test_spiffy_equals_the_vanilla_decoder(world, nodes, spatial) -> None:
    dlm, prompts, calibration = world
    cfg = SpiffyConfig(nodes=nodes, calibration_new_tokens=64, **spatial)
    graph = calibrate(dlm, cfg, calibration)
    spiffy, vanilla = SpiffyDecoder(dlm, cfg, graph), BlockDecoder(dlm, DLLMConfig(**spatial))
    saved = 0
    for prompt in prompts[:6]:
        want = vanilla.generate(prompt, 48, torch.Generator(), Stop(frozenset()))
        got = spiffy.generate(prompt, 48, torch.Generator(), Stop(frozenset()))
        assert got.tokens == want.tokens
        saved += want.target_calls - got.target_calls
        assert got.target_calls <= want.target_calls
    assert saved > 0  # drafts were accepted


def test_pruning_keeps_the_best_connected_nodes(world) -> None:
    dlm, prompts, _ = world
    graph = DraftGraph([node((0, 0)), node((1, 0)), node((0, 0), (1, 0)), node((0, 0), (2, 0))])
    decoder = SpiffyDecoder(dlm, SpiffyConfig(keep=2), graph)
    logits = torch.full((4, dlm.vocab_size), -5.0)
    logits[[0, 1, 2, 3], [7, 8, 9, 10]] = torch.tensor([4.0, 0.0, 3.0, 2.0])
    state = torch.full((4,), dlm.mask_id)
    conf = logits.softmax(-1).max(-1).values
    kept, states = decoder.instantiate(state, logits, conf)
    # ranked positions: 0 (p high), 2, 3, 1; (0,0) is the best root, (0,0)+(1,0) the best child
    assert kept == [0, 2]
    assert states.tolist() == [[7, *[dlm.mask_id] * 3], [7, dlm.mask_id, 9, dlm.mask_id]]
    # a third node: the root (1,0) (log p about -0.86) before the child (0,0)+(2,0) (mean about
    # -0.98), a one-pair node's mean taken over its one pair
    wider = SpiffyDecoder(dlm, SpiffyConfig(keep=3), graph)
    assert wider.instantiate(state, logits, conf)[0] == [0, 1, 2]
    # a node naming a fifth masked position does not fit a block with four, whatever the budget
    beyond = DraftGraph([*graph.nodes, node((4, 0))])
    everything = SpiffyDecoder(dlm, SpiffyConfig(nodes=5, keep=5), beyond)
    assert everything.instantiate(state, logits, conf)[0] == [0, 1, 2, 3]


def test_spiffy_runs_end_to_end_and_uses_a_saved_graph(tmp_path) -> None:
    graph = DraftGraph([node((0, 0)), node((0, 0), (1, 0)), node((0, 0), (1, 0), (2, 0))])
    graph.save(tmp_path / "graph.json")
    cfg = compose_cfg(
        "target=tiny-dlm",
        "drafter=none",
        "method=spiffy",
        f"method.graph={tmp_path / 'graph.json'}",
        "method.prefix_cache=true",
        "run.limit=3",
        "run.max_new_tokens=32",
        f"run.results_dir={tmp_path / 'runs'}",
    )
    summary = execute(prepare(cfg))
    assert summary.lossless and summary.base.identical_rate == 1.0
    assert summary.tpf > 1.0  # the chain graph is accepted somewhere on tiny-dlm


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["method.nodes=0"], "method.nodes"),
        (["method.keep=9"], "method.keep"),
        (["method.graph=/no/such/graph.json"], "method.graph"),
        (["method.calibration=/no/such.jsonl"], "method.calibration"),
    ],
)
def test_bad_spiffy_configs_fail_before_loading(overrides, key) -> None:
    with pytest.raises(ConfigError) as err:
        prepare(compose_cfg("target=tiny-dlm", "drafter=none", "method=spiffy", *overrides))
    assert err.value.key == key


def test_spiffy_never_calibrates_on_a_measured_item(tmp_path) -> None:
    """A calibration file holding one measured prompt is refused by name; a task without a
    held-out split is refused; the task's own held-out samples are accepted."""
    prompt = json.loads((paths.TINY_DIR / "tiny_code.jsonl").read_text().splitlines()[3])["prompt"]
    leaky = tmp_path / "calibration.jsonl"
    leaky.write_text(
        json.dumps({"prompt": "unrelated text"}) + "\n" + json.dumps({"prompt": prompt}) + "\n"
    )
    base = ["target=tiny-dlm", "drafter=none", "method=spiffy", f"run.results_dir={tmp_path}"]
    with pytest.raises(ConfigError) as err:
        prepare(compose_cfg(*base, f"method.calibration={leaky}"))
    assert err.value.key == "method.calibration" and "is a measured item" in str(err.value)
    with pytest.raises(ConfigError) as err:
        prepare(compose_cfg(*base, "task=prompts"))
    assert "has no held-out split" in str(err.value)
    plan = prepare(compose_cfg(*base, "run.limit=2"))
    assert plan.task.heldout() and plan.samples


def leftmost(n: int) -> frozenset:
    return frozenset((rank, 0) for rank in range(n))


@pytest.mark.parametrize(
    "keep, calls_per_block, accepted_per_block",
    # keep 3: the tree forward accepts all three remaining steps; keep 2: it accepts two, and
    # the last step is the certain step on the depth-2 node's distribution (no forward); keep
    # 1: one step accepted, then a forward whose only node no longer fits (2 masks left)
    [(3, 2, [3]), (2, 2, [2]), (1, 3, [1, 0])],
)
def test_spiffy_forward_and_acceptance_counts_are_exact_on_a_scripted_model(
    keep, calls_per_block, accepted_per_block
) -> None:
    """A fake whose greedy tokens never change and whose confidence falls left to right, under
    a quota whose count depends on the step (a 10-block in 4 steps: 3, 3, 2, 2). The graph is
    the vanilla decoder's own future: depth d has committed the leftmost 3, 5, 7 masks after the
    certain step. Reading the policy at the wrong step index (a count of 3 where 2 is due)
    rejects the depth-2 node and changes the counts."""
    from test_dllm import VOCAB, Scripted

    graph = DraftGraph([Node(1, leftmost(3)), Node(2, leftmost(5)), Node(3, leftmost(7))])
    cfg = SpiffyConfig(block_length=10, steps=8, policy="quota", nodes=3, keep=keep)
    fake = Scripted(drifting=False)
    got = SpiffyDecoder(fake, cfg, graph).generate([5, 6], 20, torch.Generator(), Stop(frozenset()))
    assert got.tokens == [1 + j % (VOCAB - 1) for j in range(10)] * 2
    assert got.target_calls == fake.calls == 2 * calls_per_block
    assert got.accepted == accepted_per_block * 2
