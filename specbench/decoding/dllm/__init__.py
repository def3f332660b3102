"""Decoding a diffusion LLM: block-wise semi-autoregressive decoders, spatial policies, PSD."""
