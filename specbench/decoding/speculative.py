"""The one draft-verify loop that every drafter plugs into, and its ceiling (a perfect
drafter, `run.oracle`)."""

from __future__ import annotations

import copy
import random
from abc import ABC, abstractmethod
from typing import Protocol

import torch

from specbench.decoding import cost
from specbench.decoding.generation import Decoder, Draft, Generation, Meter, Stop
from specbench.decoding.trees import tree_positions
from specbench.decoding.verify import AcceptanceRule, TreeRule
from specbench.decoding.warp import Warp
from specbench.method import Method
from specbench.models.causal import CausalLM, ancestor_mask
from specbench.runs.summary import Summary


class Drafter(ABC):
    """Proposes the next tokens after a context. A drafter that reads the target (DFlash,
    EAGLE-style) names the decoder layers it wants in `hidden_layers`: verification then
    captures them, and `observe` shows the drafter every position the target has newly
    accepted before it drafts again. Token-only drafters leave it empty, and verification
    captures nothing for them."""

    calls: int
    hidden_layers: tuple[int, ...] = ()

    @abstractmethod
    def reset(self) -> None:
        """Forget the previous sequence."""

    @abstractmethod
    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        """Up to `n` tokens to follow `context` (fewer at a stop token)."""

    def finish(self, context: list[int]) -> None:
        """The generation's whole sequence once it ends (prompt and emitted tokens): a drafter
        that learns from outputs (SuffixDecoding's trees) takes the last round's tokens here;
        others ignore it."""
        return None

    def observe(self, hidden: torch.Tensor) -> None:
        """The `hidden_layers` outputs [positions, len(layers) * hidden] at the positions the
        last verification committed to the target's cache: the prompt in the first round,
        then the round's first token and the accepted drafts, the newest token (not yet fed
        to the target) excluded. Token-only drafters ignore it."""
        return None


class DraftLength(Protocol):
    """How many tokens the next round drafts: `start` first, then `next` after each round."""

    start: int

    def reset(self) -> None: ...

    def next(self, gamma: int, n_accepted: int, draft: Draft) -> int: ...


class GammaSchedule:
    """Draft length per round: `constant`, or `heuristic`, HF's rule (+2 after a fully accepted
    draft, -1 otherwise, never below 1) restarted at gamma for every sample, as HF's
    `heuristic_transient` does, so a sample's result never depends on the samples before it."""

    def __init__(self, gamma: int, kind: str):
        self.start, self.kind = gamma, kind

    def reset(self) -> None:
        pass

    def next(self, gamma: int, n_accepted: int, draft: Draft) -> int:
        if self.kind == "constant":
            return gamma
        return gamma + 2 if n_accepted == len(draft.tokens) else max(1, gamma - 1)


class SpeculativeDecoder:
    """Draft, verify in one target forward, keep the accepted slots, repeat. A chain draft is
    judged by `rule`; a tree draft (`Draft.parents`) by `tree_rule`, on the same contract."""

    def __init__(
        self,
        target: CausalLM,
        drafter: Drafter,
        rule: AcceptanceRule,
        warp: Warp,
        schedule: DraftLength,
        tree_rule: TreeRule | None = None,
    ):
        self.target, self.drafter, self.rule, self.tree_rule = target, drafter, rule, tree_rule
        self.warp, self.schedule = warp, schedule

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        generator: torch.Generator,
        stop: Stop | None = None,
    ) -> Generation:
        target, drafter = self.target, self.drafter
        stop = stop or Stop(frozenset(target.eos_token_ids))
        meter = Meter(target, drafter)
        target.reset()
        drafter.reset()
        tokens: list[int] = []
        # tokens the target has not seen yet: the prompt, then the last emitted one
        unread = list(prompt_ids)
        self.schedule.reset()
        gamma, draft_lengths, accepted, emitted, nodes = self.schedule.start, [], [], [], []
        draft_s, rounds = 0.0, []
        while len(tokens) < max_new_tokens:
            n_draft = min(gamma, max_new_tokens - len(tokens) - 1)  # a round emits <= n_draft + 1
            draft = drafter.draft(prompt_ids + tokens, n_draft, generator)
            path, next_token = self.verify(unread, draft, generator)
            start = len(tokens)
            tokens += [draft.tokens[i] for i in path] + [next_token]
            end = stop.first(tokens, start)
            stopped = end is not None
            if stopped:
                del tokens[end + 1 :]
            unread = [next_token]
            meter.first_token()
            draft_lengths.append(draft.depth)
            accepted.append(len(path))
            emitted.append(len(tokens) - start)
            if draft.parents is not None:
                nodes.append(len(draft.tokens))
            draft_s += draft.seconds
            if draft.info:
                rounds.append(draft.info)
            gamma = self.schedule.next(gamma, len(path), draft)
            if stopped:
                break
        drafter.finish(prompt_ids + tokens)
        return meter.generation(
            tokens,
            emitted,
            draft_s=draft_s,
            draft_lengths=draft_lengths,
            accepted=accepted,
            rounds=rounds,
            nodes=nodes,
        )

    def verify(
        self, unread: list[int], draft: Draft, generator: torch.Generator
    ) -> tuple[list[int], int]:
        """One target forward over the unread tokens and the draft; the target's cache keeps
        the unread tokens and the accepted draft nodes, and a drafter that reads the target
        sees their hidden states. Returns the accepted nodes, root first, and the next token."""
        target, layers, n_unread = self.target, self.drafter.hidden_layers, len(unread)
        last = len(draft.tokens) + 1
        if draft.parents is None or not draft.tokens:
            out = target.forward(unread + draft.tokens, last=last, hidden_layers=layers)
            n, next_token = self.rule(out.logits, draft.q_probs, draft.tokens, self.warp, generator)
            path = list(range(n))
        else:
            out = target.forward(
                unread + draft.tokens,
                positions=tree_positions(target.length, n_unread, draft.parents),
                ancestors=ancestor_mask(n_unread, draft.parents, target.device),
                last=last,
                hidden_layers=layers,
            )
            path, next_token = self.tree_rule(
                out.logits, draft.tokens, draft.parents, self.warp, generator
            )
        kept = list(range(n_unread)) + [n_unread + i for i in path]
        target.keep(kept)
        if layers:
            self.drafter.observe(out.hidden[torch.tensor(kept, device=out.hidden.device)])
        return path, next_token


