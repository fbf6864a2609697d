"""Coordination cost: DynamoDB billing rules, an in-memory DynamoDB, a fleet simulator, and a meter that bills
real requests on their way through the fault proxy; used by the benchmark (``python -m bench.coordination``)
and by the tests of the rules themselves."""
