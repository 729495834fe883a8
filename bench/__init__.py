"""Benchmarks too slow for the test suite; run each from the repository root as ``python -m bench.NAME``
(bench/common.py: what they share)."""
