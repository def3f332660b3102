"""Training tiny-dflash: DFlash's recipe as far as public code shows it (the paper's section 4.2
as implemented by SpecForge's `OnlineDFlashModel`, which NVIDIA's trainer ports; z-lab publish
no trainer):

- data: the target's own greedy continuations of prefixes from the training split (what the
  drafter must predict when it serves this target), loss only on the continuations;
- features: the frozen target's outputs at the drafter's `target_layer_ids`, every position;
- blocks: a fixed number of anchors per sequence, drawn without replacement among positions
  whose next tokens are continuation, fresh each step; each block is [token at the anchor,
  mask x (block - 1)] at the anchor's positions, all blocks of a sequence in one forward;
- attention: a block sees the features of the positions before its anchor and its own block in
  both directions, nothing of the other blocks;
- loss: block position k >= 1 predicts the token at anchor + k through the target's own LM
  head, cross-entropy weighted by exp(-(k - 1) / gamma), normalised by the weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel, Qwen3Config

from specbench.models.tiny.train import Schedule, fit, random_windows


def dflash_drafter(
    target: PreTrainedModel, layers: int, target_layer_ids: list[int], block: int, mask_id: int
) -> torch.nn.Module:
    """A DFlash drafter of the package's class, shaped like the target's layers."""
    from dflash.model import DFlashDraftModel

    text = target.config
    config = Qwen3Config(
        vocab_size=text.vocab_size,
        hidden_size=text.hidden_size,
        intermediate_size=text.intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=text.num_attention_heads,
        num_key_value_heads=text.num_key_value_heads,
        head_dim=text.hidden_size // text.num_attention_heads,
        max_position_embeddings=text.max_position_embeddings,
        rms_norm_eps=text.rms_norm_eps,
        architectures=["DFlashDraftModel"],
    )
    config.num_target_layers = text.num_hidden_layers
    config.block_size = block
    config.dflash_config = {"mask_token_id": mask_id, "target_layer_ids": target_layer_ids}
    return DFlashDraftModel(config)


@torch.no_grad()
def greedy_continuations(
    target: PreTrainedModel,
    stream: torch.Tensor,
    n: int,
    prefix: int,
    new: int,
    seed: int,
    ends: torch.Tensor | None = None,
) -> torch.Tensor:
    """[n, prefix + new]: random windows of the stream, each continued greedily by the target;
    with `ends`, windows end at positions drawn from them (the math world: where a question's
    `A:` ends, so the continuation is the target's own solution)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for start in range(0, n, 64):
        ids = (
            random_windows(stream, min(64, n - start), prefix, g)
            if ends is None
            else windows_ending(stream, ends, min(64, n - start), prefix, g)
        )
        cache = DynamicCache(config=target.config)
        logits = target(input_ids=ids, cache=cache, use_cache=True).logits
        for _ in range(new):
            ids = torch.cat([ids, logits[:, -1:].argmax(-1)], 1)
            logits = target(input_ids=ids[:, -1:], cache=cache, use_cache=True).logits
        rows.append(ids)
    return torch.cat(rows)


def windows_ending(
    stream: torch.Tensor, ends: torch.Tensor, batch: int, length: int, g: torch.Generator
) -> torch.Tensor:
    """[batch, length]: windows of the stream whose last token is at a position of `ends`."""
    usable = ends[ends >= length - 1]
    last = usable[torch.randint(0, len(usable), (batch,), generator=g)]
    return torch.stack([stream[e - length + 1 : e + 1] for e in last.tolist()])


@torch.no_grad()
def target_features(target: PreTrainedModel, ids: torch.Tensor, layers: list[int]) -> torch.Tensor:
    """[n, length, len(layers) * hidden] in float16: the target's outputs at `layers`."""
    rows = []
    for batch in ids.split(64):
        states = target(input_ids=batch, output_hidden_states=[i + 1 for i in layers]).hidden_states
        rows.append(torch.cat([states[i + 1] for i in layers], -1).half())
    return torch.cat(rows)


def anchors(first: int, length: int, block: int, count: int, batch: int, g: torch.Generator):
    """[batch, count] sorted anchor positions in [first, length - block], without replacement."""
    choices = torch.rand(batch, length - block + 1 - first, generator=g).argsort(-1)[:, :count]
    return (choices + first).sort(-1).values


def block_mask(anchor: torch.Tensor, length: int, block: int) -> torch.Tensor:
    """[batch, 1, blocks * block, length + blocks * block], True where a query may look: the
    features before its anchor, and its own block."""
    batch, count = anchor.shape
    block_of_query = torch.arange(count * block) // block
    sees_context = torch.arange(length)[None, None, :] < anchor[:, block_of_query, None]
    same_block = block_of_query[:, None] == block_of_query[None, :]
    sees_block = same_block[None].expand(batch, -1, -1)
    return torch.cat([sees_context, sees_block], -1)[:, None]


def block_logits(
    drafter: torch.nn.Module,
    embedding: torch.Tensor,
    ids: torch.Tensor,
    features: torch.Tensor,
    anchor: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every block of a batch in one forward (ids [b, L], features [b, L, F], anchor [b, n]):
    the logits at the block positions, through the target's tied LM head, and the labels."""
    block = drafter.block_size
    batch, length = ids.shape
    positions = (anchor[:, :, None] + torch.arange(block)).flatten(1)  # [b, n * block]
    block_ids = torch.full_like(positions, drafter.mask_token_id)
    block_ids[:, ::block] = ids.gather(1, anchor)
    hidden = drafter(
        position_ids=torch.cat([torch.arange(length).expand(batch, -1), positions], 1),
        noise_embedding=F.embedding(block_ids, embedding),
        target_hidden=features.to(embedding.dtype),
        attention_mask=block_mask(anchor, length, block),
    )
    return F.linear(hidden, embedding).float(), ids.gather(1, positions)


def dflash_loss(
    drafter: torch.nn.Module,
    embedding: torch.Tensor,
    ids: torch.Tensor,
    features: torch.Tensor,
    anchor: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """The block cross-entropy of one batch, position k weighted by exp(-(k - 1) / gamma)."""
    logits, labels = block_logits(drafter, embedding, ids, features, anchor)
    offsets = torch.arange(drafter.block_size)
    weight = torch.exp(-(offsets - 1).clamp_min(0) / gamma) * (offsets > 0)
    weight = weight.repeat(anchor.shape[1]).expand(ids.shape[0], -1)
    ce = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    return (ce * weight).sum() / weight.sum()


def train_dflash(
    drafter: torch.nn.Module,
    embedding: torch.Tensor,
    ids: torch.Tensor,
    features: torch.Tensor,
    prefix: int,
    schedule: Schedule,
    seed: int,
    blocks_per_sequence: int,
    gamma: float = 7.0,
) -> list[float]:
    """Anchors are drawn so every label (anchor + 1 .. anchor + block - 1) is continuation."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(
        drafter.parameters(), lr=schedule.lr, betas=(0.9, 0.95), weight_decay=schedule.weight_decay
    )

    def batch_loss() -> torch.Tensor:
        rows = torch.randint(0, len(ids), (schedule.batch,), generator=g)
        anchor = anchors(
            prefix - 1, ids.shape[1], drafter.block_size, blocks_per_sequence, len(rows), g
        )
        return dflash_loss(drafter, embedding, ids[rows], features[rows], anchor, gamma)

    return fit(drafter, opt, schedule, batch_loss, "tiny-dflash")


@torch.no_grad()
def evaluate_dflash(
    drafter: torch.nn.Module,
    embedding: torch.Tensor,
    ids: torch.Tensor,
    features: torch.Tensor,
    prefix: int,
) -> dict[str, object]:
    """On held-out continuations: the accuracy of each draft position (8 random blocks per
    sequence), and the drafts accepted per round when each continuation is decoded as greedy
    verification walks it (the next anchor after the accepted run), which weighs the hard
    stretches as decoding does."""
    g = torch.Generator().manual_seed(0)
    block, length = drafter.block_size, ids.shape[1]
    hits = []
    for rows in torch.arange(len(ids)).split(16):
        anchor = anchors(prefix - 1, length, block, 8, len(rows), g)
        logits, labels = block_logits(drafter, embedding, ids[rows], features[rows], anchor)
        right = (logits.argmax(-1) == labels).view(len(rows), -1, block)[..., 1:]
        hits.append(right.flatten(0, 1).float())
    accepted, anchor = [], torch.full((len(ids),), prefix - 1)
    while (active := (anchor + block <= length).nonzero()[:, 0]).numel():
        logits, labels = block_logits(
            drafter, embedding, ids[active], features[active], anchor[active, None]
        )
        run = (logits.argmax(-1) == labels)[:, 1:].int().cumprod(-1).sum(-1)
        accepted += run.tolist()
        anchor[active] += run + 1
    return {
        "position_accuracy": [round(float(a), 4) for a in torch.cat(hits).mean(0)],
        "accepted_per_round": sum(accepted) / len(accepted),
        "rounds": len(accepted),
    }
