"""The benchmark suite's parts (``python -m bench`` runs them) and the standing benchmarks run beside it."""
