"""specbench: reproducible benchmarks for speculative decoding with diffusion language models."""

__version__ = "0.1.0"
