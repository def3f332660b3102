"""Read checkpoints from the hub, a local `save_pretrained` directory, or a built-in: where
they are, their configs, tokenizers, tensor headers, and their weights into a model class.

Everything here except `load_weights` reads only configs, tokenizers and headers, so validation
can run before any weight loads; each model kind (`models/kinds/`) builds its models from them.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase

from specbench import paths
from specbench.config import DTYPE_NAMES, ModelConfig
from specbench.errors import ConfigError
from specbench.models.hub import check_reference
from specbench.registry import BUILTIN_MODELS, discover

T = TypeVar("T")

BUILTIN_PREFIX = "specbench:"
# float64: exactness tests, where float32 near-ties between forward shapes would flip tokens
DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


def resolve(cfg: ModelConfig, key: str) -> str:
    """The path or hub id to hand to `from_pretrained`. `specbench:<name>` is a tiny-world
    checkpoint shipped in the package, or a random-init built-in written once to the cache."""
    ref = cfg.name_or_path
    if not ref.startswith(BUILTIN_PREFIX):
        check_reference(ref, f"{key}.name_or_path", cfg.revision)
        return ref
    discover()
    name = ref[len(BUILTIN_PREFIX) :]
    shipped = paths.TINY_DIR / name
    if (shipped / "config.json").exists():
        return str(shipped)  # a tiny-world checkpoint committed with the code
    if name not in BUILTIN_MODELS:
        tiny = sorted(p.parent.name for p in paths.TINY_DIR.glob("*/config.json"))
        raise ConfigError(
            f"{key}.name_or_path",
            ref,
            f"built-ins are {sorted(BUILTIN_MODELS) + tiny} (`make tiny` trains the tiny world)",
        )
    out = paths.cache_dir() / "models" / f"{name}-{_source_hash(BUILTIN_MODELS[name])}"
    if not (out / "config.json").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{name}-"))
        try:
            BUILTIN_MODELS[name](tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # a failed or interrupted build leaves nothing
            raise
        try:
            os.replace(tmp, out)  # atomic: parallel sweep jobs never see a half-written model
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)  # another job won the race
    return str(out)


def _source_hash(builder) -> str:
    """The builder's module source and the checkpoints it reads, hashed: a built-in written by
    older code or from another checkpoint is never reused."""
    digest = hashlib.sha256(Path(inspect.getsourcefile(builder)).read_bytes())
    for source in getattr(builder, "sources", ()):
        for file in sorted(Path(source).iterdir()):
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def _read(key: str, ref: str, what: str, read: Callable[[], T]) -> T:
    """What transformers reads from a checkpoint; its error (a missing file, a tokenizer it
    cannot build) as one line naming the key."""
    try:
        return read()
    except ConfigError:
        raise
    except (OSError, ValueError) as err:
        first = (str(err).strip() or type(err).__name__).splitlines()[0]
        raise ConfigError(key, ref, f"cannot read its {what}: {first}") from None


def _from_checkpoint(
    cfg: ModelConfig, key: str, what: str, read: Callable[..., T], **kwargs: object
) -> T:
    """`read` (a transformers `from_pretrained`) on the config's checkpoint at its revision,
    under `_read`; resolving a built-in happens inside, so its error reads the same."""
    return _read(
        f"{key}.name_or_path",
        cfg.name_or_path,
        what,
        lambda: read(resolve(cfg, key), revision=cfg.revision, **kwargs),
    )


def load_tokenizer(cfg: ModelConfig, key: str) -> PreTrainedTokenizerBase:
    if cfg.tokenizer:  # a checkpoint that ships none (mdlm-owt reads GPT-2's)
        check_reference(cfg.tokenizer, f"{key}.tokenizer", None, model=False)
        return _read(
            f"{key}.tokenizer",
            cfg.tokenizer,
            "tokenizer",
            lambda: AutoTokenizer.from_pretrained(cfg.tokenizer),
        )
    builder = _builtin(cfg)
    if builder is not None and builder.tokenizer is not None:
        return builder.tokenizer()  # no weights built to read it
    return _from_checkpoint(
        cfg,
        key,
        "tokenizer",
        AutoTokenizer.from_pretrained,
        trust_remote_code=cfg.trust_remote_code,
    )


def _builtin(cfg: ModelConfig) -> Callable | None:
    """The random-init built-in `cfg` names (not a committed tiny-world checkpoint), if any."""
    name = cfg.name_or_path.removeprefix(BUILTIN_PREFIX)
    if name == cfg.name_or_path or (paths.TINY_DIR / name / "config.json").exists():
        return None
    discover()
    return BUILTIN_MODELS[name] if name in BUILTIN_MODELS else None


def context_length(cfg: ModelConfig, key: str) -> int | None:
    """The model's maximum sequence length: the config entry's, else read from the model's
    own config (no weights)."""
    if cfg.context_length:
        return cfg.context_length
    return max_positions(model_config(cfg, key))


def model_config(cfg: ModelConfig, key: str) -> PretrainedConfig:
    """The checkpoint's transformers config (no weights)."""
    return _from_checkpoint(
        cfg, key, "config", AutoConfig.from_pretrained, trust_remote_code=cfg.trust_remote_code
    )


