"""Extrapolation for shapes too slow to simulate, and the markdown tables of the coordination benchmark."""

from __future__ import annotations

from typing import Any

from bench.coordination.kcl_model import kcl_cost
from tools.coordination.billing import dollars_per_month

__all__ = ["extrapolate", "markdown"]

_PAGED = ("Scan", "Query")  # their units grow with the items they read


def extrapolate(base: dict[str, Any], shards: int, workers: int) -> dict[str, Any]:
    """The steady bill at ``shards``/``workers`` from a simulated shape's per-worker request rates, scaling
    the units of each Scan/Query page with the table's item count (S + W) and every other request's not."""
    s0, w0 = base["shards"], base["workers"]
    growth = (shards + workers) / (s0 + w0)
    read = write = 0.0
    for name, row in base["steady"]["by_operation"].items():
        if name.startswith("checkpoint_table.UpdateItem"):
            continue
        per_worker = workers / w0
        paged = any(op in name for op in _PAGED)
        read += row["read_units_per_hour"] * per_worker * (growth if paged else 1)
        write += row["write_units_per_hour"] * per_worker
    return {
        "status": f"extrapolated from the simulated {s0}/{w0} steady state (the simulation exceeded its budget)",
        "coordination_read_units_per_hour": round(read, 1),
        "coordination_write_units_per_hour": round(write, 1),
        "coordination_dollars_per_month": round(dollars_per_month(read, write), 2),
        "steady_read_units_per_s": round(read / 3600, 1),
        "steady_write_units_per_s": round(write / 3600, 1),
    }


def _peak(section: dict[str, Any] | None, kind: str) -> str:
    if not section or "peak" not in section:
        return "-"
    return f"{section['peak'][f'lease_table_{kind}_units_per_s']:,.0f}"


def _money(v: float | None) -> str:
    return "-" if v is None else (f"{v:,.2f}" if v < 100 else f"{v:,.0f}")


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "| shards / workers | how | read units/h | write units/h | $/month (coordination) | checkpoints $/month "
        "| peak read u/s (start / steady / 2x scale-out) | peak write u/s (start / steady / 2x scale-out) "
        "| KCL 3.x $/month (model) | KCL 3.x steady read / write u/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in results["shapes"]:
        s, w = shape["shards"], shape["workers"]
        kcl = kcl_cost(s, w)
        kcl_cells = (
            f"{_money(kcl['dollars_per_month'])} | {kcl['steady_read_units_per_second']:,.1f} / "
            f"{kcl['steady_write_units_per_second']:,.1f}"
        )
        if shape.get("status") == "simulated":
            st = shape["steady"]
            lines.append(
                f"| {s:,} / {w:,} | simulated ({st['window_s']:.0f} s steady) | "
                f"{st['coordination_read_units_per_hour']:,.0f} | {st['coordination_write_units_per_hour']:,.0f} | "
                f"{_money(st['coordination_dollars_per_month'])} | {_money(st['checkpoint_dollars_per_month'])} | "
                f"{_peak(shape.get('start'), 'read')} / {_peak(st, 'read')} / {_peak(shape.get('scale_out'), 'read')} | "
                f"{_peak(shape.get('start'), 'write')} / {_peak(st, 'write')} / "
                f"{_peak(shape.get('scale_out'), 'write')} | {kcl_cells} |"
            )
        else:
            ex = shape.get("extrapolated")
            if ex is None:
                lines.append(
                    f"| {s:,} / {w:,} | {shape.get('status')} | - | - | - | - | - | - | {kcl_cells} |"
                )
                continue
            lines.append(
                f"| {s:,} / {w:,} | extrapolated | {ex['coordination_read_units_per_hour']:,.0f} | "
                f"{ex['coordination_write_units_per_hour']:,.0f} | {_money(ex['coordination_dollars_per_month'])} | - | "
                f"- / {ex['steady_read_units_per_s']:,.0f} / - | - / {ex['steady_write_units_per_s']:,.0f} / - | "
                f"{kcl_cells} |"
            )
    return "\n".join(lines) + "\n"
