"""A byte-level BPE tokenizer for the tiny world, saved as a transformers tokenizer."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

EOS, PAD, MASK = "<|endoftext|>", "<|pad|>", "<|mask|>"


def train_tokenizer(
    texts: list[str], vocab_size: int = 4096, split_digits: bool = False
) -> PreTrainedTokenizerFast:
    """Special tokens take ids 0 (EOS), 1 (PAD), 2 (MASK); the byte alphabet guarantees that
    any text round-trips. `split_digits` gives every digit a token of its own (the math world:
    a model adds digit by digit, as Llama's and Qwen's tokenizers make it)."""
    bpe = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split_digits
        else byte_level
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD, MASK],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token=EOS, pad_token=PAD, mask_token=MASK, bos_token=None
    )
