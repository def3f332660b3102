"""The warm-up, then the loop over samples: per sample every arm (baseline, method, references; the
order rotating, same seed), scoring, and one `Record` appended the moment the sample is done.
With `run.repeats` N the whole sample set is decoded N times, trial after trial, each sample's
record keyed by its trial; the arm leading a sample rotates from one trial to the next.

With `run.concurrency` c > 1 (a serving engine's arms) the samples go in waves of `WAVE * c`:
each arm in turn decodes the whole wave with c requests in flight (the next sent as one ends, as
a serving benchmark's client does), the arm leading each wave rotating, and the wave's records
are appended when its last arm is done, so an interrupted run loses at most one wave.
"""

from __future__ import annotations

import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from specbench import interrupt
from specbench.decoding.generation import Decoder, Generation, Stop
from specbench.method import Method
from specbench.metrics.summary import first_divergence
from specbench.runs.record import Arm, Record, tie_tolerance, ulp
from specbench.runs.store import RunStore
from specbench.runs.wandb import WandbMirror
from specbench.tasks.base import Sample, Task


@dataclass
class Arms:
    """The decoders run on every sample. A reference that is None is the baseline arm."""

    method: Decoder
    baseline: Decoder | None
    references: dict[str, Decoder | None]
    # arms of another engine (vLLM), greedy: each output's top-2 gaps by specbench's target,
    # for the agreement between backends (`Arm.top2_ulps`)
    measure_ties: bool = False


@dataclass(kw_only=True)
class Job:
    """What `evaluate` reads: the method and its arms, the samples and how to prompt, stop and
    score them."""

    method: Method
    arms: Arms
    target: Any
    task: Task
    samples: list[Sample]
    prompt_ids: dict[str, list[int]]
    tokenizer: Any
    stop: Stop
    device: torch.device
    run: Any  # RunConfig
    max_new: int  # tokens each sample generates (`config.max_new_tokens`)


@dataclass
class Decoded:
    """One arm's turns of one sample, with the prompt each turn was decoded from."""

    turns: list[Generation]
    prompts: list[list[int]]
    answers: list[str]
    started_s: float = field(default_factory=time.time)

    def arm(self, quality: dict[str, float]) -> Arm:
        tokens = [t for g in self.turns for t in g.tokens]
        return Arm(
            output_ids=tokens,
            wall_s=sum(g.wall_s for g in self.turns),
            ttft_s=sum(g.ttft_s for g in self.turns),  # each turn's prefill is its first token
            target_calls=sum(g.target_calls for g in self.turns),
            target_positions=sum(g.positions for g in self.turns),
            emitted_per_call=[k for g in self.turns for k in g.emitted],
            text=self.answers[0] if len(self.answers) == 1 else self.answers,
            quality=quality,
            started_s=self.started_s,
        )

    def prefix_at(self, index: int) -> list[int] | None:
        """The ids a target reads before emitting merged output token `index`."""
        for prompt, turn in zip(self.prompts, self.turns):
            if index < len(turn.tokens):
                return prompt + turn.tokens[:index]
            index -= len(turn.tokens)
        return None


def sample_seed(seed: int, sample_id: str) -> int:
    """Stable across processes and machines (Python's hash() is salted per process)."""
    return zlib.crc32(f"{seed}:{sample_id}".encode())


def decode(job: Job, decoder: Decoder, sample: Sample) -> Decoded:
    """Every turn of the sample; a later turn's prompt holds this arm's earlier answers."""
    generator = torch.Generator(device=job.device).manual_seed(sample_seed(job.run.seed, sample.id))
    max_new = job.max_new
    out = Decoded([], [], [])
    for k in range(len(sample.user_turns)):
        ids = (
            job.prompt_ids[sample.id]
            if k == 0
            else job.task.prompt_ids(job.tokenizer, sample, job.task.chat, out.answers)
        )
        out.prompts.append(ids)
        out.turns.append(decoder.generate(ids, max_new, generator, job.stop))
        text = job.tokenizer.decode(out.turns[-1].tokens, skip_special_tokens=True)
        out.answers.append(job.task.answer(text))
    return out


def record(job: Job, sample: Sample, decoded: dict[str, Decoded]) -> Record:
    """The sample's record from its arms' decodings (`method`, `baseline`, references)."""
    score = job.task.score_answers
    mine = decoded["method"]
    rec = Record(
        id=sample.id,
        meta=sample.meta,
        prompt_tokens=len(job.prompt_ids[sample.id]),
        method=mine.arm(score(sample, mine.answers)),
        drafter_calls=sum(g.drafter_calls for g in mine.turns),
        draft_s=sum(g.draft_s for g in mine.turns),
        verify_s=sum(g.verify_s for g in mine.turns),
        drafted_per_round=[n for g in mine.turns for n in g.draft_lengths],
        accepted_per_round=[n for g in mine.turns for n in g.accepted],
        nodes_per_round=[n for g in mine.turns for n in g.nodes],
        rounds=[r for g in mine.turns for r in g.rounds],
        exact=job.method.exact(),
        facts=job.method.facts(job.arms.method),
    )
    for name, ref in job.arms.references.items():
        ran = decoded["baseline" if ref is None else name]
        rec.references[name] = ran.arm(score(sample, ran.answers))
    if "baseline" in decoded:
        base = decoded["baseline"]
        rec.baseline = base.arm(score(sample, base.answers))
        rec.first_divergence = first_divergence(rec.method.output_ids, rec.baseline.output_ids)
        if rec.first_divergence is not None:
            rec.divergence_gap, rec.tie_flip = divergence_gap(job, base, rec.first_divergence)
    if job.arms.measure_ties:
        rec.method.top2_ulps = top2_ulps(job.target, mine)
        if rec.baseline:
            rec.baseline.top2_ulps = top2_ulps(job.target, decoded["baseline"])
    return rec


