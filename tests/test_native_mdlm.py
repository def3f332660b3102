"""The native MDLM class against goldens from upstream's own code (tools/goldens/mdlm.py): it
loads the hub-format checkpoint through AutoModel without remote code, its logits match
upstream's with and without time conditioning, and its cache, positions and masks keep the
shared native contract."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

from conftest import REORDERED, assert_golden_logits
from specbench.models.native.mdlm import MDLM, MDLMConfig

GOLDENS = Path(__file__).parent / "goldens" / "mdlm"
MASK_ID = 50257


@pytest.fixture(scope="module")
def goldens() -> dict:
    return json.loads((GOLDENS / "goldens.json").read_text())


def checkpoint(tmp_path: Path, config: str = "config.json", **changes) -> Path:
    """The golden checkpoint under another config file, optionally with keys changed."""
    folder = tmp_path / f"ckpt-{config}-{len(changes)}"
    folder.mkdir()
    text = json.loads((GOLDENS / config).read_text())
    (folder / "config.json").write_text(json.dumps({**text, **changes}))
    shutil.copy(GOLDENS / "model.safetensors", folder / "model.safetensors")
    return folder


def load(folder: Path = GOLDENS, **kwargs) -> MDLM:
    return AutoModel.from_pretrained(folder, **kwargs).eval()


def test_loads_through_the_auto_classes_without_remote_code() -> None:
    assert type(AutoConfig.from_pretrained(GOLDENS)) is MDLMConfig
    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModel.from_pretrained(GOLDENS, dtype=dtype)
        assert type(model) is MDLM and model.dtype == dtype
        assert model.get_input_embeddings().weight.device.type == "cpu"
        assert model.get_output_embeddings().weight.shape[0] == 50258
    masked_lm = AutoModelForMaskedLM.from_pretrained(GOLDENS)
    assert type(masked_lm) is MDLM
    names = set(masked_lm.state_dict())
    assert "backbone.vocab_embed.embedding" in names
    assert "backbone.blocks.1.adaLN_modulation.weight" in names


@pytest.mark.parametrize("key", ["logits", "logits_tc"])
def test_float32_logits_match_upstream(tmp_path, goldens, key) -> None:
    golden = goldens[key]
    folder = checkpoint(tmp_path, golden["config"]) if key == "logits_tc" else GOLDENS
    model = load(folder)
    ids = torch.tensor(golden["input_ids"])
    with torch.no_grad():
        logits = model(ids, timesteps=torch.tensor(golden["timesteps"])).logits
    assert logits.dtype == torch.float32
    assert_golden_logits(logits, golden)


def test_bfloat16_logits_are_close_to_upstreams(goldens) -> None:
    """Upstream's GPU recipe with rounded weights: bfloat16 matmuls and logits, float32 norms."""
    golden = goldens["logits"]
    with torch.no_grad():
        logits = load(dtype=torch.bfloat16)(torch.tensor(golden["input_ids"])).logits
    assert logits.dtype == torch.bfloat16
    columns = torch.tensor(golden["columns"])
    torch.testing.assert_close(
        logits[:, :, columns].float(), torch.tensor(golden["values"]), rtol=0.05, atol=0.4
    )
    agree = (logits.argmax(-1) == torch.tensor(golden["argmax"])).float().mean()
    assert agree >= 0.9


def test_timesteps_are_ignored_without_time_conditioning_and_used_with_it(tmp_path) -> None:
    ids = torch.tensor([[5, 17, MASK_ID, 300, MASK_ID]])
    low, high = torch.tensor([0.1]), torch.tensor([3.0])
    with torch.no_grad():
        plain = load()
        torch.testing.assert_close(
            plain(ids, timesteps=low).logits, plain(ids, timesteps=high).logits
        )
        torch.testing.assert_close(plain(ids).logits, plain(ids, timesteps=high).logits)
        timed = load(checkpoint(tmp_path, "config_tc.json"))
        assert not torch.allclose(
            timed(ids, timesteps=low).logits, timed(ids, timesteps=high).logits
        )
        with pytest.raises(ValueError, match="timesteps"):
            timed(ids)


