"""The playground: sampling a run's checkpoints (`sample.py`, what `workbench sample` and the dashboard's
Playground page call) and the worker process that serves the page's requests (`worker.py`)."""
