"""GGUF exports (specbench/models/gguf_export.py) read back with gguf's own reader: every tensor
of the checkpoint where llama.cpp looks for it, equal in f32 and within its block format's
rounding in bf16, q8_0 and q4_0; Llama's q/k rows permuted so that llama.cpp's rotary pairs give
transformers' attention scores; the tokenizer and hyperparameters llama.cpp reads; the cache
keyed by source; and the checkpoints it cannot write refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors import safe_open

from specbench import paths
from specbench.errors import ConfigError
from specbench.models import gguf_export

TINY = paths.TINY_DIR / "tiny"
DFLASH = paths.TINY_DIR / "tiny-dflash"
EAGLE3 = paths.TINY_DIR / "tiny-eagle3"
Q = gguf.GGMLQuantizationType


def source(checkpoint: Path) -> dict[str, np.ndarray]:
    with safe_open(checkpoint / "model.safetensors", "pt") as f:
        return {name: f.get_tensor(name).to(torch.float32).numpy() for name in f.keys()}  # noqa: SIM118


def read(path: Path) -> tuple[dict, dict[str, gguf.ReaderTensor]]:
    reader = gguf.GGUFReader(path)
    fields = {key: field.contents() for key, field in reader.fields.items()}
    return fields, {t.name: t for t in reader.tensors}


def values(tensor: gguf.ReaderTensor) -> np.ndarray:
    """A tensor's values in transformers' (rows, columns) order, dequantized."""
    shape = tuple(int(n) for n in reversed(tensor.shape))
    return gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape)


def unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary layout back to transformers' (pairs (2i, 2i+1) -> (i, i + d/2))."""
    shape = rows.shape
    return rows.reshape(heads, shape[0] // heads // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def gguf_name(name: str) -> str:
    parts = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
    }
    if name in parts:
        return parts[name]
    layer, rest = name.removeprefix("model.layers.").split(".", 1)
    short = {
        "input_layernorm.weight": "attn_norm",
        "post_attention_layernorm.weight": "ffn_norm",
        "self_attn.q_proj.weight": "attn_q",
        "self_attn.k_proj.weight": "attn_k",
        "self_attn.v_proj.weight": "attn_v",
        "self_attn.o_proj.weight": "attn_output",
        "mlp.gate_proj.weight": "ffn_gate",
        "mlp.up_proj.weight": "ffn_up",
        "mlp.down_proj.weight": "ffn_down",
    }[rest]
    return f"blk.{layer}.{short}.weight"


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("gguf")
    for quant in gguf_export.QUANTS:
        gguf_export.export(TINY, quant, out / f"tiny-{quant}.gguf")
    return {quant: out / f"tiny-{quant}.gguf" for quant in gguf_export.QUANTS}


