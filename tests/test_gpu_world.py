"""The GPU world: its grown models have the papers' 7-8B cost shape (counted on the meta device,
nothing allocated), its rehearsal built-in is grown, checked against its source and saved in
bf16 by the same builder the GPU runs, the compiled engine runs on an older torch's
`torch.compile`, consecutive cells share their models (what keeps the device check inside one
call), and the device check (`benchmarks/gpu_world.py --rehearse`) runs end to end on a CPU
with every cell that claims losslessness token-identical to its baseline (slow tier)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import LlamaConfig, LlamaForCausalLM

from conftest import compose_cfg
from specbench import paths
from specbench.backends.specbench.backend import RESIDENT
from specbench.config import ModelConfig
from specbench.models import compiled
from specbench.models.kinds import causal as causal_kind
from specbench.models.loading import resolve
from specbench.models.tiny.dlm import TinyDLM, TinyDLMConfig
from specbench.models.tiny.grow import GPU, REHEARSAL, grown_config
from specbench.pipeline import execute, prepare

ROOT = Path(__file__).resolve().parents[1]


def parameters_of(name: str) -> tuple[int, dict]:
    """A GPU-world built-in's parameter count and config, from its growth alone."""
    grown = GPU[name]
    if grown.source == "tiny-dlm":
        source = TinyDLMConfig.from_pretrained(paths.TINY_DIR / "tiny-dlm")
        config, cls = TinyDLMConfig(**grown_config(source, grown.growth)), TinyDLM
    else:
        source = LlamaConfig.from_pretrained(paths.TINY_DIR / "tiny")
        heads = source.num_attention_heads * grown.growth.heads
        shape = {**grown_config(source, grown.growth), "num_key_value_heads": heads}
        config, cls = LlamaConfig(**shape), LlamaForCausalLM
    with torch.device("meta"):
        model = cls(config)
    return sum(p.numel() for p in model.parameters()), config.to_dict()


def test_the_gpu_world_has_the_papers_7_to_8b_cost_shape() -> None:
    count, c = parameters_of("tiny-8b")  # Llama-2-7B / Qwen3-8B-like
    assert 7.0e9 <= count <= 8.5e9
    assert (c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"]) == (4160, 36, 11232)
    assert c["num_attention_heads"] * c["head_dim"] == c["hidden_size"]
    count, c = parameters_of("tiny-dlm-8b")  # LLaDA-8B-like
    assert 7.0e9 <= count <= 8.5e9
    assert (c["hidden_size"], c["num_hidden_layers"]) == (4096, 32)
    assert all(grown.saved == torch.bfloat16 and grown.on_gpu for grown in GPU.values())


def test_a_rehearsal_built_in_is_checked_against_its_source_and_saved_in_bf16() -> None:
    """The builder the GPU runs, at the rehearsal's size: float32 growth, checked on tiny_code
    (every prompt's greedy tokens the source's), saved in bf16 with its tokenizer."""
    cfg = ModelConfig(name="tiny-8b-rehearsal", name_or_path="specbench:tiny-8b-rehearsal")
    where = Path(resolve(cfg, "target"))
    record = json.loads((where / "growth.json").read_text())
    assert record["check"] == {"dtype": "float32", "prompts": 3, "tokens": 24, "identical": 3}
    assert record["saved_dtype"] == "bfloat16" and record["built_on"] == "cpu"
    assert record["growth"]["width"] == REHEARSAL["tiny-8b-rehearsal"].growth.width
    with safe_open(next(where.glob("*.safetensors")), "pt") as weights:
        dtypes = {weights.get_slice(name).get_dtype() for name in weights.keys()}
    assert dtypes == {"BF16"}
    assert (where / "tokenizer.json").read_bytes() == (
        paths.TINY_DIR / "tiny" / "tokenizer.json"
    ).read_bytes()


def test_compiled_models_keep_their_graphs_apart_on_an_older_torch(monkeypatch) -> None:
    """torch 2.13's `isolate_recompiles` where torch has it; on an older torch (a lent GPU's
    image), no such argument, and dynamo's shared limit raised to hold every model's graphs."""
    assert compiled.isolated(16) == {"isolate_recompiles": True, "recompile_limit": 16}

    def older_compile(model=None, *, fullgraph=False, dynamic=None, mode=None, options=None):
        return model

    monkeypatch.setattr(torch, "compile", older_compile)
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 8)
    assert compiled.isolated(16) == {}
    assert torch._dynamo.config.recompile_limit == compiled.SHARED_RECOMPILE_LIMIT
    forward = compiled.compile_forward(lambda x: x, torch.device("cpu"))
    assert forward(3) == 3


