"""`run.concurrency`: requests in flight together per arm, every sample recorded once and in
order, arms never overlapping each other, and the serving metrics the summary derives from
when each request ran."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from specbench.decoding.generation import Generation, Stop
from specbench.evaluate import Arms, Job, evaluate
from specbench.metrics.summary import summarize
from specbench.runs.record import Arm, Record
from specbench.tasks.base import Sample


class Clocked:
    """A decoder whose every request takes 50 ms and notes how many ran at once."""

    def __init__(self, log: list[tuple[str, float, float]], name: str):
        self.name, self.log = name, log
        self.lock = threading.Lock()
        self.now = self.most = 0

    def generate(self, prompt_ids, max_new_tokens, generator, stop=None) -> Generation:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        started = time.time()
        time.sleep(0.05)
        with self.lock:
            self.now -= 1
        self.log.append((self.name, started, time.time()))
        tokens = [prompt_ids[0]] * 3
        return Generation(tokens, 0.05, 0.01, 3, emitted=[1, 1, 1], positions=6)


class Listed:
    """The run store's and W&B mirror's part `evaluate` uses, in memory."""

    def __init__(self):
        self.done: set[tuple[str, int]] = set()
        self.records: list[Record] = []

    def append(self, rec: Record) -> None:
        self.records.append(rec)

    def log_sample(self, rec: Record) -> None:
        return None


def job_of(concurrency: int, n: int, log: list) -> Job:
    task = SimpleNamespace(
        cfg=SimpleNamespace(max_new_tokens=3),
        answer=lambda text: text,
        score_answers=lambda sample, answers: {},
    )
    method = SimpleNamespace(exact=lambda: True, facts=lambda decoder: {})
    samples = [Sample(id=f"s{i}", prompt="p") for i in range(n)]
    return Job(
        method=method,
        arms=Arms(Clocked(log, "method"), Clocked(log, "baseline"), {}),
        target=None,
        task=task,
        samples=samples,
        prompt_ids={s.id: [i] for i, s in enumerate(samples)},
        tokenizer=SimpleNamespace(decode=lambda ids, skip_special_tokens: str(ids)),
        stop=Stop(frozenset()),
        device=torch.device("cpu"),
        run=SimpleNamespace(seed=0, concurrency=concurrency, repeats=1, progress=False),
        max_new=3,
    )


@pytest.mark.parametrize("concurrency", [1, 3])
def test_concurrent_arms_keep_that_many_requests_in_flight_and_record_each_sample_once(
    concurrency: int,
) -> None:
    log: list[tuple[str, float, float]] = []
    job, store = job_of(concurrency, 14, log), Listed()
    evaluate(job, store, store)
    assert [r.id for r in store.records] == [f"s{i}" for i in range(14)]
    assert [r.method.output_ids[0] for r in store.records] == list(range(14))
    assert job.arms.method.most == job.arms.baseline.most == concurrency
    # the arms take turns: no baseline request overlaps a method request
    spans = {name: [(a, b) for n, a, b in log if n == name] for name in ("method", "baseline")}
    assert not any(a < d and c < b for a, b in spans["method"] for c, d in spans["baseline"])
    in_flight = summarize(store.records, greedy=True).in_flight
    assert in_flight == pytest.approx(1.0, abs=0.05) if concurrency == 1 else in_flight > 2


def timed(tokens: int, started: float | None, wall: float, ttft: float) -> Arm:
    return Arm(list(range(tokens)), wall, ttft, tokens, tokens, [1] * tokens, "", {}, started)


def test_throughput_counts_the_seconds_any_request_was_in_flight() -> None:
    """Method requests over [0, 2], [1, 3], [5, 6]: 4 busy seconds, 12 tokens; the baseline's
    one after another over 9 seconds: 12 / 9."""
    starts, walls, ttfts = (0.0, 1.0, 5.0), (2.0, 2.0, 1.0), (0.1, 0.2, 0.4)
    records = [
        Record(
            id=str(i),
            meta={},
            prompt_tokens=1,
            method=timed(4 + i, s, w, t),
            baseline=timed(4 + i, 10.0 + 3 * i, 3.0, 0.5),
        )
        for i, (s, w, t) in enumerate(zip(starts, walls, ttfts))
    ]
    m = summarize(records, greedy=True)
    assert m.throughput_tok_s == pytest.approx(15 / 4)
    assert m.in_flight == pytest.approx(5 / 4)
    assert m.tok_s == pytest.approx(15 / 5)  # per user: over the requests' own seconds
    assert m.base.throughput_tok_s == pytest.approx(15 / 9)
    assert m.base.throughput_speedup == pytest.approx((15 / 4) / (15 / 9))
    assert m.ttft_p50_ms == pytest.approx(200.0)
    assert m.ttft_p90_ms == pytest.approx(360.0)  # between 0.2 and 0.4, 80% of the way
    tpot = [(w - t) / (n - 1) for w, t, n in zip(walls, ttfts, (4, 5, 6))]
    assert m.tpot_p99_ms == pytest.approx(1000 * np.percentile(tpot, 99))


def test_records_without_start_times_count_their_walls_one_after_another() -> None:
    records = [
        Record(id=str(i), meta={}, prompt_tokens=1, method=timed(4, None, 2.0, 0.1))
        for i in range(2)
    ]
    m = summarize(records, greedy=True)
    assert m.throughput_tok_s == pytest.approx(m.tok_s) == pytest.approx(2.0)
    assert m.in_flight == pytest.approx(1.0)
