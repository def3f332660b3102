"""Every paper preset in conf/experiment/ composes and passes its knob checks as written, and its
first sweep cell runs end to end on tiny-world substitutes (same method and knobs; the tiny
target, drafter and task in place of hub models and datasets) with one sample."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from conftest import compose_cfg
from specbench import paths
from specbench.config import check_knobs
from specbench.pipeline import execute, prepare, warp_of
from specbench.registry import METHODS, discover

EXPERIMENTS = sorted(p.stem for p in (paths.CONF_DIR / "experiment").glob("*.yaml"))
TINY_MODELS = {"tiny", "tiny-ar", "tiny-dlm", "tiny-dflash", "tiny-eagle3", "none"}
TINY_MODELS |= {name.replace("tiny", "tiny-math", 1) for name in TINY_MODELS - {"none"}}
TINY_TASKS = {"tiny_code", "tiny_math"}
SUBSTITUTE = {"causal": "tiny", "diffusion": "tiny-dlm"}
DRAFTER = {
    "causal": "tiny-ar",
    "diffusion": "tiny-dlm",
    "dflash": "tiny-dflash",
    "eagle3": "tiny-eagle3",
    "none": "none",
}


def first_cell(name: str) -> list[str]:
    """The experiment's sweep parameters at their first values."""
    discover()
    with initialize_config_dir(str(paths.CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={name}"], return_hydra_config=True)
    params = cfg.hydra.sweeper.params or {}
    return [f"{key}={str(value).split(',')[0]}" for key, value in params.items()]


def stand_in(name: str, by_kind: str) -> str:
    """The tiny model a preset's model stands for: an xl model's source (the world's own
    tokenizer), else the tiny world's model of its kind."""
    source = name.removesuffix("-xl")
    return source if source in TINY_MODELS else by_kind


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_preset_validates_and_runs_on_tiny_substitutes(name: str, tmp_path) -> None:
    cell = [f"experiment={name}", *first_cell(name)]
    real = OmegaConf.to_object(compose_cfg(*cell))
    method = METHODS[real.method.name](real.method, warp_of(real.run))
    check_knobs(real)
    method.check_target(real.target)
    # tiny-dflash accepts nothing in the first sample's first 20 tokens (a hard opening, and
    # the weakest drafter here); every other drafter has drafts accepted within 16
    tokens = 48 if real.drafter.kind == "dflash" else 16
    substitutes = ["run.limit=1", f"run.max_new_tokens={tokens}", f"run.results_dir={tmp_path}"]
    if real.target.name not in TINY_MODELS:
        substitutes.append(f"target={stand_in(real.target.name, SUBSTITUTE[real.target.kind])}")
    if real.drafter.name not in TINY_MODELS:
        substitutes.append(f"drafter={stand_in(real.drafter.name, DRAFTER[real.drafter.kind])}")
    if real.task.name not in TINY_TASKS:
        substitutes.append("task=tiny_code")
    # a serving engine's cells run in tests/test_vllm.py, tests/test_llamacpp_servers.py
    if real.backend.name in ("vllm", "llamacpp"):
        substitutes += ["backend=specbench", "run.concurrency=1"]
    if real.run.device not in ("auto", "cpu"):  # a GPU preset (its rehearsal: test_gpu_world)
        substitutes += ["run.device=cpu", "run.engine=eager"]
    if hasattr(real.method, "calibration_samples"):
        substitutes.append("method.calibration_samples=2")
    summary = execute(prepare(compose_cfg(*cell, *substitutes)))
    assert summary.n_samples == 1 and summary.new_tokens >= 1
    assert summary.method == real.method.name
    # the method's effect, on the tiny world too: lossless where it claims to be, and its
    # drafts accepted (fewer target forwards than its baseline)
    if summary.lossless and method.warp.greedy:
        assert summary.base.identical_rate == 1.0
    if method.round_unit is not None:
        assert summary.accepted > 0 and summary.base.nfe_reduction > 1
