"""llama.cpp's servers and requests for `backend=llamacpp` (the backend: `backend.py`).

One `llama-server` per arm (`make llamacpp` builds it; `backend.server` names another), on a
free loopback port, its log in the run directory, with `run.concurrency` slots (`-np`). Prompts
go as token ids to `/completion` (no second tokenization), with no prompt cache (every request
prefills its whole prompt, as specbench's engine does), greedy; outputs come back as token ids
(`return_tokens`), cut at the cell's stop tokens and strings as specbench's own decoders cut
them. A response's `timings` give its prefill time (`prompt_ms`, the record's TTFT) and its
totals (`predicted_n`, `draft_n`, `draft_n_accepted`); the steps behind those totals, drafted and
accepted per verification step, are the server's own trace (`LLAMA_TRACE=1`: one log line per
step, by slot and task), read back per request: each request names its slot (`id_slot`), so a
slot's k-th task is the k-th request sent to it. Every server is stopped (its whole process
group) when the cell ends, fails or is interrupted, and dies with specbench.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench import paths
from specbench.backends.llamacpp.config import LlamaCppConfig
from specbench.backends.serving import DraftsAt, ServerProcess, counted
from specbench.config import RunConfig
from specbench.decoding.generation import Generation, Stop
from specbench.errors import ConfigError

BUILD = paths.REPO_ROOT / ".llamacpp" / "bin"
# one trace line per verification step, and the line that ends a task, as llama-server logs them
STEP = re.compile(r"id +(\d+) \| task (\d+) \| accepted +(\d+)/ *(\d+) draft tokens")
LAUNCH = re.compile(r"id +(\d+) \| task (\d+) \| processing task")
RELEASE = re.compile(r"id +(\d+) \| task (\d+) \| stop processing")


def server_of(backend: LlamaCppConfig) -> str:
    """The llama-server binary, refused in one line when there is none."""
    server = backend.server or str(BUILD / "llama-server")
    if not Path(server).is_file():
        raise ConfigError(
            "backend.server",
            server,
            "no llama-server there: run `make llamacpp` (builds .llamacpp/bin), or set "
            "backend.server to a llama-server binary",
        )
    return server


def build_info(server: str) -> dict:
    """What `make llamacpp` recorded beside the binary (llama.cpp's commit, the build's
    flags and compiler); empty for a binary built elsewhere."""
    record = Path(server).parent / "build.json"
    return json.loads(record.read_text()) if record.is_file() else {}


def build_isa(build: dict) -> str | None:
    """The best matrix ISA a build's kernels use (`specbench.runs.machine.ISAS`): None for a
    native build (the machine's own) or one whose flags were not recorded."""
    flags = set(build.get("cmake", []))
    if not flags or "-DGGML_NATIVE=ON" in flags:
        return None
    if "-DGGML_AVX512=ON" in flags:
        return "avx512"
    return "other" if "-DGGML_AVX2=OFF" in flags else "avx2"  # ggml's default off native


class LlamaServer(ServerProcess):
    what = "llama-server"
    error = re.compile(r" E |error")  # llama.cpp's error level, or its argument parser's

    def launch(self) -> LlamaServer:
        """Started; `start` is where its log begins (a resumed run appends to the last's)."""
        self.start = self.log.stat().st_size if self.log.exists() else 0
        return super().launch()


class StepLog:
    """A server's trace, read as it grows: per slot, its tasks in launch order, and per task
    the (drafted, accepted) of each verification step, once the task has ended."""

    def __init__(self, path: Path, offset: int):
        self.path, self.offset, self.partial = path, offset, b""
        self.slots: dict[int, list[int]] = {}
        self.steps: dict[int, list[tuple[int, int]]] = {}
        self.ended: set[int] = set()
        self.lock = threading.Lock()

    def task(self, slot: int, index: int, timeout_s: float = 30.0) -> list[tuple[int, int]]:
        """The steps of the `index`-th task slot `slot` ran (from 0), once its end is logged
        (the log is written by a thread of the server's, after the response may arrive)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self.lock:
                self.read()
                tasks = self.slots.get(slot, [])
                if len(tasks) > index and tasks[index] in self.ended:
                    return self.steps.get(tasks[index], [])
            if time.monotonic() > deadline:
                raise RuntimeError(f"no end of task {index} on slot {slot} in {self.path}")
            time.sleep(0.005)

    def read(self) -> None:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            chunk = self.partial + log.read()
            self.offset = log.tell()
        *lines, self.partial = chunk.split(b"\n")
        for line in lines:
            self.parse(line.decode(errors="replace"))

    def parse(self, line: str) -> None:
        if found := STEP.search(line):
            _, task, accepted, drafted = map(int, found.groups())
            self.steps.setdefault(task, []).append((drafted, accepted))
        elif found := LAUNCH.search(line):
            slot, task = map(int, found.groups())
            self.slots.setdefault(slot, []).append(task)
        elif found := RELEASE.search(line):
            self.ended.add(int(found.group(2)))


class Slots:
    """The server's slots, one per request in flight: a request takes a free one and names it
    (`id_slot`), so the k-th request sent to a slot is that slot's k-th task in the log."""

    def __init__(self, count: int):
        self.free, self.sent = list(range(count)), [0] * count
        self.lock = threading.Lock()

    @contextmanager
    def take(self):
        with self.lock:
            slot = self.free.pop()
            index, self.sent[slot] = self.sent[slot], self.sent[slot] + 1
        try:
            yield slot, index
        finally:
            with self.lock:
                self.free.append(slot)


class LlamaCppDecoder:
    """A `Decoder` whose forwards run in a llama-server: one completion per call, its
    counters read from the server's response and trace."""

    def __init__(self, server: LlamaServer, slots: int, speculates: bool, drafts_at: DraftsAt):
        self.server, self.drafts_at = server, drafts_at
        self.slots = Slots(slots)
        self.trace = StepLog(server.log, server.start) if speculates else None

    def request(self, prompt_ids: list[int], max_new: int, seed: int, stop: Stop, slot: int):
        return {
            "prompt": prompt_ids,
            "n_predict": max_new,
            "temperature": 0.0,
            "top_k": 1,
            "seed": seed,
            "stop": list(stop.strings),
            "cache_prompt": False,
            "return_tokens": True,
            "id_slot": slot,
        }

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        generator: torch.Generator,
        stop: Stop | None = None,
    ) -> Generation:
        stop = stop or Stop(frozenset())
        seed = generator.initial_seed() % 2**31
        with self.slots.take() as (slot, index):
            body = self.request(prompt_ids, max_new_tokens, seed, stop, slot)
            request = urllib.request.Request(
                f"{self.server.url}/completion",
                json.dumps(body).encode(),
                {"Content-Type": "application/json"},
            )
            started = time.perf_counter()
            with urllib.request.urlopen(request) as response:
                answer = json.loads(response.read())
            wall = time.perf_counter() - started
            steps = self.trace.task(slot, index) if self.trace else None
        timings, tokens = answer["timings"], answer["tokens"]
        check_totals(timings, tokens, steps)
        end = stop.first(tokens)
        tokens = tokens if end is None else tokens[: end + 1]
        ttft = min(timings["prompt_ms"] / 1000, wall)
        return counted(tokens, wall, ttft, prompt_ids, steps, self.drafts_at)


