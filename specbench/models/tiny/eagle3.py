"""Training tiny-eagle3: EAGLE-3's recipe (SafeAILab/EAGLE, `eagle/traineagle3/cnets.py` and
`main.py`) on the tiny world:

- data: windows of the training split, as upstream trains on fixed text; from one target
  forward per batch, the inputs of the target layers the drafter fuses and the target's
  prediction at every position (the labels);
- draft vocabulary: the ids the target predicts most often on that data (upstream counts its
  training data's tokens), `d2t`/`t2d` its maps; a label outside it carries no loss (upstream's
  `position_mask`);
- the training-time test: the drafter is unrolled `steps` times over every position at once;
  step k at position p feeds back the drafter's own output state of step k - 1, with the token
  at p + 1 + k (upstream feeds the data's tokens, which are the drafter's own whenever its
  drafts so far were right), at position p + k; its attention reads step 0's keys up to p and
  its own chain's keys of steps 1..k at p, exactly what drafting a chain reads;
- the head starts as the target's rows of the draft vocabulary (`head_from_target`);
- loss: step k's cross-entropy against the target's prediction at p + k + 1 (of the token at
  p + k + 2), weighted 0.8^k (upstream's `ploss_weight`). Upstream's labels are the target's
  softmax there; its argmax is the one thing greedy acceptance reads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, PreTrainedModel

from specbench.models.eagle3 import Eagle3Drafter
from specbench.models.tiny.train import Schedule, fit

STEP_DECAY = 0.8  # upstream's loss weight per training-time-test step


def eagle3_drafter(target: PreTrainedModel, aux_layer_ids: list[int], draft_vocab: int):
    """An EAGLE-3 drafter shaped like the target's layers, reading its embeddings."""
    text = target.config
    config = LlamaConfig(
        vocab_size=text.vocab_size,
        hidden_size=text.hidden_size,
        intermediate_size=text.intermediate_size,
        num_hidden_layers=1,
        num_attention_heads=text.num_attention_heads,
        num_key_value_heads=text.num_key_value_heads,
        max_position_embeddings=text.max_position_embeddings,
        rms_norm_eps=text.rms_norm_eps,
        rope_theta=text.rope_parameters["rope_theta"],
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=text.eos_token_id,
        pad_token_id=text.pad_token_id,
    )
    config.draft_vocab_size = draft_vocab
    config.target_hidden_size = text.hidden_size
    config.norm_before_residual = False
    config.aux_layer_ids = aux_layer_ids
    drafter = Eagle3Drafter(config)
    drafter.embedding = target.get_input_embeddings().weight.detach()
    return drafter


