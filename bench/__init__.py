"""Benchmarks: entry points and their reports (``python -m bench.<name>``). What they share with the tests and
the demo lives in tools/, which never imports bench."""
