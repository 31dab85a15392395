"""Benchmarks of simharness' stacks (pytest-benchmark); see docs/benchmarks.md."""
