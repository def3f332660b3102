"""GGUF files of specbench's causal checkpoints, for engines that load llama.cpp's format
(`backend=llamacpp`).

A Llama- or Qwen2/Qwen3-architecture `save_pretrained` directory (the tiny world's `tiny`,
`tiny-ar`, the grown `tiny-xl`, or any local checkpoint) is written with the `gguf` package in
one of `QUANTS`: `f32`, `bf16`, or llama.cpp's block formats `q8_0` and `q4_0`, quantized by
gguf-py's own numpy kernels (`gguf.quants`, bit-identical to ggml's reference quantizers). The
quantization is *pure*: every matrix (the embeddings and head too) in the named type, every
vector (norms, biases) in f32; llama-quantize's default mixes would keep some matrices in wider
types and make the file's name say less about what it holds. The vocabulary is the real
tokenizer's (byte-level BPE as llama.cpp's `gpt2` model: tokens, merges, types, eos and pad), so
llama.cpp loads it as it loads any such model; specbench still sends prompts as token ids.

A DFlash drafter (z-lab's `DFlashDraftModel`, Qwen3 layers reading the target's hidden states)
is written as llama.cpp's `dflash` architecture (`export_dflash`), the layout of llama.cpp's
own converter (`conversion/qwen.py`, `DFlashModel`): the draft's layers, its fusion `fc` and
norm, the target layers it reads (as llama.cpp counts them: a layer's input, so z-lab's id + 1)
and its block size and mask token; the embeddings and head stay the target's, which llama.cpp
shares from the target's context.

An EAGLE-3 drafter (EAGLE's own layout or vLLM's speculators format, `specbench/models/eagle3.py`)
is written as llama.cpp's `eagle3` architecture (`export_eagle3`), the layout llama.cpp's
converter writes for one (`conversion/llama.py`, `LlamaModel` on a checkpoint with a draft
vocabulary and one layer): its layer as a Llama block (q and k permuted, `hidden_norm` as
`attn_norm_2`), `fc`, the final norm and draft-vocabulary head, `d2t` as the absolute target id
of each draft id (int64), the target layers it reads (EAGLE's ids already name a layer's input,
as llama.cpp counts them), the target's hidden size and the target's vocabulary; the embeddings
stay the target's, which llama.cpp reads from the target's context.

Files are written once and cached under `$SPECBENCH_CACHE/gguf/`, keyed by a hash of the
checkpoint's files (and the target's, for a drafter) and of this module's source, so an export
by older code, or of an older checkpoint, is never reused (`cached`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import gguf
import numpy as np
import torch
from safetensors import safe_open

from specbench import paths
from specbench.errors import ConfigError
from specbench.models.eagle3 import (
    EAGLE_LAYER,
    aux_layer_ids,
    drafter_state,
    eagle3_config,
    read_state,
)

Q = gguf.GGMLQuantizationType
# name -> (the type of every matrix, the file type llama.cpp reads from general.file_type)
QUANTS: dict[str, tuple[Q, gguf.LlamaFileType]] = {
    "f32": (Q.F32, gguf.LlamaFileType.ALL_F32),
    "bf16": (Q.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "q8_0": (Q.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (Q.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
}
TOKEN_TYPE = gguf.TokenType


@dataclass(frozen=True)
class Arch:
    """How one transformers architecture maps onto a llama.cpp one."""

    gguf: gguf.MODEL_ARCH
    # Llama's rotary embedding pairs dims (i, i + d/2) in transformers and (2i, 2i + 1) in
    # llama.cpp's `llama` graph: q and k rows are permuted as llama.cpp's converter does
    permute_qk: bool


ARCHS = {
    "LlamaForCausalLM": Arch(gguf.MODEL_ARCH.LLAMA, permute_qk=True),
    "Qwen2ForCausalLM": Arch(gguf.MODEL_ARCH.QWEN2, permute_qk=False),
    "Qwen3ForCausalLM": Arch(gguf.MODEL_ARCH.QWEN3, permute_qk=False),
}
DFLASH = "DFlashDraftModel"
# an EAGLE-3 drafter's tensors outside a Llama block's names (conversion/llama.py)
EAGLE3_OWN = {
    "fc.weight": "fc.weight",
    "input_norm.weight": "enc.output_norm.weight",  # norm_before_fc's
    "model.layers.0.hidden_norm.weight": "blk.0.attn_norm_2.weight",
}
TAKES = ", ".join([*ARCHS, DFLASH, "EAGLE-3 drafters"])


def flat(config: dict) -> dict:
    """A config.json with speculators' nested Llama settings lifted to the top, as llama.cpp's
    converter reads one."""
    return {**config, **config.get("transformer_layer_config", {})}


def is_eagle3(config: dict) -> bool:
    """An EAGLE-3 drafter, told as llama.cpp's converter tells one: a draft vocabulary and one
    layer (some releases name no architecture of their own, only LlamaForCausalLM)."""
    settings = flat(config)
    return "draft_vocab_size" in settings and settings.get("num_hidden_layers") == 1


def check_exportable(config: dict, key: str, ref: str) -> None:
    """Refuse, from config.json alone, a checkpoint this module cannot write."""
    arch = (config.get("architectures") or ["?"])[0]
    if arch not in (*ARCHS, DFLASH) and not is_eagle3(config):
        raise ConfigError(key, ref, f"is a {arch}; GGUF export takes {TAKES}")
    config = flat(config)
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type", "default") != "default":
        raise ConfigError(key, ref, f"rope_type={rope['rope_type']}: GGUF export takes default")


def cached(checkpoint: Path, quant: str, target: Path | None = None) -> Path:
    """The checkpoint's GGUF file in `quant`, written on first use (a DFlash or EAGLE-3
    drafter's needs its `target`); parallel runs never see a half-written file."""
    sources = [checkpoint] if target is None else [checkpoint, target]
    out = paths.cache_dir() / "gguf" / f"{checkpoint.name}-{quant}-{source_hash(sources)}.gguf"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.stem}-", suffix=".gguf")
    os.close(fd)
    try:
        if target is None:
            export(checkpoint, quant, Path(tmp))
        elif is_eagle3(_config(checkpoint)):
            export_eagle3(checkpoint, target, quant, Path(tmp))
        else:
            export_dflash(checkpoint, target, quant, Path(tmp))
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return out


