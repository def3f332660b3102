"""Shared fixtures: the random-init built-ins written once per test session into a temp cache."""

# ruff: noqa: E402 (the kernels are pinned before torch is imported)

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from specbench import cpu_kernels

cpu_kernels.pin()  # before torch loads: the bf16 goldens are AVX2 kernels' output (cpu_kernels.py)

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from scipy.stats import chisquare

from specbench import paths
from specbench.backends.specbench.backend import RESIDENT
from specbench.config import ModelConfig
from specbench.models.causal import CausalLM
from specbench.models.diffusion import MaskedDiffusionLM
from specbench.models.kinds.causal import load_causal_lm
from specbench.models.kinds.diffusion import load_diffusion_lm
from specbench.pipeline import execute, prepare
from specbench.registry import discover

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one test process per core (make test runs two): a second intra-op thread would only
    # contend with the other worker; subprocesses the tests start inherit the setting
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"


def pytest_configure(config: pytest.Config) -> None:
    """The tests read real files from the shared data folder; without it, stop at once with the
    fix rather than after minutes of failed hub downloads."""
    if not (paths.data_dir() / "gpt2_tokenizer" / "encoder.json").exists():
        pytest.exit(
            f"shared data not found at {paths.data_dir()}: put the shared/ folder beside the "
            "repository or set SPECBENCH_DATA_DIR to its data/ folder",
            returncode=2,
        )


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("specbench-cache")
    os.environ["SPECBENCH_CACHE"] = str(cache)  # subprocesses inherit it
    os.environ["WANDB_SILENT"] = "true"
    return cache


# Random-init models in float64: their top-2 logits can sit 1e-7 apart, where a float32
# (gamma + 1)-token forward and a one-token forward break the tie differently, so a token
# equality test in float32 would test rounding, not the method. The trained tiny world's
# margins are wide, and its models stay float32 (float64 would triple the suite's time).
EXACT = "float64"


def dtype_for(name: str) -> str:
    return EXACT if name.startswith("random-") else "float32"


def builtin(name: str) -> CausalLM:
    cfg = ModelConfig(name=name, name_or_path=f"specbench:{name}")
    return load_causal_lm(cfg, "target", torch.device("cpu"), dtype_for(name))


def tiny_dlm() -> MaskedDiffusionLM:
    """The tiny world's diffusion LM behind its adapter, as `drafter=tiny-dlm` loads it."""
    cfg = ModelConfig(
        name="tiny-dlm", name_or_path="specbench:tiny-dlm", kind="diffusion", adapter="tiny"
    )
    return load_diffusion_lm(cfg, "drafter", torch.device("cpu"), "float32")


@pytest.fixture(scope="session")
def target() -> CausalLM:
    return builtin("random-gpt2")


@pytest.fixture(scope="session")
def drafter() -> CausalLM:
    """float32: a drafter's rounding cannot break equality, only the target's can."""
    cfg = ModelConfig(name="random-gpt2-draft", name_or_path="specbench:random-gpt2-draft")
    return load_causal_lm(cfg, "drafter", torch.device("cpu"), "float32")


def compose_cfg(*overrides: str) -> DictConfig:
    """The config `specbench-run` would compose, with W&B off and no warm-up by default."""
    discover()  # method and task schemas enter Hydra's ConfigStore when their modules import
    defaults = ["logging.wandb.mode=disabled", "run.warmup=0", "run.progress=false"]
    with initialize_config_dir(str(paths.CONF_DIR), version_base="1.3"):
        return compose("config", overrides=[*defaults, *overrides])


def tree_beside_its_chain(tmp_path: Path, chain: str, *cell: str) -> float:
    """A tree cell on 3 tiny-world samples, greedy: both it and its chain arm (`vs.<chain>`,
    same drafter, same samples) token-identical to the target's own decoding, so the chain's
    target forwards over the tree's (its nfe_reduction, returned) are the tree's tau over the
    chain's."""
    cfg = compose_cfg(*cell, "run.limit=3", "run.max_new_tokens=40", f"run.results_dir={tmp_path}")
    summary = execute(prepare(cfg))
    versus = summary.vs[chain]
    assert summary.base.identical_rate == 1.0 and versus.identical_rate == 1.0
    return versus.nfe_reduction


# float32 reads that sum in another order than the read they equal: other shapes, masks or
# caches, or another CPU's kernels (an AMD EPYC differs from an Intel Xeon by up to 2e-4 on the
# native LLaDA / Dream / MDLM checks); a wrong mask, position or cache moves logits by 0.1-2.
REORDERED = {"rtol": 1e-4, "atol": 5e-4}


def assert_golden_logits(logits: torch.Tensor, golden: dict) -> None:
    """Logits equal upstream's recorded ones (`tests/goldens/<family>/goldens.json`): the 512
    recorded vocabulary columns and the logsumexp at every position (`REORDERED`: upstream
    ran on another machine), the argmax exactly."""
    logits = logits.float()
    columns = torch.tensor(golden["columns"])
    torch.testing.assert_close(logits[:, :, columns], torch.tensor(golden["values"]), **REORDERED)
    assert logits.argmax(-1).tolist() == golden["argmax"]
    torch.testing.assert_close(logits.logsumexp(-1), torch.tensor(golden["logsumexp"]), **REORDERED)


def law_pvalue(counts: Counter, law: dict[tuple[int, ...], float], draws: int) -> float:
    """Chi-square p-value of sampled sequences against the enumerated law: every sequence
    expected at least 5 times on its own, the rest pooled into one bin."""
    assert set(counts) <= {seq for seq, p in law.items() if p > 0}
    big = [seq for seq, p in law.items() if p * draws >= 5]
    observed = [counts[s] for s in big] + [draws - sum(counts[s] for s in big)]
    expected = [law[s] * draws for s in big] + [draws * (1 - sum(law[s] for s in big))]
    total = sum(expected)
    return chisquare(observed, [e / total * draws for e in expected]).pvalue


# a finalizer that sends this process Ctrl-C and runs on while its handler fires: Python prints
# the exception it raises there and carries on (code for a subprocess, after `import os, signal`)
SWALLOWS_CTRL_C = """
class Swallows:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100_000):
            pass
"""


@pytest.fixture(autouse=True)
def fresh_models() -> None:
    """Each test loads its own models: none kept from another test's cells (`RESIDENT`)."""
    RESIDENT.clear()


@pytest.fixture(scope="module")
def random_qwen3() -> CausalLM:
    """A tied-embedding random Qwen3 (vocabulary 128) in float64: it soon repeats token 88,
    which a fresh DFlash drafter whose mask is 88 drafts, so some blocks (and tree paths) are
    accepted whole and some not."""
    from types import SimpleNamespace

    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval().double()
    model.generation_config.eos_token_id = None
    return CausalLM(model, SimpleNamespace(eos_token_id=None), "random-qwen3")
