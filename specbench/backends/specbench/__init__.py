"""`backend=specbench`: every arm on specbench's own engine (`backend.py`); it has no knobs of
its own (`config.py`), its engine mode is the run's (`run.engine`)."""
