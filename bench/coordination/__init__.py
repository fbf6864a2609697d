"""The coordination-cost benchmark (``python -m bench.coordination``): real and simulated fleets (the simulator
and billing rules are in :mod:`tools.coordination`) next to the KCL 3.x cost model."""
