"""Coordination cost: DynamoDB billing rules, the repository seam metered as DynamoDB bills it, the proxy's meter
of real requests, and a fleet simulator; used by ``python -m bench.coordination``."""