def check_totals(timings: dict, tokens: list[int], steps: list[tuple[int, int]] | None) -> None:
    """The trace's steps add up to the response's own totals, and every token came back: a
    mismatch means the trace was read for another request."""
    drafted, accepted = sum(d for d, _ in steps or []), sum(a for _, a in steps or [])
    totals = (timings["predicted_n"], timings.get("draft_n", 0), timings.get("draft_n_accepted", 0))
    if totals != (len(tokens), drafted, accepted):
        raise RuntimeError(
            f"llama-server's totals (predicted, drafted, accepted) {totals} differ from its "
            f"tokens and trace {(len(tokens), drafted, accepted)}"
        )


def server_args(launch: Launch, slots: int, spec_flags: list[str]) -> list[str]:
    """llama-server's arguments for an arm: the model, context for every slot's longest
    sequence and a round's drafts, slots, threads, seed, f32 KV caches for f32 weights (as
    specbench's float32 engine keeps them; llama.cpp's default f16 for the other types), no
    host prompt cache, and the method's speculative flags with its drafter."""
    max_len = launch.max_len + 32  # a step's drafts past the last token (at most 31 here)
    args = ["-m", str(launch.model), "-c", str(max_len * slots), "-np", str(slots)]
    args += ["--seed", str(launch.run.seed), "--cache-ram", "0"]
    if launch.threads:
        args += ["-t", str(launch.threads), "-tb", str(launch.threads)]
    if launch.quant == "f32":
        args += ["-ctk", "f32", "-ctv", "f32"]
    if spec_flags and launch.drafter is not None:
        args += ["-md", str(launch.drafter)]
        if launch.quant == "f32":
            args += ["-ctkd", "f32", "-ctvd", "f32"]
    return args + spec_flags


@dataclass(frozen=True)
class Launch:
    """How every server of a cell starts: the binary, the GGUF files (target, drafter), their
    type, the longest sequence, threads, the run's seed, concurrency and baseline, the startup
    limit and where the logs go."""

    server: str
    model: Path
    drafter: Path | None
    quant: str
    max_len: int
    threads: int | None
    run: RunConfig
    startup_s: int
    logs: Path


def start_arms(
    stack: ExitStack, launch: Launch, spec_flags: list[str], drafts_at: DraftsAt
) -> tuple[LlamaCppDecoder, LlamaCppDecoder | None]:
    """The method's server and, with the baseline arm on, plain decoding's (one server serves
    both when the method is plain decoding), started together; each stopped when `stack`
    closes."""
    run, slots = launch.run, launch.run.concurrency
    arms = {"method": spec_flags}
    if run.baseline and spec_flags:
        arms["baseline"] = []
    servers = {}
    for role, flags in arms.items():
        command = [launch.server, *server_args(launch, slots, flags)]
        log = launch.logs / f"llamacpp-{role}.log"
        server = LlamaServer(command, log, launch.startup_s, env={"LLAMA_TRACE": "1"})
        stack.callback(server.stop)
        servers[role] = server.launch()
    decoders = {
        role: LlamaCppDecoder(
            server.wait(), slots, bool(arms[role]), drafts_at if arms[role] else None
        )
        for role, server in servers.items()
    }
    if not run.baseline:
        return decoders["method"], None
    return decoders["method"], decoders.get("baseline", decoders["method"])
