"""Whether a vLLM PLD run's rounds, as specbench rebuilt them from vLLM's record, are the
rounds vLLM's engine ran, read from a log of its ngram proposer (sitecustomize.py):

    PYTHONPATH=tools/vllm_steps VLLM_NGRAM_LOG=/tmp/ngram.jsonl specbench-run \\
        experiment=vllm_tiny method=pld backend=vllm run.limit=20 run.results_dir=/tmp/r
    .venv/bin/python tools/vllm_steps/check.py /tmp/ngram.jsonl /tmp/r/vllm_tiny/pld-*/

Per sample: the last request in the log that generated its output, its steps as (drafted,
accepted) with the last clipped to the output (vLLM accepts past max_tokens), against the
record's drafted_per_round / accepted_per_round."""

import json
import sys
from pathlib import Path


def requests(log: Path) -> list[list[dict]]:
    """The log's steps cut into requests: a step whose context does not extend the previous
    step's starts a new one (one request at a time)."""
    out: list[list[dict]] = []
    for line in log.read_text().splitlines():
        step = json.loads(line)
        if not out or step["context"][: len(out[-1][-1]["context"])] != out[-1][-1]["context"]:
            out.append([])
        out[-1].append(step)
    return out


def rounds(steps: list[dict], output: list[int]) -> list[tuple[int, int]]:
    """(drafted, accepted) per step, up to the output's length: a step's acceptance is what
    the next step sampled, less its bonus token."""
    done, out = 1, []  # the prefill's token
    for step, after in zip(steps, steps[1:] + [{"sampled": [0]}]):
        if done >= len(output):
            break
        accepted = min(len(after["sampled"]) - 1, len(output) - done - 1)
        out.append((len(step["draft"]), accepted))
        done += accepted + 1
    return out


def made(request: list[dict], prompt: int, output: list[int]) -> bool:
    """Whether a logged request, from its first step, generated `output` (its last context
    may run past it)."""
    if len(request[0]["context"]) != prompt + 1:
        return False
    generated = request[-1]["context"][prompt:]
    return generated[: len(output)] == output[: len(generated)]


def main(log: str, run: str) -> None:
    logged = requests(Path(log))
    equal = 0
    records = [json.loads(line) for line in (Path(run) / "records.jsonl").read_text().splitlines()]
    for record in records:
        output, prompt = record["method"]["output_ids"], record["prompt_tokens"]
        ran = [r for r in logged if made(r, prompt, output)]
        mine = list(zip(record["drafted_per_round"], record["accepted_per_round"]))
        engine = rounds(ran[-1], output) if ran else None
        equal += engine == mine
        if engine != mine:
            print(f"{record['id']}: engine {engine}, record {mine}")
    print(f"rounds as the engine ran them: {equal}/{len(records)} samples")


if __name__ == "__main__":
    main(*sys.argv[1:])
