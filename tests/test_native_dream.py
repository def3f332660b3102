"""The native Dream classes against upstream's numbers (tests/goldens/dream, written by
tools/goldens/dream.py from Fast-dLLM's vendored hub code) and the shared forward contract:
4-D bool masks, explicit positions, a KV cache of keys after RoPE."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModel

import specbench.models.native  # noqa: F401  (registers model_type "Dream")
from conftest import REORDERED, assert_golden_logits
from specbench.models.native.dream import DreamConfig, DreamModel

GOLDEN = Path(__file__).parent / "goldens" / "dream"
MASK_ID = 151666


@pytest.fixture(scope="module")
def goldens() -> dict:
    return json.loads((GOLDEN / "goldens.json").read_text())


@pytest.fixture(scope="module")
def model() -> DreamModel:
    return AutoModel.from_pretrained(GOLDEN, dtype=torch.float32).eval()


def canvas(length: int, batch: int = 1, seed: int = 0) -> torch.Tensor:
    """Random ids below the special tokens, the second half masked, as a decoding canvas."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 151643, (batch, length), generator=gen)
    ids[:, length // 2 :] = MASK_ID
    return ids


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_auto_classes_load_the_hub_format_unchanged(dtype):
    config = AutoConfig.from_pretrained(GOLDEN)
    assert type(config) is DreamConfig
    assert config.mask_token_id == MASK_ID and config.vocab_size == 152064
    assert config.rope_parameters == {"rope_type": "default", "rope_theta": 1000000.0}
    loaded = AutoModel.from_pretrained(GOLDEN, dtype=dtype)  # no trust_remote_code
    assert type(loaded) is DreamModel and loaded.dtype == dtype
    from safetensors import safe_open

    with safe_open(GOLDEN / "model.safetensors", "pt") as f:
        assert set(loaded.state_dict()) == set(f.keys())
    with torch.no_grad():
        logits = loaded(canvas(7)).logits
    assert logits.dtype == dtype and logits.shape == (1, 7, 152064)


def test_float32_logits_equal_upstream(model, goldens):
    ref = goldens["logits"]
    with torch.no_grad():
        logits = model(torch.tensor(ref["input_ids"])).logits
    assert_golden_logits(logits, ref)


def test_bfloat16_logits_close_to_upstream(goldens):
    ref = goldens["logits"]
    bf16 = AutoModel.from_pretrained(GOLDEN, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        logits = bf16(torch.tensor(ref["input_ids"])).logits.float()
    expected = torch.tensor(ref["values"])
    scale = expected.abs().max()
    assert (logits[:, :, torch.tensor(ref["columns"])] - expected).abs().max() < 0.05 * scale
    agree = (logits.argmax(-1) == torch.tensor(ref["argmax"])).float().mean()
    assert agree >= 0.6  # bf16 rounding flips near-ties (0.8 on CPU)


def block_mask(prefix: int, block: int, seed: int = 0) -> torch.Tensor:
    """[1, 1, P + Q, P + Q]: the prefix reads only itself (so its keys do not depend on the
    block); block rows read the prefix and a random subset of the block, themselves always."""
    total = prefix + block
    mask = torch.zeros(1, 1, total, total, dtype=torch.bool)
    mask[..., :prefix, :prefix] = True
    mask[..., prefix:, :prefix] = True
    gen = torch.Generator().manual_seed(seed)
    mask[..., prefix:, prefix:] = torch.rand(block, block, generator=gen) < 0.6
    mask[..., prefix:, prefix:] |= torch.eye(block, dtype=torch.bool)
    return mask


def test_cached_block_forward_equals_one_forward(model):
    prefix, block = 9, 6
    ids = canvas(prefix + block, batch=2, seed=1)
    mask = block_mask(prefix, block)
    with torch.no_grad():
        whole = model(ids, attention_mask=mask, use_cache=True)
        head = model(ids[:, :prefix], attention_mask=mask[..., :prefix, :prefix], use_cache=True)
        tail = model(
            ids[:, prefix:],
            attention_mask=mask[..., prefix:, :],
            past_key_values=head.past_key_values,
            use_cache=True,
        )
    torch.testing.assert_close(head.logits, whole.logits[:, :prefix], **REORDERED)
    torch.testing.assert_close(tail.logits, whole.logits[:, prefix:], **REORDERED)
    assert len(tail.past_key_values) == model.config.num_hidden_layers
    for (key, value), (key_ref, value_ref), (past_key, _) in zip(
        tail.past_key_values, whole.past_key_values, head.past_key_values
    ):
        assert past_key.shape == (2, 1, prefix, 4)  # [B, kv_heads, P, head_dim]
        assert key.shape == (2, 1, prefix + block, 4)
        torch.testing.assert_close(key, key_ref, **REORDERED)
        torch.testing.assert_close(value, value_ref, **REORDERED)


def test_mask_hides_keys(model):
    """A query row that may not read some keys sees the same as a sequence without them."""
    ids = canvas(10, seed=2)
    keep = torch.tensor([0, 1, 2, 4, 5, 7, 8, 9])
    mask = torch.zeros(1, 1, 10, 10, dtype=torch.bool)
    mask[..., keep[:, None], keep] = True
    mask[..., [3, 6], :] = True  # hidden positions' own rows read everything (unused)
    with torch.no_grad():
        masked = model(ids, attention_mask=mask).logits[:, keep]
        dropped = model(ids[:, keep], position_ids=keep[None]).logits
    torch.testing.assert_close(masked, dropped, **REORDERED)


def test_explicit_positions_equal_default_and_are_used(model):
    ids = canvas(12, seed=3)
    with torch.no_grad():
        default = model(ids).logits
        explicit = model(ids, position_ids=torch.arange(12)[None]).logits
        head = model(ids[:, :5], use_cache=True)
        tail_default = model(ids[:, 5:], past_key_values=head.past_key_values).logits
        tail_explicit = model(
            ids[:, 5:], past_key_values=head.past_key_values, position_ids=torch.arange(5, 12)[None]
        ).logits
        moved = model(ids, position_ids=torch.tensor([[0, 1, 2, 3, 4, 5, 9, 7, 8, 6, 10, 11]]))
    torch.testing.assert_close(explicit, default, rtol=0, atol=0)
    torch.testing.assert_close(tail_explicit, tail_default, rtol=0, atol=0)
    assert not torch.allclose(moved.logits, default, rtol=1e-3, atol=1e-3)


def test_device_map_loads(goldens):
    placed = AutoModel.from_pretrained(GOLDEN, dtype=torch.float32, device_map="cpu")
    ref = goldens["logits"]
    with torch.no_grad():
        logits = placed(torch.tensor(ref["input_ids"])).logits
    assert logits.argmax(-1).tolist() == ref["argmax"]


def variant(tmp_path: Path, **changes) -> Path:
    """The golden checkpoint with some config.json keys changed."""
    config = json.loads((GOLDEN / "config.json").read_text())
    config.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(config))
    shutil.copy(GOLDEN / "model.safetensors", tmp_path / "model.safetensors")
    return tmp_path


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
        ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_scaling"),
        ({"use_sliding_window": True, "sliding_window": 4}, "use_sliding_window"),
    ],
)
def test_unsupported_variants_fail_with_one_line(tmp_path, changes, key):
    path = variant(tmp_path, **changes)
    with pytest.raises(ValueError) as failure:
        AutoModel.from_pretrained(path)
    message = str(failure.value)
    assert key in message and "supported" in message and "\n" not in message


def test_default_rope_scaling_and_inactive_window_load(tmp_path):
    path = variant(
        tmp_path, rope_scaling={"type": "default"}, use_sliding_window=False, sliding_window=4
    )
    loaded = AutoModel.from_pretrained(path)
    assert loaded.config.sliding_window is None


def test_mask_must_be_bool(model):
    ids = canvas(4)
    with pytest.raises(ValueError, match="bool"):
        model(ids, attention_mask=torch.zeros(1, 1, 4, 4))
