"""`specbench-run`: the Hydra app around one cell (`specbench/pipeline.py`, the stages).

Composing and checking the config imports neither torch nor transformers, so a misspelt key or
an unwritable results directory is reported in about a second; the stages are imported once the
config has composed. Every error a user can act on is one line on stderr, and Ctrl-C says how
far the run got and how to resume it.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from specbench import paths
from specbench.config import check_knobs, refuse_stray_keys
from specbench.errors import ConfigError, user_line
from specbench.interrupt import EXIT_CODE, on_ctrl_c
from specbench.registry import discover_schemas
from specbench.runs.record import key_of
from specbench.runs.store import existing_writable, read_records
from specbench.runs.sweep import SweepSummary, write_outcome
from specbench.tasks.load import load_samples

discover_schemas()  # method and task schemas must be in Hydra's ConfigStore before it composes

GROUPS = ("target", "drafter", "method", "task", "logging", "run", "backend", "experiment")


def choices(group: str) -> list[str]:
    """A group's options: its YAML files under conf/."""
    return sorted(p.stem for p in (paths.CONF_DIR / group).glob("*.yaml"))


def groups_help() -> str:
    """`--help`'s list of groups and their choices."""
    return "\n".join(f"{group}: {', '.join(choices(group))}" for group in GROUPS)


if not OmegaConf.has_resolver("specbench_groups"):
    OmegaConf.register_new_resolver("specbench_groups", groups_help)


def say(line: str) -> None:
    print(f"specbench: {line}", file=sys.stderr)


def compose_error(err: Exception) -> str:
    """Hydra's and OmegaConf's multi-line composition errors as one line: the key, and what is
    wrong with it."""
    cause = err.__cause__ if isinstance(err.__cause__, OmegaConfBaseException) else err
    no_key = isinstance(cause, (ConfigKeyError, ConfigAttributeError))
    if no_key and is_dataclass(cause.object_type):
        keys = ", ".join(f.name for f in fields(cause.object_type))
        return f"{cause.full_key}: no such key in {cause.object_type.__name__}; allowed: {keys}"
    if isinstance(cause, OmegaConfBaseException) and cause.full_key:
        return f"{cause.full_key}: {str(cause.msg).splitlines()[0]}"
    return " ".join(str(err).split())


def explain(err: Exception) -> tuple[str, int] | None:
    """The error line and exit code for an error a user can act on; None for a bug."""
    line = user_line(err)
    if line is not None:
        return line, 2 if isinstance(err, ConfigError) else 1
    if isinstance(err, (HydraException, OmegaConfBaseException)):
        return compose_error(err), 2
    return None


def fail(known: tuple[str, int] | None, err: Exception) -> NoReturn:
    """End the command on `err`: its line and exit code, or a bug's traceback."""
    if known is None:
        raise err
    say(f"error: {known[0]}")
    raise SystemExit(known[1]) from None


class ResultsDirCheck(Callback):
    """Refuse an unwritable `run.results_dir` before Hydra creates its output directory there
    (Hydra turns a callback's exception into a warning and goes on, so this exits itself), and
    note the deepest directory there that already existed: a refused run removes what was
    created below it (`forget_output_dir`)."""

    existed: Path | None = None

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check(config, "hydra.run.dir")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.check(config, "hydra.sweep.dir")

    @classmethod
    def check(cls, config: DictConfig, output_key: str) -> None:
        """The results directory, then Hydra's output directory (`output_key`, inside it unless
        overridden), each refused in one line naming its key."""
        try:
            cls.existed = existing_writable(Path(config.run.results_dir))
            output = Path(OmegaConf.select(config, output_key))
            if cls.existed not in output.absolute().parents:
                cls.existed = existing_writable(output, output_key)
        except ConfigError as err:
            fail(explain(err), err)


def forget_output_dir() -> None:
    """A refused run leaves nothing behind: Hydra's output directory (its config copy and log)
    goes, and with it every directory above it this run created (`_hydra`, the results
    directory) that it leaves empty."""
    out = Path(HydraConfig.get().runtime.output_dir).absolute()
    shutil.rmtree(out, ignore_errors=True)
    existed = ResultsDirCheck.existed
    for parent in out.parents:
        if existed not in parent.parents:
            break
        try:
            parent.rmdir()  # empty only: another run's files stay
        except OSError:
            break


def interrupted(plan: Any) -> int:
    """Report a Ctrl-C in one line: the samples recorded (counted in the records file, the
    truth a rerun resumes from: the signal can land between a record's write and the store's
    bookkeeping of it) and how to resume."""
    if plan is None:
        say("interrupted before the run directory was opened; nothing was recorded")
    else:
        from specbench.pipeline import wanted as keys  # imported already: there is a plan

        wanted = keys(plan)
        done = len({key_of(r) for r in read_records(plan.store.records_path)} & wanted)
        say(
            f"interrupted: {done} of {len(wanted)} samples recorded in {plan.store.run_dir}; "
            "rerun the same command to resume"
        )
    return EXIT_CODE


@hydra.main(version_base="1.3", config_path=str(paths.CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> Any:
    """One cell. In a multirun a failing cell (a bad knob, a bad pairing, out of memory, ...)
    is recorded in its job's outcome and the sweep goes on; alone it fails the command."""
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    plan = None
    try:
        refuse_stray_keys(cfg)
        config = OmegaConf.to_object(cfg)
        check_knobs(config)  # the knobs and the task's data, before torch is imported
        loaded = load_samples(config)
        from specbench.devices import check_device  # torch alone

        check_device(config.run.device)
        from specbench import pipeline  # transformers

        plan = pipeline.prepare(cfg, loaded)
        summary = pipeline.execute(plan)
    except KeyboardInterrupt:  # a sweep stops too
        raise SystemExit(interrupted(plan)) from None
    except Exception as err:
        known = explain(err)
        if not multirun:
            if known is not None:
                forget_output_dir()  # refused: the run directory keeps what it recorded
            fail(known, err)
        say(f"error: {known[0] if known else f'{type(err).__name__}: {err}'}")
        write_outcome("failed", plan.run_id if plan else None, err)
        return None
    if multirun:
        write_outcome("ok", plan.run_id)
    return summary


def check_group_choices(argv: list[str]) -> None:
    """Fail fast, in one line, on `group=value` overrides naming no config file (Hydra's own
    message for this spans a screen)."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+~")
        if not sep or key not in GROUPS or "(" in value:
            continue
        allowed = choices(key)
        for choice in value.split(","):
            if choice and choice not in allowed:
                raise ConfigError(key, choice, f"unknown {key}; allowed: {', '.join(allowed)}")


def cli() -> None:
    # Hydra then raises its errors instead of printing them over several lines: each becomes
    # one line below
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        with on_ctrl_c():
            check_group_choices(sys.argv[1:])
            main()
    except KeyboardInterrupt:  # before the config composed
        raise SystemExit(interrupted(None)) from None
    except Exception as err:
        fail(explain(err), err)
    if SweepSummary.failed:  # the other cells finished; the command still reports failure
        raise SystemExit(1)
