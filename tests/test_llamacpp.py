"""`backend=llamacpp` without a llama.cpp build: the cells it refuses (one line, before any
server or export), the flags each method becomes, the replay of ngram-simple's decision, and the
reading of a server's trace and response into a record's rounds. Real servers:
tests/test_llamacpp_servers.py (`make test-llamacpp`)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import compose_cfg
from specbench.backends import serving
from specbench.backends.llamacpp import backend, server
from specbench.backends.llamacpp.config import QUANTS
from specbench.errors import ConfigError
from specbench.models import gguf_export
from specbench.pipeline import prepare, validate

RANDOM = ["target=tiny", "task=tiny_code", "run.limit=2"]


@pytest.fixture
def built(tmp_path: Path) -> str:
    """A stand-in llama-server binary: the refusals below come before it would start."""
    binary = tmp_path / "llama-server"
    binary.write_text("")
    return f"backend.server={binary}"


def refusal(tmp_path: Path, *overrides: str) -> str:
    cfg = compose_cfg(f"run.results_dir={tmp_path / 'results'}", *RANDOM, *overrides)
    with pytest.raises(ConfigError) as err:
        prepare(cfg)
    message = str(err.value)
    assert "\n" not in message
    assert not (tmp_path / "results").exists()  # refused before the run directory
    return message


@pytest.mark.parametrize(
    ("overrides", "starts", "why"),
    [
        (["backend.server=/nonexistent/llama-server"], "backend.server=", "run `make llamacpp`"),
        (
            ["method=specdiff", "drafter=tiny-dlm"],
            "backend='llamacpp'",
            "llama.cpp runs methods ar, dflash, eagle3, pld, sps; not specdiff",
        ),
        (
            ["method=eagle3", "drafter=tiny-eagle3"],  # eagle3's default: its dynamic tree
            "method.tree='dynamic'",
            "llama.cpp's draft-eagle3 runs method.tree=null only",
        ),
        (
            ["method=sps", "method.tree=dynamic"],
            "method.tree='dynamic'",
            "llama.cpp's draft-simple runs method.tree=null only",
        ),
        (
            ["method=sps", "method.schedule=heuristic"],
            "method.schedule='heuristic'",
            "runs method.schedule=constant only",
        ),
        (
            ["method=pld"],
            "method.prompt_lookup_min=1",
            "ngram-simple looks up one n-gram length: set it to method.prompt_lookup_max (3)",
        ),
        (
            ["method=pld", "method.prompt_lookup_min=3", "method.gamma=2"],
            "method.gamma=2",
            "drafts only where it can copy at least n tokens (common/ngram-map.cpp): set "
            "method.gamma >= method.prompt_lookup_max (3)",
        ),
        (["run.temperature=0.7"], "run.temperature=0.7", "decodes greedily only"),
        (["backend.quant=q5_k"], "backend.quant='q5_k'", "allowed: f32, bf16, q8_0, q4_0"),
        (["backend.threads=0"], "backend.threads=0", "must be an integer >= 1 or null"),
        (["backend.startup_s=0"], "backend.startup_s=0", "must be >= 1"),
        (["run.oracle=true"], "run.oracle=True", "use backend=specbench"),
        (
            ["target=random-gpt2", "method=ar"],
            "target.name_or_path='specbench:random-gpt2'",
            "is a GPT2LMHeadModel; GGUF export takes LlamaForCausalLM",
        ),
    ],
)
def test_a_cell_llama_cpp_cannot_run_is_one_line_before_any_server(
    tmp_path: Path, built: str, overrides: list[str], starts: str, why: str
) -> None:
    message = refusal(tmp_path, "backend=llamacpp", built, *overrides)
    assert message.startswith(starts), message
    assert why in message, message


def test_a_local_checkpoint_gguf_cannot_hold_is_refused_from_its_config() -> None:
    """tiny-dlm (a masked diffusion LM): refused by its architecture, read from config.json."""
    with pytest.raises(ConfigError, match="GGUF export takes LlamaForCausalLM") as err:
        backend.local_checkpoint(compose_cfg("target=tiny-dlm").target, "target")
    assert str(err.value).startswith("target.name_or_path='specbench:tiny-dlm'")


def test_the_quantizations_offered_are_the_exporters() -> None:
    assert QUANTS == tuple(gguf_export.QUANTS)


def method_of(*overrides: str):
    return validate(OmegaConf.to_object(compose_cfg(*RANDOM, "backend=llamacpp", *overrides)))


@pytest.mark.parametrize(
    ("overrides", "drafter", "flags"),
    [
        (["method=ar"], None, []),
        (
            ["method=sps", "method.gamma=5"],
            None,
            "--spec-type draft-simple --spec-draft-n-max 5 --spec-draft-n-min 0 "
            "--spec-draft-p-min 0".split(),
        ),
        (
            [
                "method=pld",
                "method.gamma=7",
                "method.prompt_lookup_min=2",
                "method.prompt_lookup_max=2",
            ],
            None,
            "--spec-type ngram-simple --spec-ngram-simple-size-n 2 --spec-ngram-simple-size-m 7 "
            "--spec-ngram-simple-min-hits 1".split(),
        ),
        (
            ["method=dflash", "drafter=tiny-dflash"],
            {"block_size": 16},
            "--spec-type draft-dflash --spec-draft-n-max 15".split(),
        ),
        (
            ["method=dflash", "drafter=tiny-dflash", "method.block_size=8"],
            {"block_size": 16},
            "--spec-type draft-dflash --spec-draft-n-max 7".split(),
        ),
        (
            ["method=eagle3", "drafter=tiny-eagle3", "method.tree=null", "method.gamma=4"],
            None,
            "--spec-type draft-eagle3 --spec-draft-n-max 4 --spec-draft-n-min 0 "
            "--spec-draft-p-min 0".split(),
        ),
    ],
)
def test_each_method_becomes_llama_servers_speculative_flags(
    overrides: list[str], drafter: dict | None, flags: list[str]
) -> None:
    method = method_of(*overrides)
    assert backend.SPEC_FLAGS[method.name](method, drafter) == flags


def test_server_arguments_hold_every_slots_context_and_f32_caches_for_f32(tmp_path: Path) -> None:
    from specbench.config import RunConfig

    launch = server.Launch(
        server="llama-server",
        model=tmp_path / "t.gguf",
        drafter=tmp_path / "d.gguf",
        quant="f32",
        max_len=200,
        threads=2,
        run=RunConfig(seed=7),
        startup_s=10,
        logs=tmp_path,
    )
    args = server.server_args(launch, slots=4, spec_flags=["--spec-type", "draft-simple"])
    pairs = dict(zip(args[::2], args[1::2]))
    assert pairs["-c"] == str(4 * 232) and pairs["-np"] == "4"
    assert pairs["-ctk"] == pairs["-ctv"] == pairs["-ctkd"] == pairs["-ctvd"] == "f32"
    assert pairs["-md"] == str(tmp_path / "d.gguf") and pairs["--seed"] == "7"
    assert pairs["-t"] == pairs["-tb"] == "2" and pairs["--cache-ram"] == "0"
    assert args[-2:] == ["--spec-type", "draft-simple"]
    quantized = server.server_args(
        server.Launch(**{**launch.__dict__, "quant": "q8_0", "threads": None}), 1, []
    )
    assert "-ctk" not in quantized and "-md" not in quantized and "-t" not in quantized


def reference_ngram_simple(tokens: list[int], sampled: int, n: int, m: int) -> bool:
    """common_ngram_simple_draft (llama.cpp common/ngram-map.cpp), line by line."""
    cur_len = len(tokens)
    if cur_len <= n + m + 1:
        return False
    pattern = [tokens[j] for j in range(cur_len - n + 1, cur_len)] + [sampled]
    match_pos = 0
    j = cur_len - n - 1
    while j > 0:
        if all(tokens[j + k] == pattern[k] for k in range(len(pattern))):
            match_pos = j
            break
        j -= 1
    if match_pos == 0:
        return False
    return min(m, cur_len - (match_pos + n)) >= n


@pytest.mark.parametrize(
    ("context", "n", "m", "drafts"),
    [
        ([9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2], 2, 4, True),  # "1 2" earlier, 6 tokens follow
        ([9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 3], 2, 4, False),  # "1 3" nowhere earlier
        ([1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2], 2, 4, False),  # only at position 0, which it skips
        ([9, 1, 2, 5, 5, 5, 5, 5, 1, 2], 2, 6, False),  # too short for n + m + 1
        ([9, 9, 9, 9, 1, 2, 3, 1, 2, 3], 3, 2, False),  # 2 tokens follow the match: < n
    ],
)
def test_the_ngram_simple_replay_is_llama_cpps_decision(
    context: list[int], n: int, m: int, drafts: bool
) -> None:
    assert backend.ngram_simple_drafts(context, n, m) is drafts
    assert reference_ngram_simple(context[:-1], context[-1], n, m) is drafts


def test_the_ngram_simple_replay_agrees_on_random_contexts() -> None:
    import random

    rng = random.Random(0)
    for _ in range(2000):
        context = [rng.randrange(4) for _ in range(rng.randrange(2, 30))]
        n, m = rng.randrange(1, 4), rng.randrange(1, 6)
        expected = reference_ngram_simple(context[:-1], context[-1], n, m)
        assert backend.ngram_simple_drafts(context, n, m) is expected, (context, n, m)


TRACE = """\
srv  update_slots: all slots are idle
slot launch_slot_: id  1 | task 0 | processing task, is_child = 0
slot update_slots: id  1 | task 0 | accepted  2/ 4 draft tokens
slot launch_slot_: id  0 | task 1 | processing task, is_child = 0
slot update_slots: id  1 | task 0 | accepted  4/ 4 draft tokens
slot update_slots: id  0 | task 1 | accepted  0/ 4 draft tokens
slot      release: id  1 | task 0 | stop processing: n_tokens = 40, truncated = 0
slot launch_slot_: id  1 | task 2 | processing task, is_child = 0
slot update_slots: id  1 | task 2 | accepted 10/10 draft tokens
slot      release: id  1 | task 2 | stop processing: n_tokens = 30, truncated = 0
"""


def test_the_trace_gives_each_slots_tasks_steps_once_they_end(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("old run: id  1 | task 0 | processing task\n")
    start = log.stat().st_size
    log.write_text(log.read_text() + TRACE[:200])  # half a line: read again later
    trace = server.StepLog(log, start)
    log.write_text(log.read_text()[: start + 200] + TRACE[200:])
    assert trace.task(1, 0) == [(4, 2), (4, 4)]
    assert trace.task(1, 1) == [(10, 10)]
    with pytest.raises(RuntimeError, match="no end of task 0 on slot 0"):
        trace.task(0, 0, timeout_s=0.05)  # running: its steps may not all be logged yet


def test_a_request_names_a_free_slot_and_its_index_there() -> None:
    slots = server.Slots(2)
    taken = []
    with slots.take() as first, slots.take() as second:
        taken += [first, second]
    with slots.take() as third:
        taken.append(third)
    assert sorted(taken[:2]) == [(0, 0), (1, 0)]
    assert taken[2] in {(0, 1), (1, 1)}
    lock = threading.Barrier(2)  # two requests in flight hold both slots

    def hold() -> None:
        with slots.take():
            lock.wait(timeout=5)

    workers = [threading.Thread(target=hold) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(slots.sent) == [2, 3]


def test_a_response_becomes_the_rounds_llama_cpp_ran() -> None:
    """Prefill's token, then steps (4 drafted, 2 accepted), (4, 4), (4, 0): 1 + 3 + 5 + 1 tokens;
    a stop cut after 7 tokens clips the second step's acceptance to what was kept."""
    tokens = list(range(10))
    steps = [(4, 2), (4, 4), (4, 0)]
    timings = {"predicted_n": 10, "draft_n": 12, "draft_n_accepted": 6, "prompt_ms": 5.0}
    server.check_totals(timings, tokens, steps)
    whole = serving.counted(tokens, 1.0, 0.005, [1, 2, 3], steps, None)
    assert whole.draft_lengths == [4, 4, 4] and whole.accepted == [2, 4, 0]
    assert whole.emitted == [1, 3, 5, 1] and whole.target_calls == 4
    assert whole.positions == 3 + 15
    cut = serving.counted(tokens[:7], 1.0, 0.005, [1, 2, 3], steps, None)
    assert cut.accepted == [2, 2] and sum(cut.emitted) == 7
    with pytest.raises(RuntimeError, match="differ from its tokens and trace"):
        server.check_totals({**timings, "draft_n_accepted": 5}, tokens, steps)


