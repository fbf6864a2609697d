"""Coordination cost: DynamoDB billing rules, an in-memory DynamoDB, a fleet simulator, a counting proxy and
the benchmark that puts real and simulated fleets next to the KCL 3.x cost model (``python -m
bench.coordination``)."""
