"""The KCL 3.x coordination cost model: data and assumptions, to put next to the simulated figures.

Assumptions (DynamoDB on-demand, $0.125 per million read units, $0.625 per million write units, 730 h a month):

* Lease renewals: every lease is renewed by its owner with a conditional UpdateItem, 1,088 writes per
  lease-hour (one every ~3.3 s: a third of the 10 s failover time), 1 write unit each (a lease item is
  ~300 bytes). The owner GSI (leaseOwner, keys only) is not written by a renewal: the owner does not change.
* Lease reads: each worker queries its own leases on the owner GSI every 10 s (eventually consistent, one
  page under 4 KB: 0.5 read units).
* Worker metrics: each worker writes its metrics item (~500 bytes, 1 write unit) every 30 s.
* Leader: one worker scans the lease table and the worker-metrics table every 10 s (strongly consistent),
  ~300 bytes a lease, ~500 bytes a worker-metrics item.
* Not modelled: the leader's assignment writes and the GSI write amplification of an owner change (a delete
  and a put on the index): both happen on rebalancing only, not in steady state; shard sync (ListShards is a
  Kinesis call); checkpoints (counted separately here too).

Calibrated against issue 11's table (8/2 -> $4.13, 32/8 -> $16.5, 64/4 -> $32.1, 1,000/250 -> ~$520,
4,000/1,000 -> ~$2,060): this model gives $4.18, $16.6, $32.3, $518 and $2,070 (``calibration()``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tools.coordination.billing import HOURS_PER_MONTH, READ_PRICE, WRITE_PRICE

__all__ = ["ISSUE_FIGURES", "KclModel", "calibration", "kcl_cost"]

ISSUE_FIGURES = {(8, 2): 4.13, (32, 8): 16.5, (64, 4): 32.1, (1000, 250): 520.0, (4000, 1000): 2060.0}


@dataclass(frozen=True)
class KclModel:
    renewals_per_lease_hour: float = 1088.0
    lease_item_bytes: int = 300
    owner_query_interval_s: float = 10.0
    metrics_write_interval_s: float = 30.0
    metrics_item_bytes: int = 500
    leader_scan_interval_s: float = 10.0


def kcl_cost(shards: int, workers: int, model: KclModel | None = None) -> dict[str, float]:
    """Units per hour by item, $ per month, and the steady units per second (KCL 3.x has no start model)."""
    m = model or KclModel()
    renew_w = m.renewals_per_lease_hour * shards * math.ceil(m.lease_item_bytes / 1024)
    metrics_w = 3600 / m.metrics_write_interval_s * workers * math.ceil(m.metrics_item_bytes / 1024)
    query_r = 3600 / m.owner_query_interval_s * workers * 0.5
    scan_units = math.ceil(shards * m.lease_item_bytes / 4096) + math.ceil(
        workers * m.metrics_item_bytes / 4096
    )
    scan_r = 3600 / m.leader_scan_interval_s * scan_units
    read_h, write_h = query_r + scan_r, renew_w + metrics_w
    return {
        "lease_renewal_writes_per_hour": renew_w,
        "worker_metrics_writes_per_hour": metrics_w,
        "owner_query_reads_per_hour": query_r,
        "leader_scan_reads_per_hour": scan_r,
        "read_units_per_hour": read_h,
        "write_units_per_hour": write_h,
        "dollars_per_month": (read_h * READ_PRICE + write_h * WRITE_PRICE) * HOURS_PER_MONTH,
        "steady_read_units_per_second": read_h / 3600,
        "steady_write_units_per_second": write_h / 3600,
    }


def calibration() -> dict[str, tuple[float, float]]:
    """Shape -> (the issue's figure, this model's)."""
    return {
        f"{s}/{w}": (v, round(kcl_cost(s, w)["dollars_per_month"], 2)) for (s, w), v in ISSUE_FIGURES.items()
    }
