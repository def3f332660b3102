"""The native LLaDA class: it loads the hub-format golden checkpoint with no remote code, its
logits equal the upstream model's (tools/goldens/llada.py ran NVlabs/Fast-dLLM's LLaDAModelLM on
that checkpoint), its cache, positions and mask follow the shared native interface, and a config
asking for an architecture it does not build is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel

from conftest import REORDERED
from specbench.models.native.llada import LLaDAConfig, LLaDAModelLM

GOLDEN = Path(__file__).parent / "goldens" / "llada"
MASK_ID = 126336


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads((GOLDEN / "goldens.json").read_text())["logits"]


@pytest.fixture(scope="module")
def model() -> LLaDAModelLM:
    return AutoModel.from_pretrained(GOLDEN, dtype=torch.float32).eval()


def canvas(lengths: tuple[int, ...], masked: int, seed: int = 0) -> torch.Tensor:
    """Rows of random prompt ids followed by `masked` mask tokens (a decoder's canvas)."""
    generator = torch.Generator().manual_seed(seed)
    rows = [torch.randint(0, 126000, (n,), generator=generator) for n in lengths]
    return torch.stack([torch.cat([row, torch.full((masked,), MASK_ID)]) for row in rows])


def run(model: LLaDAModelLM, ids: torch.Tensor, **kwargs):
    with torch.no_grad():
        return model(ids, **kwargs)


def test_auto_config_is_native_and_keeps_the_hub_keys() -> None:
    config = AutoConfig.from_pretrained(GOLDEN)
    hub = json.loads((GOLDEN / "config.json").read_text())
    assert type(config) is LLaDAConfig
    assert config.model_type == hub["model_type"] == "llada"
    assert (config.mask_token_id, config.vocab_size, config.embedding_size) == (
        MASK_ID,
        126464,
        126464,
    )
    for key in ("auto_map", "architectures", "eos_token_id", "pad_token_id", "use_cache"):
        assert getattr(config, key) == hub[key], key
    assert (config.hidden_size, config.num_attention_heads) == (hub["d_model"], hub["n_heads"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loads_the_hub_parameter_names_unchanged(dtype: torch.dtype) -> None:
    loaded, info = AutoModel.from_pretrained(GOLDEN, dtype=dtype, output_loading_info=True)
    assert type(loaded) is LLaDAModelLM
    assert not any(info.values()), info
    stored = load_file(GOLDEN / "model.safetensors")
    state = loaded.state_dict()
    assert sorted(state) == sorted(stored)
    for name, tensor in stored.items():
        assert state[name].dtype == dtype, name
        assert torch.equal(state[name].float(), tensor.float()), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_equal_upstream(golden: dict, dtype: torch.dtype) -> None:
    """float32 to 1e-5. bf16 against upstream's own bf16 forward, allowing one bf16 rounding
    step (another CPU's kernels may round differently); upstream's op order matters more: its
    RMSNorm casts back before the weight multiply and its RoPE runs in float32, and either
    change moves logits by up to 1-2 here."""
    reference = golden if dtype == torch.float32 else golden["bfloat16"]
    loaded = AutoModel.from_pretrained(GOLDEN, dtype=dtype)
    logits = run(loaded, torch.tensor(golden["input_ids"])).logits
    assert logits.dtype == dtype and logits.shape[-1] == 126464
    logits = logits.float()
    if dtype == torch.float32:
        tolerance = REORDERED
        assert logits.argmax(-1).tolist() == reference["argmax"]
    else:
        tolerance = {"atol": 0.125, "rtol": 2**-8}
        agree = logits.argmax(-1) == torch.tensor(reference["argmax"])
        assert agree.float().mean() >= 0.9
    values = logits[:, :, torch.tensor(golden["columns"])]
    torch.testing.assert_close(values, torch.tensor(reference["values"]), **tolerance)
    torch.testing.assert_close(
        torch.logsumexp(logits, -1), torch.tensor(reference["logsumexp"]), **tolerance
    )


def test_device_map_loads_and_reads_the_same(golden: dict, model: LLaDAModelLM) -> None:
    mapped = AutoModel.from_pretrained(GOLDEN, dtype=torch.float32, device_map="cpu")
    ids = torch.tensor(golden["input_ids"])
    torch.testing.assert_close(run(mapped, ids).logits, run(model, ids).logits)


def test_prefix_cache_then_block_equals_one_masked_forward(model: LLaDAModelLM) -> None:
    """Prefix rows read only the prefix, block rows read everything: one call under that mask
    equals a cached prefix call followed by a block call fed the block's mask rows."""
    ids = canvas((9, 9), masked=6, seed=1)
    ids[1, 3] = MASK_ID
    prefix = 9
    mask = torch.ones(1, 1, ids.shape[1], ids.shape[1], dtype=torch.bool)
    mask[:, :, :prefix, prefix:] = False
    whole = run(model, ids, attention_mask=mask, use_cache=True)
    head = run(model, ids[:, :prefix], attention_mask=mask[:, :, :prefix, :prefix], use_cache=True)
    block = run(
        model,
        ids[:, prefix:],
        attention_mask=mask[:, :, prefix:],
        past_key_values=head.past_key_values,
        use_cache=True,
    )
    torch.testing.assert_close(head.logits, whole.logits[:, :prefix], **REORDERED)
    torch.testing.assert_close(block.logits, whole.logits[:, prefix:], **REORDERED)
    assert len(block.past_key_values) == model.config.n_layers
    for (key, value), (key_all, value_all) in zip(block.past_key_values, whole.past_key_values):
        assert key.shape == (2, model.config.n_heads, ids.shape[1], 4)
        torch.testing.assert_close(key, key_all, **REORDERED)
        torch.testing.assert_close(value, value_all, **REORDERED)


def test_one_cached_prefix_serves_every_row(model: LLaDAModelLM) -> None:
    """A batch-1 prefix cache expanded over rows that differ only in the block (as the adapter
    feeds it) reads each row as that row alone would be read."""
    ids = canvas((7,), masked=5, seed=2).repeat(3, 1)
    ids[1, 8], ids[2, 10] = 17, 4242
    mask = torch.ones(1, 1, 12, 12, dtype=torch.bool)
    mask[:, :, :7, 7:] = False
    head = run(model, ids[:1, :7], attention_mask=mask[:, :, :7, :7], use_cache=True)
    past = [(k.expand(3, -1, -1, -1), v.expand(3, -1, -1, -1)) for k, v in head.past_key_values]
    block = run(model, ids[:, 7:], attention_mask=mask[:, :, 7:], past_key_values=past)
    whole = run(model, ids, attention_mask=mask).logits[:, 7:]
    torch.testing.assert_close(block.logits, whole, **REORDERED)


def test_explicit_positions_equal_the_default_ones(model: LLaDAModelLM) -> None:
    ids = canvas((6, 6), masked=4, seed=3)
    torch.testing.assert_close(
        run(model, ids, position_ids=torch.arange(10)[None]).logits, run(model, ids).logits
    )
    head = run(model, ids[:, :6], use_cache=True)
    past = head.past_key_values
    default = run(model, ids[:, 6:], past_key_values=past).logits
    explicit = run(model, ids[:, 6:], past_key_values=past, position_ids=torch.arange(6, 10)[None])
    torch.testing.assert_close(explicit.logits, default)


def test_positions_place_a_block_between_cached_keys(model: LLaDAModelLM) -> None:
    """Fast-dLLM's dual cache in the shared interface: keys before and after the block come
    from the cache (stored after RoPE at their own positions), the block is fed at its
    positions; with full attention that is the full forward's block rows."""
    ids = canvas((8,), masked=12, seed=4)
    start, end = 12, 16
    full = run(model, ids, use_cache=True)
    past = [
        tuple(torch.cat((t[:, :, :start], t[:, :, end:]), dim=-2) for t in layer)
        for layer in full.past_key_values
    ]
    positions = torch.arange(start, end)[None]
    block = run(model, ids[:, start:end], position_ids=positions, past_key_values=past)
    torch.testing.assert_close(block.logits, full.logits[:, start:end], **REORDERED)


def test_no_mask_is_full_attention_and_a_mask_hides_keys(model: LLaDAModelLM) -> None:
    ids = canvas((10,), masked=4, seed=5)
    everything = torch.ones(1, 1, 14, 14, dtype=torch.bool)
    torch.testing.assert_close(
        run(model, ids, attention_mask=everything).logits, run(model, ids).logits, **REORDERED
    )
    hidden_tail = everything.clone()
    hidden_tail[..., 11:] = False
    masked = run(model, ids, attention_mask=hidden_tail).logits[:, :11]
    torch.testing.assert_close(masked, run(model, ids[:, :11]).logits, **REORDERED)


def test_cache_only_when_asked(model: LLaDAModelLM) -> None:
    ids = canvas((4,), masked=2)
    assert run(model, ids).past_key_values is None
    assert run(model, ids, use_cache=True).past_key_values is not None


UNSUPPORTED = [
    ("block_type", "sequential"),
    ("activation_type", "swiglu"),
    ("layer_norm_type", "default"),
    ("weight_tying", True),
    ("alibi", True),
    ("rope", False),
    ("rope_full_precision", False),
    ("include_bias", True),
    ("attention_layer_norm", True),
    ("scale_logits", True),
    ("block_group_size", 2),
    ("n_kv_heads", 1),
]


@pytest.mark.parametrize(("key", "value"), UNSUPPORTED)
def test_an_unsupported_variant_is_refused_in_one_line(tmp_path: Path, key: str, value) -> None:
    shutil.copy(GOLDEN / "model.safetensors", tmp_path / "model.safetensors")
    config = json.loads((GOLDEN / "config.json").read_text()) | {key: value}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="supported") as refused:
        AutoModel.from_pretrained(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and f"{key}=" in message
