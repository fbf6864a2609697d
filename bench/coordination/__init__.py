"""The coordination-cost benchmark (``python -m bench.coordination``) on :mod:`tools.coordination`."""
