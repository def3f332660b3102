"""The compiled engine's guards, without compiling anything (torch.compile is the identity
here): a warm-up that finds its graphs computing something other than the uncompiled forward
stops the run, and inductor's on-disk cache is specbench's own unless the user names one."""

from __future__ import annotations

import pytest
import torch
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from conftest import builtin
from specbench import paths
from specbench.models import compiled


@pytest.fixture
def uncompiled(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda forward=None, **kwargs: forward)


@pytest.mark.parametrize("fault", [None, "offset", "nan"])
def test_warm_up_stops_a_run_whose_graphs_compute_something_else(uncompiled, fault) -> None:
    """A graph whose logits agree with the uncompiled forward passes the warm-up's check; one
    whose logits are off (a stale graph from the on-disk cache: NaN) stops the run there."""
    lm = compiled.CompiledCausalLM.from_eager(builtin("tiny"), 64)
    step = lm.engine.step

    def graph(*args):
        logits, hidden = step(*args)
        if fault == "offset":
            logits = logits + 0.1 * logits.abs().max() * (torch.arange(len(logits)) == 0)[:, None]
        elif fault == "nan":
            logits = logits * float("nan")
        return logits, hidden

    lm.engine.step = graph
    if fault is None:
        lm.warm_up(trees=True)
        assert lm.length == 0
    else:
        with pytest.raises(RuntimeError, match="compiled logits differ from the uncompiled"):
            lm.warm_up(trees=True)


def test_inductor_caches_under_specbench_unless_the_user_names_a_directory(monkeypatch):
    """Torch writes its shared /tmp default into the environment at import; that is replaced,
    a directory the user named is kept."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    compiled.use_inductor_cache()
    assert compiled.os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(paths.cache_dir() / "inductor")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/srv/graphs")
    compiled.use_inductor_cache()
    assert compiled.os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/srv/graphs"