def test_f32_holds_every_tensor_unchanged_where_llama_cpp_reads_it(exports) -> None:
    fields, tensors = read(exports["f32"])
    weights = source(TINY)
    assert set(tensors) == {gguf_name(n) for n in weights}  # tied: llama.cpp reuses token_embd
    for name, weight in weights.items():
        got = values(tensors[gguf_name(name)])
        if "q_proj" in name or "k_proj" in name:
            got = unpermute(got, heads=5)
        np.testing.assert_array_equal(got, weight, err_msg=name)
    config = json.loads((TINY / "config.json").read_text())
    assert fields["general.architecture"] == "llama"
    assert fields["llama.block_count"] == config["num_hidden_layers"]
    assert fields["llama.attention.head_count"] == config["num_attention_heads"]
    assert fields["llama.feed_forward_length"] == config["intermediate_size"]
    assert fields["llama.rope.dimension_count"] == config["head_dim"]
    assert fields["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6)


def test_the_tokenizer_is_the_checkpoints_byte_level_bpe(exports) -> None:
    fields, _ = read(exports["f32"])
    tokenizer = json.loads((TINY / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    tokens = fields["tokenizer.ggml.tokens"]
    assert fields["tokenizer.ggml.model"] == "gpt2"
    assert len(tokens) == 4096
    assert all(tokens[i] == text for text, i in vocab.items())
    assert fields["tokenizer.ggml.merges"][0] == " ".join(tokenizer["model"]["merges"][0])
    assert len(fields["tokenizer.ggml.merges"]) == len(tokenizer["model"]["merges"])
    control = [i for i, t in enumerate(fields["tokenizer.ggml.token_type"]) if t == 3]
    assert control == [0, 1, 2]  # <|endoftext|>, <|pad|>, <|mask|>
    assert fields["tokenizer.ggml.eos_token_id"] == 0
    assert fields["tokenizer.ggml.padding_token_id"] == 1
    assert fields["tokenizer.ggml.add_bos_token"] is False


@pytest.mark.parametrize(
    ("quant", "qtype", "tolerance"),
    [("bf16", Q.BF16, 2**-8), ("q8_0", Q.Q8_0, 1 / 127), ("q4_0", Q.Q4_0, 1 / 8)],
)
def test_quantized_matrices_are_within_one_step_of_their_block_scale(
    exports, quant: str, qtype: Q, tolerance: float
) -> None:
    """Every matrix in the named type, every norm in f32; each value within one quantization
    step of its source (a step: the block's largest magnitude x `tolerance`; bf16: relative)."""
    _, tensors = read(exports[quant])
    for name, weight in source(TINY).items():
        tensor = tensors[gguf_name(name)]
        got = values(tensor)
        if "q_proj" in name or "k_proj" in name:
            got = unpermute(got, heads=5)
        if weight.ndim == 1:
            assert tensor.tensor_type == Q.F32, name
            np.testing.assert_array_equal(got, weight)
            continue
        assert tensor.tensor_type == qtype, name
        if qtype == Q.BF16:
            scale = np.abs(weight)
        else:
            blocks = np.abs(weight).reshape(weight.shape[0], -1, 32).max(axis=-1)
            scale = np.repeat(blocks, 32, axis=-1)
        assert np.all(np.abs(got - weight) <= scale * tolerance + 1e-12), name
        assert not np.array_equal(got, weight), name  # quantized, not copied


def rope(x: np.ndarray, pairs: str, positions: np.ndarray) -> np.ndarray:
    """Rotary embedding of (positions, dim) rows: transformers' `half` pairs (i, i + d/2),
    llama.cpp's `llama` graph's `adjacent` pairs (2i, 2i + 1)."""
    dim = x.shape[-1]
    angle = positions[:, None] * 10000.0 ** (-np.arange(0, dim, 2) / dim)
    cos, sin = np.cos(angle), np.sin(angle)
    a, b = (x[:, : dim // 2], x[:, dim // 2 :]) if pairs == "half" else (x[:, 0::2], x[:, 1::2])
    turned = (a * cos - b * sin, a * sin + b * cos)
    if pairs == "half":
        return np.concatenate(turned, axis=-1)
    return np.stack(turned, axis=-1).reshape(x.shape)


def test_permuted_q_and_k_give_transformers_attention_scores_under_llama_cpp_rotary(
    exports,
) -> None:
    """Scores of one head of layer 0 for hidden states at 8 positions: the source weights under
    transformers' rotary equal the exported ones under llama.cpp's (which rotates adjacent
    pairs); the source weights under llama.cpp's rotary do not."""
    _, tensors = read(exports["f32"])
    weights = source(TINY)
    hidden = np.random.default_rng(0).standard_normal((8, 320))
    positions = np.arange(8.0)

    def scores(q_w: np.ndarray, k_w: np.ndarray, pairs: str) -> np.ndarray:
        q = rope(hidden @ q_w[:64].T, pairs, positions)
        k = rope(hidden @ k_w[:64].T, pairs, positions)
        return q @ k.T

    q, k = (weights[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qk")
    exported = (values(tensors[f"blk.0.attn_{p}.weight"]) for p in "qk")
    theirs = scores(*exported, "adjacent")
    np.testing.assert_allclose(theirs, scores(q, k, "half"), rtol=1e-9, atol=1e-9)
    assert not np.allclose(scores(q, k, "adjacent"), scores(q, k, "half"), atol=1e-3)


def test_a_dflash_drafter_is_llama_cpps_dflash_architecture(tmp_path: Path) -> None:
    """tiny-dflash: its layers, fusion fc and norm under llama.cpp's names, the target layers
    as llama.cpp counts them (a layer's input: z-lab's ids 1, 3 -> 2, 4), its block size and
    mask token, the target's vocabulary, and no embeddings or head (the target's are shared)."""
    out = tmp_path / "dflash.gguf"
    gguf_export.export_dflash(DFLASH, TINY, "f32", out)
    fields, tensors = read(out)
    weights = source(DFLASH)
    assert fields["general.architecture"] == "dflash"
    assert fields["dflash.target_layers"] == [2, 4]
    assert fields["dflash.block_size"] == 16
    assert fields["tokenizer.ggml.mask_token_id"] == 2
    assert fields["tokenizer.ggml.tokens"][3] == "!"
    np.testing.assert_array_equal(values(tensors["fc.weight"]), weights["fc.weight"])
    np.testing.assert_array_equal(
        values(tensors["enc.output_norm.weight"]), weights["hidden_norm.weight"]
    )
    np.testing.assert_array_equal(  # Qwen3 rotary is llama.cpp's NeoX one: no permutation
        values(tensors["blk.1.attn_q.weight"]), weights["layers.1.self_attn.q_proj.weight"]
    )
    assert "blk.0.attn_k_norm.weight" in tensors and "output_norm.weight" in tensors
    assert "token_embd.weight" not in tensors and "output.weight" not in tensors
    assert len(tensors) == len(weights)


def test_an_eagle3_drafter_is_llama_cpps_eagle3_architecture(tmp_path: Path) -> None:
    """tiny-eagle3 as llama.cpp's loader reads it (src/models/eagle3.cpp): the target layers
    it reads as EAGLE names them (a layer's input, as llama.cpp counts them too) and their
    width, its layer as a Llama block (q and k in llama.cpp's rotary layout, hidden_norm as
    attn_norm_2), fc, the draft head, d2t as absolute int64 target ids, the target's
    vocabulary, and no embeddings (llama.cpp reads the target's) nor t2d."""
    out = tmp_path / "eagle3.gguf"
    gguf_export.export_eagle3(EAGLE3, TINY, "f32", out)
    fields, tensors = read(out)
    weights = source(EAGLE3)
    assert fields["general.architecture"] == "eagle3"
    assert fields["eagle3.target_layers"] == [1, 3, 5]
    assert fields["eagle3.target_hidden_size"] == 320 and fields["eagle3.block_count"] == 1
    assert fields["eagle3.norm_before_residual"] is False
    assert len(fields["tokenizer.ggml.tokens"]) == fields["eagle3.vocab_size"] == 4096
    assert fields["tokenizer.ggml.tokens"][3] == "!"
    for name, theirs in [
        ("fc.weight", "fc.weight"),
        ("blk.0.attn_norm_2.weight", "midlayer.hidden_norm.weight"),
        ("blk.0.attn_v.weight", "midlayer.self_attn.v_proj.weight"),
        ("output_norm.weight", "norm.weight"),
        ("output.weight", "lm_head.weight"),
    ]:
        np.testing.assert_array_equal(values(tensors[name]), weights[theirs])
    np.testing.assert_array_equal(
        unpermute(values(tensors["blk.0.attn_q.weight"]), 5),
        weights["midlayer.self_attn.q_proj.weight"],
    )
    assert tensors["d2t"].tensor_type == Q.I64
    np.testing.assert_array_equal(tensors["d2t"].data, weights["d2t"] + np.arange(2048))
    assert "token_embd.weight" not in tensors and "t2d" not in tensors
    assert len(tensors) == len(weights) - 1


@pytest.mark.parametrize(
    ("config", "eagle3"),
    [
        (
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "draft_vocab_size": 8,
                "num_hidden_layers": 1,
            },
            True,
        ),
        (
            {"architectures": ["LlamaForCausalLM"], "draft_vocab_size": 8, "num_hidden_layers": 1},
            True,
        ),
        (
            {
                "architectures": ["Eagle3Speculator"],
                "draft_vocab_size": 8,
                "transformer_layer_config": {"num_hidden_layers": 1},
            },
            True,
        ),
        (
            {"architectures": ["Eagle3Speculator"], "draft_vocab_size": 8, "num_hidden_layers": 2},
            False,
        ),
    ],
)
def test_an_eagle3_drafter_is_told_as_llama_cpps_converter_tells_one(
    config: dict, eagle3: bool
) -> None:
    """A draft vocabulary and one layer, whatever architecture it names (some EAGLE-3 releases
    say LlamaForCausalLM), in EAGLE's layout or speculators' nested one; refused otherwise."""
    assert gguf_export.is_eagle3(config) is eagle3
    if eagle3:
        gguf_export.check_exportable(config, "drafter.name_or_path", "x")
    else:
        with pytest.raises(ConfigError, match="GGUF export takes .*, EAGLE-3 drafters"):
            gguf_export.check_exportable(config, "drafter.name_or_path", "x")


def test_the_cache_writes_once_per_source_and_exporter(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    first = gguf_export.cached(TINY, "q8_0")
    written = first.stat().st_mtime_ns
    assert gguf_export.cached(TINY, "q8_0") == first
    assert first.stat().st_mtime_ns == written
    assert gguf_export.cached(TINY, "q4_0") != first
    copy = tmp_path / "tiny"
    shutil.copytree(TINY, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))
    changed = gguf_export.cached(copy, "q8_0")
    assert changed.name.split("-")[-1] != first.name.split("-")[-1]
    assert read(changed)[0]["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert [p.name for p in changed.parent.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"architectures": ["GPT2LMHeadModel"]}, "is a GPT2LMHeadModel; GGUF export takes"),
        (
            {"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}},
            "rope_type=llama3: GGUF export takes default",
        ),
    ],
)
def test_a_checkpoint_it_cannot_write_is_refused_in_one_line(change: dict, why: str) -> None:
    config = {**json.loads((TINY / "config.json").read_text()), **change}
    with pytest.raises(ConfigError, match=why) as err:
        gguf_export.check_exportable(config, "target.name_or_path", "specbench:odd")
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("target.name_or_path=")
