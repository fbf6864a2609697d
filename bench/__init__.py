"""Benchmarks: the fleet benchmark (bench.fleet) and the pipeline benchmark (bench.pipeline)."""
