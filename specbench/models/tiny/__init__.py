"""The tiny world: a tokenizer and small models trained by specbench on the Python standard
library's own source, so every method runs end to end on a CPU with meaningful acceptance."""
