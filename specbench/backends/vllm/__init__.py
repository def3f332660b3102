"""`backend=vllm`: a cell's arms inside vLLM's engine: its knobs (`config.py`), its method table
and `Backend` (`backend.py`), its servers and requests (`server.py`)."""
