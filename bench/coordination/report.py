"""Extrapolation for shapes too slow to simulate, and the markdown table of the coordination benchmark."""

from __future__ import annotations

from typing import Any

from bench.coordination.kcl_model import kcl_cost
from tools.coordination.billing import dollars_per_month

__all__ = ["extrapolate", "markdown"]


def extrapolate(base: dict[str, Any], shards: int, workers: int) -> dict[str, Any]:
    """The steady bill at ``shards``/``workers`` from a simulated shape's per-worker request rates, scaling
    the units of each Scan/Query page with the table's item count (S + W) and every other request's not."""
    s0, w0 = base["shards"], base["workers"]
    growth = (shards + workers) / (s0 + w0)
    read = write = 0.0
    for name, row in base["steady"]["by_operation"].items():
        if not name.startswith("checkpoint_table.UpdateItem"):
            paged = "Scan" in name or "Query" in name  # their units grow with the items they read
            read += row["read_units_per_hour"] * workers / w0 * (growth if paged else 1)
            write += row["write_units_per_hour"] * workers / w0
    return {
        "status": f"extrapolated from the simulated {s0}/{w0} steady state (the simulation exceeded its budget)",
        "coordination_read_units_per_hour": round(read, 1),
        "coordination_write_units_per_hour": round(write, 1),
        "coordination_dollars_per_month": round(dollars_per_month(read, write), 2),
        "steady_read_units_per_s": round(read / 3600, 1),
        "steady_write_units_per_s": round(write / 3600, 1),
    }


def _money(v: float) -> str:
    return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"


def _peaks(shape: dict[str, Any], kind: str) -> str:
    """Start / steady / scale-out peak units per second of ``kind`` (read or write)."""
    sections = (shape.get("start"), shape.get("steady"), shape.get("scale_out"))
    return " / ".join(
        f"{s['peak'][f'lease_table_{kind}_units_per_s']:,.0f}" if s and "peak" in s else "-" for s in sections
    )


def markdown(results: dict[str, Any]) -> str:
    """One row per shape, next to the KCL 3.x model."""
    lines = [
        "| shards / workers | how | read units/h | write units/h | $/month (coordination) | checkpoints $/month "
        "| peak read u/s (start / steady / 2x scale-out) | peak write u/s (start / steady / 2x scale-out) "
        "| KCL 3.x $/month (model) | KCL 3.x steady read / write u/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in results["shapes"]:
        s, w = shape["shards"], shape["workers"]
        st, ex = shape.get("steady"), shape.get("extrapolated")
        if shape.get("status") == "simulated" and st:
            how = (
                f"simulated ({st['window_s']:.0f} s steady) | {st['coordination_read_units_per_hour']:,.0f} | "
                f"{st['coordination_write_units_per_hour']:,.0f} | {_money(st['coordination_dollars_per_month'])} | "
                f"{_money(st['checkpoint_dollars_per_month'])} | {_peaks(shape, 'read')} | {_peaks(shape, 'write')}"
            )
        elif ex:
            how = (
                f"extrapolated | {ex['coordination_read_units_per_hour']:,.0f} | "
                f"{ex['coordination_write_units_per_hour']:,.0f} | {_money(ex['coordination_dollars_per_month'])} | - | "
                f"- / {ex['steady_read_units_per_s']:,.0f} / - | - / {ex['steady_write_units_per_s']:,.0f} / -"
            )
        else:
            how = f"{shape.get('status')} | - | - | - | - | - | -"
        kcl = kcl_cost(s, w)
        steady = f"{kcl['steady_read_units_per_second']:,.1f} / {kcl['steady_write_units_per_second']:,.1f}"
        lines.append(f"| {s:,} / {w:,} | {how} | {_money(kcl['dollars_per_month'])} | {steady} |")
    return "\n".join(lines) + "\n"