def source_hash(checkpoints: list[Path]) -> str:
    """This module's source and every file of the checkpoints, hashed."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(metadata.version("gguf").encode())  # its quantizers write the blocks
    for checkpoint in checkpoints:
        for file in sorted(checkpoint.iterdir()):
            if file.is_file() and file.suffix in (".json", ".safetensors", ".bin"):
                digest.update(file.name.encode())
                with file.open("rb") as f:
                    while chunk := f.read(1 << 24):
                        digest.update(chunk)
    return digest.hexdigest()[:12]


def export(checkpoint: Path, quant: str, out: Path) -> None:
    """Write a causal LM checkpoint as one GGUF file."""
    config = _config(checkpoint)
    arch = ARCHS[config["architectures"][0]]
    writer = gguf.GGUFWriter(str(out), gguf.MODEL_ARCH_NAMES[arch.gguf])
    _hparams(writer, config, checkpoint.name, quant)
    _vocab(writer, checkpoint, config)
    names = gguf.get_tensor_name_map(arch.gguf, config["num_hidden_layers"])
    for name, tensor in _tensors(checkpoint):
        if arch.permute_qk:
            tensor = _rotary_layout(name, tensor, config)
        _add(writer, _gguf_name(names, name), tensor, quant)
    _write(writer)


def export_dflash(drafter: Path, target: Path, quant: str, out: Path) -> None:
    """Write a DFlash drafter as llama.cpp's `dflash` architecture, with the target's
    vocabulary (its embeddings and head stay the target's)."""
    config, target_config = _config(drafter), _config(target)
    dflash = config.get("dflash_config", {})
    writer = gguf.GGUFWriter(str(out), "dflash")
    _hparams(writer, config, drafter.name, quant)
    _vocab(writer, target, target_config)
    writer.add_mask_token_id(dflash["mask_token_id"])
    writer.add_uint32("dflash.block_size", config.get("block_size", 16))
    writer.add_array("dflash.target_layers", [i + 1 for i in dflash["target_layer_ids"]])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, config["num_hidden_layers"])
    own = {"fc.weight": "fc.weight", "hidden_norm.weight": "enc.output_norm.weight"}
    for name, tensor in _tensors(drafter):
        gguf_name = own.get(name) or _gguf_name(names, f"model.{name}")
        _add(writer, gguf_name, tensor, quant)
    _write(writer)


def export_eagle3(drafter: Path, target: Path, quant: str, out: Path) -> None:
    """Write an EAGLE-3 drafter as llama.cpp's `eagle3` architecture, with the target's
    vocabulary (its embeddings stay the target's). Its settings are read as specbench's
    drafter reads them (`eagle3_config`: either layout, Llama's defaults filled in)."""
    raw, target_config = _config(drafter), _config(target)
    config = eagle3_config(raw)
    settings = config.to_dict()
    writer = gguf.GGUFWriter(str(out), "eagle3")
    _hparams(writer, settings, drafter.name, quant)
    _vocab(writer, target, target_config)
    reads = aux_layer_ids(config, target_config["num_hidden_layers"])
    writer.add_array("eagle3.target_layers", reads)
    writer.add_uint32("eagle3.target_hidden_size", config.target_hidden_size)
    writer.add_bool("eagle3.norm_before_residual", config.norm_before_residual)
    writer.add_bool("eagle3.norm_before_fc", bool(flat(raw).get("norm_before_fc", False)))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 1)
    for name, tensor in drafter_state(read_state(drafter), mapped=True).items():
        if name == "d2t":
            ids = _target_ids(tensor, target_config["vocab_size"])
            writer.add_tensor(name, ids, raw_dtype=Q.I64)
        elif name != "t2d":  # llama.cpp maps drafts by d2t alone
            name = name.replace(EAGLE_LAYER, "model.layers.0.", 1)
            tensor = _rotary_layout(name, tensor.to(torch.float32).numpy(), settings)
            _add(writer, EAGLE3_OWN.get(name) or _gguf_name(names, name), tensor, quant)
    _write(writer)