def test_plain_decoding_is_one_forward_per_token() -> None:
    plain = serving.counted([5, 6, 7], 1.0, 0.1, [1, 2], None, None)
    assert plain.target_calls == 3 and plain.emitted == [1, 1, 1] and plain.accepted == []
    assert plain.positions == 5


def test_steps_without_a_draft_are_placed_where_ngram_simple_found_nothing() -> None:
    """PLD: llama.cpp logs only the steps it drafted for; the replay places the plain ones."""
    prompt = [9, 1, 2, 3, 4, 5, 6, 7, 8]
    output = [1, 2, 3, 4, 5, 6, 7, 8, 0]  # after "1" nothing; after "1 2" a match (copy 4)
    pld = ["method=pld", "method.gamma=4", "method.prompt_lookup_min=2"]
    drafts_at = backend.ngram_drafts_at(method_of(*pld, "method.prompt_lookup_max=2"))
    made = serving.counted(output, 1.0, 0.1, prompt, [(4, 4), (4, 1)], drafts_at)
    assert made.draft_lengths == [0, 4, 4] and made.accepted == [0, 4, 1]
    assert sum(made.emitted) == len(output)


def test_env_json_carries_what_the_build_recorded_beside_the_binary(tmp_path: Path) -> None:
    """`make llamacpp` writes build.json beside llama-server; a binary built elsewhere has none."""
    (tmp_path / "llama-server").write_text("")
    assert server.build_info(str(tmp_path / "llama-server")) == {}
    (tmp_path / "build.json").write_text('{"commit": "0c1e57098", "cmake": ["-DGGML_NATIVE=ON"]}')
    assert server.build_info(str(tmp_path / "llama-server"))["commit"] == "0c1e57098"


@pytest.mark.parametrize(
    "cmake, isa",
    [
        (["-DGGML_NATIVE=ON"], None),  # the machine's own
        ([], None),  # a binary built elsewhere
        # make llamacpp-avx2
        (["-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_AVX512=OFF"], "avx2"),
        (["-DGGML_NATIVE=OFF", "-DGGML_AVX512=ON"], "avx512"),
        (["-DGGML_NATIVE=OFF", "-DGGML_AVX2=OFF"], "other"),
    ],
)
def test_a_builds_flags_name_the_isa_its_kernels_use(cmake: list[str], isa: str | None) -> None:
    """A run on `make llamacpp-avx2`'s build is classed avx2 whatever CPU ran it."""
    assert server.build_isa({"cmake": cmake}) == isa
