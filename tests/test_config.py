"""Composition: structured configs reject typos; experiment presets compose."""

from __future__ import annotations

import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError

from conftest import compose_cfg
from specbench.errors import ConfigError
from specbench.models.kinds.causal import load_causal_lm
from specbench.pipeline import prepare


@pytest.mark.parametrize("typo", ["method.gama=3", "run.max_new_token=3", "target.name_or_pth=x"])
def test_a_misspelt_key_fails_at_compose_time(typo: str) -> None:
    with pytest.raises((ConfigCompositionException, ConfigKeyError)):
        compose_cfg(typo)


def test_a_key_of_another_method_is_refused() -> None:
    with pytest.raises(ConfigCompositionException):
        compose_cfg("method=ar", "method.gamma=3")


def test_experiment_preset_composes_into_its_own_results_folder() -> None:
    cfg = compose_cfg("experiment=sps_gamma")
    assert cfg.method.name == "sps" and cfg.run.experiment == "sps_gamma"


def test_max_memory_needs_a_device_map_and_places_the_model(tmp_path) -> None:
    with pytest.raises(ConfigError) as err:
        prepare(compose_cfg("+target.max_memory={cpu: 1GiB}", f"run.results_dir={tmp_path}"))
    assert err.value.key == "target.max_memory"
    cfg = compose_cfg(
        "target.device_map=auto", "+target.max_memory={cpu: 2GiB}", f"run.results_dir={tmp_path}"
    )
    prepare(cfg)
    lm = load_causal_lm(cfg.target, "target", torch.device("cpu"), "float32")
    assert {str(p.device) for p in lm.model.parameters()} == {"cpu"}
    assert lm.forward_tokens([5, 6, 7]).shape[0] == 3
