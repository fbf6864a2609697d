"""The KCL 3.x coordination cost model, next to the simulated figures: lease renewals, owner-GSI queries, worker
metrics writes and the leader's scans, on DynamoDB on-demand (docs/benchmarks.md lists the assumptions and what
is not modelled); ``calibration()`` puts it next to issue 11's figures.
"""

from __future__ import annotations

import math

from tools.coordination.billing import dollars_per_month

__all__ = ["calibration", "kcl_cost"]

ISSUE_FIGURES = {(8, 2): 4.13, (32, 8): 16.5, (64, 4): 32.1, (1000, 250): 520.0, (4000, 1000): 2060.0}
RENEWALS_PER_LEASE_HOUR = 1088.0  # one every ~3.3 s: a third of the 10 s failover time
LEASE_BYTES, METRICS_BYTES = 300, 500  # a lease item, a worker-metrics item
OWNER_QUERY_S, METRICS_WRITE_S, LEADER_SCAN_S = 10.0, 30.0, 10.0  # each worker's, each worker's, the leader's


def kcl_cost(shards: int, workers: int) -> dict[str, float]:
    """Units per hour by item, $ per month, and the steady units per second (KCL 3.x has no start model)."""
    renew_w = RENEWALS_PER_LEASE_HOUR * shards * math.ceil(LEASE_BYTES / 1024)
    metrics_w = 3600 / METRICS_WRITE_S * workers * math.ceil(METRICS_BYTES / 1024)
    query_r = 3600 / OWNER_QUERY_S * workers * 0.5
    scan_units = math.ceil(shards * LEASE_BYTES / 4096) + math.ceil(workers * METRICS_BYTES / 4096)
    scan_r = 3600 / LEADER_SCAN_S * scan_units
    read_h, write_h = query_r + scan_r, renew_w + metrics_w
    return {
        "lease_renewal_writes_per_hour": renew_w,
        "worker_metrics_writes_per_hour": metrics_w,
        "owner_query_reads_per_hour": query_r,
        "leader_scan_reads_per_hour": scan_r,
        "read_units_per_hour": read_h,
        "write_units_per_hour": write_h,
        "dollars_per_month": dollars_per_month(read_h, write_h),
        "steady_read_units_per_second": read_h / 3600,
        "steady_write_units_per_second": write_h / 3600,
    }


def calibration() -> dict[str, tuple[float, float]]:
    """Shape -> (the issue's figure, this model's)."""
    return {
        f"{s}/{w}": (v, round(kcl_cost(s, w)["dollars_per_month"], 2)) for (s, w), v in ISSUE_FIGURES.items()
    }
