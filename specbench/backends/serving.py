"""What every backend that serves a cell's arms from server processes shares (vLLM's
`vllm serve`, llama.cpp's `llama-server`): a free loopback port, a process group that dies with
specbench (stopped when the cell ends, fails or is interrupted, and by the kernel when
specbench is killed), a health check before the first request, the log's last error when it
fails, and the rebuilding of per-step acceptance from an engine that records only the steps it
drafted for.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from specbench.decoding.generation import Generation

# whether an engine's proposer drafts after a context (prompt and output so far); None where it
# drafts at every step (a drafter model)
DraftsAt = Callable[[list[int]], bool] | None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def die_with_parent() -> None:
    """In the server's process, before exec: SIGTERM it when specbench's process dies, even by
    SIGKILL, which runs no cleanup (Linux's PR_SET_PDEATHSIG; elsewhere a no-op)."""
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except OSError:
        pass


class ServerProcess:
    """One server process group on a free loopback port, healthy on return from `wait`, gone
    after `stop`. `command` is the whole command line but the port, which `port_args` adds."""

    what = "server"  # how errors name it
    error = re.compile("Error")  # a log line that reports an error

    def __init__(
        self, command: list[str], log: Path, startup_s: int, env: dict[str, str] | None = None
    ):
        self.base, self.log, self.startup_s, self.env = command, log, startup_s, env or {}
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [*self.base, "--host", "127.0.0.1", "--port", str(self.port)]

    def launch(self) -> ServerProcess:
        """The process, started in its own session (a Ctrl-C reaches specbench, which stops
        the group); `wait` returns once it serves."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        return self

    def wait(self) -> ServerProcess:
        """The launched server once it answers /health; a server that exits or stays silent
        for `startup_s` raises with its log's last error."""
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.what} exited ({self.process.returncode}): {self.why()}")
            if self.healthy():
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(
            f"{self.what} did not answer /health in {self.startup_s} s: {self.why()}"
        )

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def why(self) -> str:
        """The server log's last error line (the whole log is `self.log`)."""
        lines = self.log.read_text(errors="replace").splitlines()
        errors = [line for line in lines if self.error.search(line)] or lines or ["(empty log)"]
        return f"{errors[-1].strip()[:300]} (log: {self.log})"

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after 30 s: an engine's workers too."""
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


def counted(
    tokens: list[int],
    wall: float,
    ttft: float,
    prompt_ids: list[int],
    steps: list[tuple[int, int]] | None,
    drafts_at: DraftsAt = None,
) -> Generation:
    """A Generation from a server's outputs and its record of (drafted, accepted) per step
    (None: it did not speculate): without speculation one forward per token; with it the
    prefill's token, then per step its accepted drafts and the bonus. Positions read are
    counted as fed (the prompt, then each step's draft and its last token)."""
    if steps is None:
        return Generation(
            tokens,
            wall,
            ttft,
            len(tokens),
            emitted=[1] * len(tokens),
            positions=len(prompt_ids) + len(tokens),
        )
    drafted, accepted = kept_steps(tokens, prompt_ids, steps, drafts_at)
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
    """An engine's steps in order, (drafted, accepted) each, counting only the tokens the
    output kept.

    The engine's record lists the steps it drafted for, (drafted, accepted) in order, and no
    step its proposer drafted nothing for (an n-gram lookup without a match): `drafts_at`
    places those, replaying the proposer's one decision on the output (None: every step
    drafts). Past its length limit (or a stop) an engine may still accept, then cut the
    output, so the last step's acceptance is clipped to what remains. Filling the steps
    without a draft in after the recorded ones instead would let that overrun stand in for
    them."""
    steps, done = iter(recorded), 1  # the prefill's token
    kept_drafted, kept_accepted = [], []
    while done < len(tokens):
        drafts = drafts_at is None or drafts_at(prompt_ids + tokens[:done])
        d, a = next(steps, (0, 0)) if drafts else (0, 0)
        kept_drafted.append(d)
        kept_accepted.append(min(a, len(tokens) - done - 1))
        done += kept_accepted[-1] + 1
    return kept_drafted, kept_accepted