@torch.no_grad()
def target_states(
    target: PreTrainedModel, ids: torch.Tensor, layers: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The outputs of decoder `layers` [n, T, len(layers) * hidden] in float16 and the target's
    greedy prediction after every position [n, T], one forward per 64 rows."""
    features, predicted = [], []
    for batch in ids.split(64):
        out = target(input_ids=batch, output_hidden_states=[i + 1 for i in layers])
        features.append(torch.cat([out.hidden_states[i + 1] for i in layers], -1).half())
        predicted.append(out.logits.argmax(-1))
    return torch.cat(features), torch.cat(predicted)


def draft_vocabulary(drafter: Eagle3Drafter, ids: torch.Tensor) -> None:
    """The `draft_vocab_size` most frequent ids of `ids` become the draft vocabulary, in id
    order: d2t[d] = target id - d, t2d marks them."""
    counts = torch.bincount(ids.flatten(), minlength=drafter.config.vocab_size)
    kept = counts.topk(drafter.config.draft_vocab_size).indices.sort().values
    drafter.d2t.copy_(kept - torch.arange(len(kept)))
    drafter.t2d.zero_()
    drafter.t2d[kept] = True


@torch.no_grad()
def head_from_target(drafter: Eagle3Drafter, target: PreTrainedModel) -> None:
    """The target's LM head rows of the draft vocabulary as the drafter's head to start from
    (upstream starts it at random; on a CPU this saves most of the steps)."""
    kept = drafter.t2d.nonzero()[:, 0]
    drafter.lm_head.weight.copy_(target.get_output_embeddings().weight[kept])


def ttt_visible(length: int, step: int) -> torch.Tensor:
    """[1, length, (step + 1) * length]: position p of step `step` reads step 0's keys up to p
    and the keys of steps 1..step at p."""
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    diagonal = torch.eye(length, dtype=torch.bool)
    return torch.cat([causal] + [diagonal] * step, -1)[None]


def ttt_logits(
    drafter: Eagle3Drafter, ids: torch.Tensor, features: torch.Tensor, steps: int
) -> list[torch.Tensor]:
    """The training-time test over a batch (ids [b, T], the fused layers' inputs [b, T, 3h]):
    per step, the draft-vocabulary logits [b, T - 1, Vd] of every position p, which step k
    spends predicting the token at p + k + 2."""
    length = ids.shape[1] - 1
    positions = torch.arange(length)[None]
    hidden = drafter.fuse(features[:, :-1].to(drafter.fc.weight.dtype))
    past, logits = None, []
    for step in range(steps):
        tokens = F.pad(ids[:, 1 + step :], (0, step))  # past the end: padding, never a label
        states, (keys, values) = drafter(
            tokens, hidden, positions + step, ttt_visible(length, step), past
        )
        past = (
            (keys, values)
            if past is None
            else tuple(torch.cat([old, new], -2) for old, new in zip(past, (keys, values)))
        )
        logits.append(drafter.logits(states).float())
        hidden = states
    return logits


def ttt_labels(
    drafter: Eagle3Drafter, predicted: torch.Tensor, counted: torch.Tensor, step: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s draft-vocabulary labels [b, T - 1], the target's predictions at p + step + 1
    (`predicted` [b, T]), and where they count: inside the window, at a position `counted`
    [b, T] marks, in the draft vocabulary."""
    length = predicted.shape[1] - 1
    at = (torch.arange(length) + step + 1).clamp_max(length)
    inside = torch.arange(length) + step + 1 <= length
    labels = predicted[:, at]
    counts = inside[None] & counted[:, at] & drafter.t2d[labels]
    draft_index = torch.cumsum(drafter.t2d.long(), 0) - 1
    return draft_index[labels].clamp_min(0), counts


def ttt_loss(
    drafter: Eagle3Drafter,
    ids: torch.Tensor,
    features: torch.Tensor,
    predicted: torch.Tensor,
    steps: int,
) -> torch.Tensor:
    """Upstream's weighted sum of the steps' losses, each a mean over the positions counted."""
    loss = torch.zeros(())
    counted = torch.ones_like(predicted, dtype=torch.bool)
    for step, logits in enumerate(ttt_logits(drafter, ids, features, steps)):
        labels, counts = ttt_labels(drafter, predicted, counted, step)
        ce = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
        loss = loss + STEP_DECAY**step * (ce * counts).sum() / counts.sum().clamp_min(1)
    return loss


def train_eagle3(
    drafter: Eagle3Drafter,
    ids: torch.Tensor,
    features: torch.Tensor,
    predicted: torch.Tensor,
    schedule: Schedule,
    seed: int,
    steps: int,
) -> list[float]:
    """Batches of whole windows; the embeddings (the target's) stay frozen."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(
        drafter.parameters(), lr=schedule.lr, betas=(0.9, 0.95), weight_decay=schedule.weight_decay
    )

    def batch_loss() -> torch.Tensor:
        rows = torch.randint(0, len(ids), (schedule.batch,), generator=g)
        return ttt_loss(drafter, ids[rows], features[rows], predicted[rows], steps)

    return fit(drafter, opt, schedule, batch_loss, "tiny-eagle3")


@torch.no_grad()
def evaluate_eagle3(
    drafter: Eagle3Drafter,
    ids: torch.Tensor,
    features: torch.Tensor,
    predicted: torch.Tensor,
    prefix: int,
    steps: int,
) -> dict[str, object]:
    """On the target's greedy continuations of held-out prefixes (there the data's next tokens
    are the target's predictions, so the test feeds back exactly what a drafted chain feeds
    while its drafts are right), every anchor whose `steps` labels are all continuation: the
    share of chains right through step k, and their mean accepted length under greedy
    verification (a label outside the draft vocabulary is a miss)."""
    length = ids.shape[1] - 1
    anchor = torch.arange(length)
    anchors = (anchor + 2 >= prefix) & (anchor + steps <= length)
    continuation = torch.arange(ids.shape[1]) >= prefix - 1
    runs = []
    for rows in torch.arange(len(ids)).split(16):
        counted = continuation.expand(len(rows), -1)
        right = []
        for step, logits in enumerate(ttt_logits(drafter, ids[rows], features[rows], steps)):
            labels, counts = ttt_labels(drafter, predicted[rows], counted, step)
            right.append((logits.argmax(-1) == labels) & counts)
        runs.append(torch.stack(right, -1).int().cumprod(-1)[:, anchors].flatten(0, 1).float())
    chains = torch.cat(runs)
    return {
        "chain_accuracy": [round(float(a), 4) for a in chains.mean(0)],
        "accepted_per_round": round(float(chains.sum(-1).mean()), 4),
        "anchors": len(chains),
        "steps": steps,
    }