def checkpoint_config(cfg: ModelConfig, key: str) -> dict:
    """The checkpoint's config.json as a dict (no weights, no remote code)."""
    config, _ = _from_checkpoint(cfg, key, "config", PretrainedConfig.get_config_dict)
    return config


# the input embedding's name in each family's state dict (Llama/Qwen/Dream, tiny-dlm, GPT-2,
# LLaDA's transformer and BERT-style models): its rows are the vocabulary
EMBEDDINGS = ("embed_tokens.weight", "embed.weight", "wte.weight", "word_embeddings.weight")


def check_weights(cfg: ModelConfig, key: str) -> None:
    """One line, before any weight loads, for a local checkpoint whose safetensors files are
    cut short or whose headers lie (a tensor past the file's end), or whose embedding rows
    contradict its config's vocabulary: read from the files' headers alone. A hub download is
    checked by the hub's own hashes. A built-in is not: specbench writes it itself, atomically,
    and resolving it here would build it before the checks that could refuse the cell."""
    if _builtin(cfg) is not None:
        return
    where = Path(resolve(cfg, key))
    files = sorted(where.glob("*.safetensors")) if where.is_dir() else []
    vocab = vocabulary_size(checkpoint_config(cfg, key)) if files else None
    for file in files:
        for name, shape in tensor_shapes(file, f"{key}.name_or_path", cfg.name_or_path).items():
            if name.endswith(EMBEDDINGS) and vocab and shape[0] != vocab:
                raise ConfigError(
                    f"{key}.name_or_path",
                    cfg.name_or_path,
                    f"config.json says a vocabulary of {vocab}, but {file.name}'s {name} has "
                    f"{shape[0]} rows",
                )


def tensor_shapes(file: Path, key: str, ref: str) -> dict[str, list[int]]:
    """Every tensor's shape from a safetensors header (no data read); a file the header does
    not describe exactly is refused."""
    try:
        with safe_open(file, "pt") as weights:
            return {name: weights.get_slice(name).get_shape() for name in weights.keys()}
    except (SafetensorError, OSError) as err:
        raise ConfigError(
            key,
            ref,
            f"{file.name} is not a whole safetensors file ({err}); download or save it again",
        ) from None


def vocabulary_size(config: dict) -> int | None:
    """The number of logits a checkpoint's forward returns (LLaDA pads to `embedding_size`)."""
    return config.get("embedding_size") or config.get("vocab_size")


def max_positions(config: PretrainedConfig) -> int | None:
    text = config.get_text_config()
    for attr in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length"):
        value = getattr(text, attr, None)
        if isinstance(value, int):
            return value
    return None


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """`auto` is bfloat16 on an accelerator and float32 on a CPU, where bf16 matmuls are slow."""
    if name == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return DTYPES[name]


def placement(cfg: ModelConfig) -> dict[int | str, str] | None:
    """`max_memory` with GPU indices as integers, as accelerate wants them (None: no cap)."""
    if not cfg.max_memory:
        return None
    return {int(k) if str(k).isdigit() else k: v for k, v in cfg.max_memory.items()}


def load_weights(
    cls: type, cfg: ModelConfig, key: str, device: torch.device, run_dtype: str, **kwargs
) -> torch.nn.Module:
    """`cls.from_pretrained` on the config's checkpoint in its dtype. With `device_map` set,
    accelerate places (and may shard) the model; otherwise it goes to `device`."""
    model = cls.from_pretrained(
        resolve(cfg, key),
        revision=cfg.revision,
        dtype=resolve_dtype(cfg.dtype or run_dtype, device),
        device_map=cfg.device_map,
        max_memory=placement(cfg),
        **kwargs,
    )
    if cfg.device_map is None:
        model.to(device)
    return model