def top2_ulps(target: Any, decoded: Decoded) -> list[float]:
    """The target's top-2 logit gap before each of the arm's output tokens, in units in the
    last place (outside every timer): where another engine's tokens and specbench's part, how
    close the target's choice was there."""
    gaps = []
    for prompt, turn in zip(decoded.prompts, decoded.turns):
        if turn.tokens:
            top2, dtype = target.top2_along(prompt, turn.tokens)
            gaps += [round((a - b) / ulp(dtype, a), 2) for a, b in top2]
    return gaps


def divergence_gap(job: Job, base: Decoded, index: int) -> tuple[float | None, bool | None]:
    """The baseline target's top-2 logit gap where the method's output first differs, and
    whether it is within the dtype's tie tolerance (outside every timer)."""
    prefix = base.prefix_at(index)
    top2 = job.method.top2_logits(job.target, prefix) if prefix is not None else None
    if top2 is None:
        return None, None
    (first, second), dtype = top2
    gap = first - second
    return gap, gap <= tie_tolerance(dtype, first)


def running(job: Job) -> dict[str, Decoder]:
    """Every arm that decodes, by name."""
    arms = {"baseline": job.arms.baseline, "method": job.arms.method}
    arms.update({k: v for k, v in job.arms.references.items() if v is not None})
    return {k: v for k, v in arms.items() if v is not None}


def warm_up(job: Job, store: RunStore) -> tuple[float, list[Record]]:
    """`run.warmup` untimed decodes of every arm on the samples still to do; returns their
    seconds (under the compiled engine they build a diffusion model's graphs) and their
    records, whose acceptance the cost model reads before the timed arms (`pipeline.foresee`;
    none for another engine's arms, whose records measure ties)."""
    left = {s.id for trial in range(job.run.repeats) for s in pending(job, store, trial)}
    todo = [s for s in job.samples if s.id in left]
    started, records = time.perf_counter(), []
    for i in range(job.run.warmup if todo else 0):
        sample = todo[i % len(todo)]
        decoded = {name: decode(job, decoder, sample) for name, decoder in running(job).items()}
        if not job.arms.measure_ties:
            records.append(record(job, sample, decoded))
    return time.perf_counter() - started, records


WAVE = 4  # a concurrent wave holds this many samples per request in flight


def decode_wave(job: Job, decoder: Decoder, wave: list[Sample]) -> list[Decoded]:
    """Every sample of the wave on one arm, `run.concurrency` requests in flight."""
    if job.run.concurrency == 1:
        return [decode(job, decoder, sample) for sample in wave]
    pool = ThreadPoolExecutor(job.run.concurrency, thread_name_prefix="request")
    try:
        return list(pool.map(lambda sample: decode(job, decoder, sample), wave))
    finally:  # on Ctrl-C the requests not yet sent are dropped; the servers' stop ends the rest
        pool.shutdown(wait=False, cancel_futures=True)


def pending(job: Job, store: RunStore, trial: int) -> list[Sample]:
    """The samples trial `trial` has not yet recorded."""
    return [s for s in job.samples if (s.id, trial) not in store.done]


def waves_of(job: Job, store: RunStore) -> list[tuple[int, int, list[Sample]]]:
    """The waves still to decode, as (trial, the arm order's rotation, samples). The rotation
    is the wave's place in its trial plus the trial, so each arm leads in turn within a trial
    and a sample's leading arm moves on from one trial to the next."""
    size = 1 if job.run.concurrency == 1 else WAVE * job.run.concurrency
    out = []
    for trial in range(job.run.repeats):
        todo = pending(job, store, trial)
        out += [
            (trial, k + trial, todo[i : i + size]) for k, i in enumerate(range(0, len(todo), size))
        ]
    return out


def evaluate(job: Job, store: RunStore, mirror: WandbMirror) -> None:
    waves = waves_of(job, store)
    if not waves:
        return
    arms = running(job)

    tokens = seconds = calls = 0.0
    names = list(arms)
    # closed as an interrupt leaves, so the bar's last line comes before the one saying so
    with tqdm(
        total=sum(len(wave) for _, _, wave in waves),
        desc="samples",
        unit="sample",
        disable=not job.run.progress,
        dynamic_ncols=True,
    ) as bar:
        for trial, turn, wave in waves:
            interrupt.check()
            lead = turn % len(names)
            order = names[lead:] + names[:lead]  # each arm leads in turn
            decoded = {name: decode_wave(job, arms[name], wave) for name in order}
            for i, sample in enumerate(wave):
                rec = record(job, sample, {name: runs[i] for name, runs in decoded.items()})
                rec.trial = trial
                store.append(rec)
                mirror.log_sample(rec)
                tokens += rec.method.new_tokens
                seconds += rec.method.wall_s
                calls += rec.method.target_calls
            bar.update(len(wave))
            bar.set_postfix(tok_s=f"{tokens / seconds:.1f}", tau=f"{tokens / calls:.2f}")