@pytest.mark.slow
def test_the_device_check_rehearses_end_to_end_on_a_cpu(tmp_path) -> None:
    """Every cell of the device check, at the rehearsal's size, eager (the compiled engine's
    cells: test_engine): each measured and predicted, lossless where it claims to be; the world
    built and checked; the forward-cost curve written."""
    out = tmp_path / "gpu_world"
    script = ROOT / "benchmarks" / "gpu_world.py"
    subprocess.run(
        [sys.executable, str(script), "--rehearse", "--engine", "eager", "--out", str(out)],
        check=True,
        cwd=ROOT,
        timeout=1800,
    )
    world = json.loads((out / "world.json").read_text())
    assert {name: record.get("check", {}).get("identical") for name, record in world.items()} == {
        "tiny-8b-rehearsal": 3,
        "tiny-dlm-8b-rehearsal": 3,
        "tiny-dflash-8b-rehearsal": None,
        "tiny-eagle3-8b-rehearsal": None,
    }
    cells = json.loads((out / "cells.json").read_text())
    ddtree = {f"ddtree N{n}" for n in (16, 32, 64)}
    methods = {"sps", "sps tree", "pld", "dflash", "specdiff", "diffuspec", "failfast", "dllm"}
    methods |= {"psd", "spiffy", "eagle3"}
    assert set(cells) == methods | ddtree
    for name, cell in cells.items():
        assert cell["lossless_rate"] == 1.0 or not cell["lossless"], name
        assert cell["speedup"] > 0 and 0 <= cell["harness_overhead"] < 1, name
    experiments = {p.name for p in (out / "runs").iterdir()}
    presets = {p.stem for p in (paths.CONF_DIR / "experiment").glob("*_gpu.yaml")}
    assert experiments == presets  # every preset ran, under its own experiment
    assert cells["ddtree N16"]["vs"].keys() == {"dflash"}
    costs = (out / "forward_cost.csv").read_text()
    assert "tiny-8b-rehearsal, 64 tokens" in costs and "tiny-ar, 1 tokens" in costs
    assert "| spiffy |" in (out / "table.md").read_text()


def records_of(results: Path) -> list[dict]:
    (file,) = results.glob("*/*/records.jsonl")
    return [json.loads(line) for line in file.read_text().splitlines()]


def test_consecutive_cells_share_their_models_and_decode_as_fresh_ones(tmp_path, monkeypatch):
    """A cell after one with the same target and drafter loads nothing and records what a fresh
    process records; a cell that takes no drafter releases it."""
    loaded: list[str] = []
    load = causal_kind.load_causal_lm
    monkeypatch.setattr(
        causal_kind, "load_causal_lm", lambda cfg, *a: loaded.append(cfg.name) or load(cfg, *a)
    )
    cell = ["method=sps", "run.limit=2", "run.max_new_tokens=24"]
    models = ("tiny", "tiny-ar")  # (the task's scoring loads a model of its own)
    execute(prepare(compose_cfg(*cell, f"run.results_dir={tmp_path / 'a'}")))
    assert [name for name in loaded if name in models] == list(models)
    gamma3 = [*cell, "method.gamma=3"]
    execute(prepare(compose_cfg(*gamma3, f"run.results_dir={tmp_path / 'kept'}")))
    assert [name for name in loaded if name in models] == list(models)  # both kept
    RESIDENT.clear()
    execute(prepare(compose_cfg(*gamma3, f"run.results_dir={tmp_path / 'fresh'}")))

    def decoded(record: dict) -> tuple:
        arm = record["method"]
        return record["id"], arm["output_ids"], arm["target_calls"], record["accepted_per_round"]

    kept, fresh = records_of(tmp_path / "kept"), records_of(tmp_path / "fresh")
    assert [decoded(r) for r in kept] == [decoded(r) for r in fresh]
    execute(prepare(compose_cfg("method=ar", *cell[1:], f"run.results_dir={tmp_path / 'ar'}")))
    assert [key[1] for key in RESIDENT] == [repr(compose_target())]


def compose_target() -> ModelConfig:
    """The default target's typed config, as the pipeline keys it."""
    from omegaconf import OmegaConf

    return OmegaConf.to_object(compose_cfg()).target
