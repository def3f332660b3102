"""Composition: structured configs reject typos; experiment presets compose."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError

from conftest import compose_cfg


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