class DraftVerifyMethod(Method):
    """A method on the draft-verify loop above: a drafter proposes tokens, the AR target
    verifies them, so rounds count drafted tokens and the cost model is Leviathan et al.'s."""

    round_unit = "tokens"
    has_ceiling = True

    def ceiling(
        self, decoder: SpeculativeDecoder, baseline: Decoder, simulated: float | None = None
    ) -> OracleArm:
        """The same decoder drafting the baseline's own continuation (`OracleArm`)."""
        return OracleArm(decoder, baseline, simulated)

    def cost_model(
        self, decoder: SpeculativeDecoder, prompt_ids: list[int], summary: Summary
    ) -> dict:
        return cost.speculative(decoder, prompt_ids, summary)


# The ceiling (`run.oracle=true`): the method's own decoder with a perfect drafter, run beside it
# on every sample, so each summary says what fraction of its ceiling the method reaches.
#
# vLLM's oracle replay proposes the target's own saved output as every draft; here the oracle
# proposes the baseline arm's continuation of the prompt (the target's greedy decoding, computed
# untimed before the arm's timed decode), in the method's own shape: the same draft lengths
# (gamma, a block, an adaptive schedule), the same verification (a tree method verifies the path
# as a tree, under its mask), the same target and engine. Every round then accepts its whole
# draft unless the generation budget or a stop cuts it, and what remains is the system's cost:
# drafting nothing, verifying everything. Greedy only: at a temperature, a one-hot draft of one
# sampled continuation is not a perfect drafter.


class OracleDrafter(Drafter):
    """Proposes the next tokens of `script` (prompt + the target's own continuation) while the
    context follows it; as a tree (a single path) where the decoder verifies trees. With
    `simulated`, only a forced number of them are right (a length per round, or each with a
    probability, from the seeded `rng`): the next one is replaced by another token, which the
    target's own rule rejects, so its output stays the target's."""

    def __init__(self, as_tree: bool, vocab_size: int, simulated: float | None = None):
        self.as_tree, self.vocab_size, self.simulated = as_tree, vocab_size, simulated
        self.script: list[int] = []
        self.rng = random.Random(0)
        self.calls = 0

    def reset(self) -> None:
        return None

    def draft(self, context: list[int], n: int, generator: torch.Generator) -> Draft:
        # the previous context followed the script and every accepted draft token is the
        # script's, so only the round's last token (the target's own) can have left it
        at = len(context)
        follows = at <= len(self.script) and context[-1] == self.script[at - 1]
        tokens = self.script[at : at + n] if follows else []
        right = self.right(len(tokens))
        if right < len(tokens):
            tokens[right] = (tokens[right] + 1) % self.vocab_size
        parents = list(range(-1, len(tokens) - 1)) if self.as_tree and tokens else None
        return Draft(tokens, None, 0, 0.0, parents=parents)

    def right(self, n: int) -> int:
        """How many leading draft tokens stay right: all, a forced length, or a run of
        successes each of probability `simulated`."""
        if self.simulated is None:
            return n
        if self.simulated >= 1:
            return min(n, int(self.simulated))
        right = 0
        while right < n and self.rng.random() < self.simulated:
            right += 1
        return right


class OracleArm:
    """The method's decoder with an `OracleDrafter`; before each timed decode the baseline
    decodes the prompt untimed, and its tokens become the script. A simulated acceptance rate
    draws from a generator seeded by the sample's own seed."""

    def __init__(
        self, decoder: SpeculativeDecoder, baseline: Decoder, simulated: float | None = None
    ):
        self.decoder = copy.copy(decoder)
        as_tree = decoder.tree_rule is not None
        self.decoder.drafter = OracleDrafter(as_tree, decoder.target.vocab_size, simulated)
        self.baseline = baseline

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        generator: torch.Generator,
        stop: Stop | None = None,
    ) -> Generation:
        script = self.baseline.generate(prompt_ids, max_new_tokens, generator, stop).tokens
        drafter = self.decoder.drafter
        drafter.script = list(prompt_ids) + script
        drafter.rng.seed(generator.initial_seed())
        return self.decoder.generate(prompt_ids, max_new_tokens, generator, stop)
