"""A fleet of real worker processes on the emulators, its scenarios and their analysis: run by ``python -m
bench.fleet``, the demo (``python -m tools.demo``) and tests/integration/test_fleet.py."""
