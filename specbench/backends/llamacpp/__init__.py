"""`backend=llamacpp`: a cell's arms inside llama.cpp's `llama-server` on the CPU: its knobs
(`config.py`), its method table and `Backend` (`backend.py`), its servers and requests
(`server.py`). The models it serves are GGUF exports of specbench's checkpoints
(specbench/models/gguf_export.py)."""
