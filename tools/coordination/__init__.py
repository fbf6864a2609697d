"""Coordination cost: DynamoDB billing rules, an in-memory DynamoDB, a fleet simulator and a counting proxy,
used by the benchmark (``python -m bench.coordination``) and by the tests of the rules themselves."""
