"""The benchmark harness: ``python -m benchmarks`` (see run.py)."""
