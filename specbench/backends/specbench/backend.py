"""`backend=specbench`: every arm on specbench's own engine, eager or compiled (`run.engine`),
with the models loaded by their kinds. Consecutive cells of one process share their models
(`RESIDENT`): a sweep in one process, or the GPU world's check, loads and compiles a target
once while the next cell asks for the same.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import torch

from specbench.backends import Backend, longest_sequence
from specbench.evaluate import Arms
from specbench.models import compiled
from specbench.models.kinds import kind_of
from specbench.registry import BACKENDS
from specbench.runs.summary import CEILING

# Models kept from the previous cell of this process, by what made them: released as soon as a
# cell does not ask for them. Decoders read models' counters as differences and reset their
# caches per generation, so a kept model decodes as a fresh one.
RESIDENT: dict[tuple, Any] = {}


@BACKENDS.register
class Specbench(Backend):
    name = "specbench"

    def arms(self, plan: Any, stack: ExitStack) -> tuple[Any, Arms, dict[str, Any]]:
        """The decoders every sample runs (the method's, the baseline, references and the
        ceiling) and the engine's compiled graphs, if any."""
        config, method = plan.config, plan.method
        target, drafter = load_models(plan)
        baseline = method.baseline(target) if config.run.baseline else None
        references = method.references(target, drafter) if config.run.baseline else {}
        decoder = method.build(target, drafter, plan.task)
        if config.run.oracle:
            simulated = config.run.simulated_acceptance
            references[CEILING] = method.ceiling(decoder, baseline, simulated)
        engine = compiled.describe(
            config.run.engine,
            target=[target],
            drafter=[drafter, getattr(decoder, "drafter", None)],
        )
        return target, Arms(decoder, baseline, references), engine


def load_models(plan: Any) -> tuple[Any, Any]:
    """The target and, if the method takes one, the drafter, each loaded by its kind on the
    run's device; under the compiled engine each through its kind's compile hook, the target
    capturing the layers the drafter reads, its static cache holding the longest sequence and
    a tree's nodes past it. Models the previous cell left (`RESIDENT`) are reused, each with
    every compiled form it was given; the rest of what it left is released before anything
    loads."""
    config = plan.config
    if config.run.threads:
        torch.set_num_threads(config.run.threads)
    roles = {"target": config.target}
    if plan.method.drafter_kind is not None:
        roles["drafter"] = config.drafter
    kinds = {key: kind_of(cfg) for key, cfg in roles.items()}
    dtypes = {key: kinds[key].dtype(cfg, config) for key, cfg in roles.items()}
    engine = config.run.engine  # a diffusion model compiles in place: kept per engine
    loads = {
        key: (kinds[key].name, repr(cfg), str(plan.device), dtypes[key], engine)
        for key, cfg in roles.items()
    }
    _release(lambda kept: kept in loads.values() or kept[0] in loads.values())
    models = {
        key: _resident(
            loads[key], lambda key=key: kinds[key].load(roles[key], key, plan.device, dtypes[key])
        )
        for key in roles
    }
    if engine != "compiled":
        return models["target"], models.get("drafter")
    reads = (
        kinds["drafter"].reads_target_layers(models["drafter"], models["target"])
        if "drafter" in kinds
        else ()
    )
    length = compiled.static_length(longest_sequence(plan) + plan.method.tree_nodes())
    trees = plan.method.drafts_trees()
    shapes = {key: (length, tuple(reads) if key == "target" else (), trees) for key in roles}
    for key in roles:
        models[key] = _resident(
            (loads[key], *shapes[key]),
            lambda key=key: kinds[key].compile(models[key], *shapes[key]),
        )
    return models["target"], models.get("drafter")


def _resident(key: tuple, make: Callable[[], Any]) -> Any:
    if key not in RESIDENT:
        RESIDENT[key] = make()
    return RESIDENT[key]


def _release(keep: Callable[[tuple], bool]) -> None:
    """Drop the kept models `keep` rejects, and give their memory back."""
    dropped = [key for key in RESIDENT if not keep(key)]
    for key in dropped:
        del RESIDENT[key]
    if dropped:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