def test_a_sigma_passed_where_the_mask_goes_is_refused() -> None:
    """The hub signature is forward(input_ids, timesteps); the native one puts the mask second."""
    with pytest.raises(ValueError, match="timesteps="):
        load()(torch.tensor([[1, 2, 3]]), torch.zeros(1))


def test_the_output_has_logits_whatever_return_dict_says() -> None:
    model = load()
    assert model.config.return_dict is False  # as mdlm-owt's config.json has it
    out = model(torch.tensor([[1, 2, 3]]), return_dict=False)
    assert out.logits.shape == (1, 3, 50258)


def prefix_then_block_mask(prefix: int, total: int) -> torch.Tensor:
    """A mask that is not all-True: the prefix reads itself causally, the block reads all."""
    query = torch.arange(total)[:, None]
    key = torch.arange(total)[None, :]
    return ((key <= query) | (query >= prefix))[None, None]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_cached_prefix_then_a_block_equals_one_forward(tmp_path, dtype) -> None:
    model = load(checkpoint(tmp_path, "config_tc.json"), dtype=dtype)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50000, (2, 13), generator=generator)
    ids[:, 10:] = MASK_ID
    sigma = torch.tensor([0.5, 2.0])
    prefix, mask = 9, prefix_then_block_mask(9, 13)
    with torch.no_grad():
        full = model(ids, attention_mask=mask, timesteps=sigma).logits
        head = model(ids[:, :prefix], mask[:, :, :prefix, :prefix], use_cache=True, timesteps=sigma)
        assert len(head.past_key_values) == 2
        k, v = head.past_key_values[0]
        assert k.shape == v.shape == (2, 2, prefix, 8)
        tail = model(
            ids[:, prefix:],
            attention_mask=mask[:, :, prefix:],
            past_key_values=head.past_key_values,
            use_cache=True,
            timesteps=sigma,
        )
        assert tail.past_key_values[1][0].shape[2] == 13
        positions = torch.arange(prefix, 13)[None]
        explicit = model(
            ids[:, prefix:],
            attention_mask=mask[:, :, prefix:],
            position_ids=positions,
            past_key_values=head.past_key_values,
            timesteps=sigma,
        ).logits
    tol = REORDERED if dtype == torch.float32 else {"rtol": 0.02, "atol": 0.05}
    torch.testing.assert_close(head.logits, full[:, :prefix], **tol)
    torch.testing.assert_close(tail.logits, full[:, prefix:], **tol)
    torch.testing.assert_close(explicit, tail.logits, rtol=0, atol=0)


def test_positions_are_the_rope_positions(goldens) -> None:
    """Shifting every position leaves bidirectional attention's logits unchanged (RoPE is
    relative), but moving one token's position changes them: the positions are used."""
    model = load()
    ids = torch.tensor(goldens["logits"]["input_ids"][:1])
    base = torch.arange(ids.shape[1])[None]
    with torch.no_grad():
        default = model(ids).logits
        shifted = model(ids, position_ids=base + 7).logits
        moved = base.clone()
        moved[0, 3] = 40
        changed = model(ids, position_ids=moved).logits
    torch.testing.assert_close(shifted, default, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(changed, default, atol=1e-3)


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"cross_attn": True}, "cross_attn"),
        ({"adaln": False}, "adaln"),
        ({"n_heads": 3}, "n_heads"),
    ],
)
def test_an_unsupported_variant_fails_with_one_clear_line(tmp_path, changes, key) -> None:
    with pytest.raises(ValueError, match=key) as error:
        load(checkpoint(tmp_path, **changes))
    assert "\n" not in str(error.value) and "supported" in str(error.value)