def _target_ids(d2t: torch.Tensor, vocab: int) -> np.ndarray:
    """EAGLE's offsets (draft id d is target id d + d2t[d]) as the absolute target ids
    llama.cpp's graph scatters the draft logits to, checked as its converter checks them."""
    ids = d2t.to(torch.int64).numpy().reshape(-1) + np.arange(d2t.numel(), dtype=np.int64)
    if ids.min() < 0 or ids.max() >= vocab or np.unique(ids).size != ids.size:
        raise ValueError(f"EAGLE-3 d2t maps outside a vocabulary of {vocab} or twice to one id")
    return ids


def _config(checkpoint: Path) -> dict:
    config = json.loads((checkpoint / "config.json").read_text())
    check_exportable(config, "checkpoint", str(checkpoint))
    return config


def _hparams(writer: gguf.GGUFWriter, config: dict, name: str, quant: str) -> None:
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    rope = config.get("rope_parameters") or {}
    writer.add_name(name)
    writer.add_file_type(QUANTS[quant][1])
    if QUANTS[quant][0] not in (Q.F32, Q.BF16):
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads", heads))
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])


def _vocab(writer: gguf.GGUFWriter, checkpoint: Path, config: dict) -> None:
    """The checkpoint's byte-level BPE tokenizer as llama.cpp's `gpt2` model; rows of the
    embedding past the tokenizer's vocabulary become unused padding tokens."""
    tokenizer = json.loads((checkpoint / "tokenizer.json").read_text())
    model = tokenizer["model"]
    if model["type"] != "BPE" or (tokenizer.get("pre_tokenizer") or {}).get("type") != "ByteLevel":
        raise ConfigError(
            "checkpoint", str(checkpoint), "GGUF export takes byte-level BPE tokenizers only"
        )
    size = config["vocab_size"]
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [TOKEN_TYPE.UNUSED] * size
    for text, i in model["vocab"].items():
        tokens[i], types[i] = text, TOKEN_TYPE.NORMAL
    for added in tokenizer.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = TOKEN_TYPE.CONTROL if added["special"] else TOKEN_TYPE.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    settings = json.loads((checkpoint / "tokenizer_config.json").read_text())
    ids = {a["content"]: a["id"] for a in tokenizer.get("added_tokens", [])}
    if settings.get("eos_token") in ids:
        writer.add_eos_token_id(ids[settings["eos_token"]])
    if settings.get("pad_token") in ids:
        writer.add_pad_token_id(ids[settings["pad_token"]])
    if settings.get("bos_token") in ids:
        writer.add_bos_token_id(ids[settings["bos_token"]])
    writer.add_add_bos_token(False)  # prompts arrive as token ids, exactly as specbench sends


def _tensors(checkpoint: Path) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of the checkpoint's safetensors files, as float32 numpy arrays."""
    for file in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(file, "pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is no mapping)
                yield name, f.get_tensor(name).to(torch.float32).numpy()


def _gguf_name(names: gguf.TensorNameMap, name: str) -> str:
    found = names.get_name(name, try_suffixes=(".weight", ".bias"))
    if found is None:
        raise ValueError(f"no GGUF name for tensor {name}")
    return found


def _rotary_layout(name: str, tensor: np.ndarray, config: dict) -> np.ndarray:
    """A Llama q or k projection's rows in llama.cpp's rotary layout, any other tensor as is."""
    heads = config["num_attention_heads"]
    if name.endswith(("q_proj.weight", "q_proj.bias")):
        return _permute(tensor, heads)
    if name.endswith(("k_proj.weight", "k_proj.bias")):
        return _permute(tensor, config.get("num_key_value_heads", heads))
    return tensor


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """Rows of each head from transformers' rotary layout to llama.cpp's `llama` one
    (llama.cpp's converter: LlamaModel.permute)."""
    shape = weights.shape
    per_head = weights.reshape(heads, 2, shape[0] // heads // 2, *shape[1:])
    return per_head.swapaxes(1, 2).reshape(shape)


def _add(writer: gguf.GGUFWriter, name: str, tensor: np.ndarray, quant: str) -> None:
    """A matrix in the file's type (f32 where its rows do not divide into blocks), a vector in
    f32, as llama.cpp's converter writes them."""
    qtype = QUANTS[quant][0]
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if tensor.ndim < 2 or qtype == Q.F32 or tensor.shape[-1] % block:
        writer.add_tensor(name, np.ascontiguousarray(tensor, dtype=np.float32))
        return
    writer.add_tensor(name, gguf.quants.quantize(tensor, qtype), raw_dtype=qtype)


def _write(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
