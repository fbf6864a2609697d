"""The demo's figures and pictures: raw-data counts, the lag plot from the workers' EMF output, the summary;
the ownership timeline is also the fleet benchmark's (`tools.fleet.run`).

Pure functions of files the demo already wrote (journals, worker stdout, downloaded raw objects) plus the
Spark step's counts, so they can be re-run on a kept work folder.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

from tools.fleet.analysis import Delivery, Run, analyze, ownership_runs, percentiles
from tools.fleet.runner import Fleet

__all__ = [
    "Crash",
    "LagPoint",
    "broken_series",
    "delivery_latency",
    "format_summary",
    "gap_figures",
    "label_lanes",
    "lag_figure",
    "lag_points",
    "ownership_figure",
    "plot_lag",
    "plot_ownership",
    "raw_counts",
    "split_moves",
    "write_report",
]


def raw_counts(raw_root: Path) -> dict[str, int]:
    """Objects, lines and distinct records (stream, shard, sequence, sub-sequence) under ``raw_root``."""
    objects = lines = 0
    keys: set[tuple[str, str, str, int]] = set()
    for path in sorted(raw_root.rglob("*.jsonl.gz")):
        objects += 1
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                lines += 1
                r = json.loads(line)
                keys.add((r["stream"], r["shard_id"], r["sequence_number"], int(r["sub_sequence_number"])))
    return {"objects": objects, "lines": lines, "distinct": len(keys), "duplicates": lines - len(keys)}


@dataclass(frozen=True)
class LagPoint:
    """One EMF document's ``MillisBehindLatest`` (the maximum over that flush interval) for one shard."""

    t: float  # epoch seconds
    shard: str
    worker: str
    millis_behind: float


def lag_points(stdout_files: Iterable[Path]) -> list[LagPoint]:
    """Every per-shard ``MillisBehindLatest`` in the workers' EMF lines (other stdout lines are skipped)."""
    out: list[LagPoint] = []
    for path in stdout_files:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if "MillisBehindLatest" not in line:
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                continue  # a line cut short by SIGKILL
            if "Shard" not in doc or "_aws" not in doc:
                continue
            out.append(
                LagPoint(
                    t=doc["_aws"]["Timestamp"] / 1000,
                    shard=str(doc["Shard"]),
                    worker=str(doc.get("WorkerId", "?")),
                    millis_behind=float(doc["MillisBehindLatest"]),
                )
            )
    return sorted(out, key=lambda p: p.t)


def delivery_latency(
    produced: Iterable[tuple[str, str, float]], deliveries: Iterable[Delivery], bucket: float = 0.5
) -> dict[str, list[tuple[float, float]]]:
    """shard -> [(time, worst put-to-delivery latency in seconds)] per ``bucket`` seconds of delivery time."""
    put_at = {(shard, seq): t for shard, seq, t in produced}
    worst: dict[str, dict[int, float]] = {}
    for d in deliveries:
        t_put = put_at.get((d.shard, d.sequence))
        if t_put is None:
            continue
        slot = int(d.t // bucket)
        per_shard = worst.setdefault(d.shard, {})
        per_shard[slot] = max(per_shard.get(slot, 0.0), d.t - t_put)
    return {
        shard: [(slot * bucket, latency) for slot, latency in sorted(slots.items())]
        for shard, slots in worst.items()
    }


def _shard_label(shard: str) -> str:
    digits = shard.rsplit("-", 1)[-1]
    return f"shard {int(digits)}" if digits.isdigit() else shard


_EVENT_PREFIXES = ("SIG", "start", "split", "producer stopped")
_LANE_HEIGHT = 0.075  # axes fraction per row of event labels
_LABEL_PT = 7


def label_lanes(xs: Sequence[float], widths: Sequence[float]) -> list[int]:
    """A row (0 = top) for each label so that labels sharing a row do not overlap; label ``i`` spans
    ``[xs[i], xs[i] + widths[i]]`` and ``xs`` is sorted."""
    ends: list[float] = []
    lanes = []
    for x, width in zip(xs, widths, strict=True):
        lane = next((i for i, end in enumerate(ends) if x >= end), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = x + width
        lanes.append(lane)
    return lanes


def broken_series(
    points: Sequence[tuple[float, float, str]], max_gap: float
) -> tuple[list[float], list[float]]:
    """x and y for one line from ``(t, value, owner)`` points, broken (NaN) where the owner changes or
    nothing was measured for longer than ``max_gap``: no line is drawn across a time nobody owned the shard."""
    xs: list[float] = []
    ys: list[float] = []
    for i, (t, value, owner) in enumerate(points):
        if i and (owner != points[i - 1][2] or t - points[i - 1][0] > max_gap):
            xs.append(math.nan)
            ys.append(math.nan)
        xs.append(t)
        ys.append(value)
    return xs, ys


def _usual_gap(ts: Sequence[float]) -> float:
    """Points more than this far apart have a hole between them (2.5 x the median spacing)."""
    diffs = sorted(b - a for a, b in itertools.pairwise(ts) if b > a)
    return 2.5 * diffs[len(diffs) // 2] if diffs else math.inf


def _draw_events(ax: Any, events: Sequence[tuple[float, str]], t0: float, *, labels: bool) -> int:
    """Dashed lines at the fleet events and, with ``labels``, their names in non-overlapping rows at the
    top of ``ax`` (inside it, so they never reach the title). Returns the number of rows used."""
    shown = sorted(
        (t - t0, label.split(" after ")[0]) for t, label in events if label.startswith(_EVENT_PREFIXES)
    )
    for x, _ in shown:
        ax.axvline(x, color="black", lw=0.8, ls="--")
    if not labels or not shown:
        return 0
    left, right = ax.get_xlim()
    axis_px = ax.get_window_extent().width * 0.95  # tight_layout narrows the axes a little
    char = _LABEL_PT * 0.62 / 72 * ax.figure.dpi  # average glyph width in pixels
    spans = []
    for x, text in shown:
        width = (len(text) + 2) * char / axis_px * (right - left)
        at_right_edge = x + width > right  # such a label goes left of its line, not over the legend
        spans.append(
            (x - width if at_right_edge else x, width, x, text, "right" if at_right_edge else "left")
        )
    spans.sort()
    lanes = label_lanes([start for start, *_ in spans], [width for _, width, *_ in spans])
    for (_, _, x, text, align), lane in zip(spans, lanes, strict=True):
        ax.text(
            x,
            0.985 - lane * _LANE_HEIGHT,
            f" {text} ",
            transform=ax.get_xaxis_transform(),
            fontsize=_LABEL_PT,
            va="top",
            ha=align,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 0.5},
        )
    return max(lanes) + 1


def _headroom(ax: Any, rows: int, low: float, high: float) -> None:
    """Y limits with room above ``high`` for ``rows`` rows of event labels."""
    band = min(0.6, rows * _LANE_HEIGHT + 0.03)
    ax.set_ylim(low, low + (high - low) / (1 - band))


def _time_range(ts: Iterable[float], events: Sequence[tuple[float, str]], t0: float) -> tuple[float, float]:
    every = [*ts, *(t - t0 for t, _ in events)]
    if not every:
        return 0.0, 1.0
    span = max(every) - min(0.0, *every)
    return min(0.0, *every) - 0.02 * span, max(every) + 0.02 * span


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ownership(
    runs: Mapping[str, list[Run]], events: list[tuple[float, str]], t0: float, title: str, path: Path
) -> None:
    """Shards on the y-axis, time on the x-axis, one colour per worker, fleet events labelled in rows."""
    _save(ownership_figure(runs, events, t0, title), path)


def ownership_figure(
    runs: Mapping[str, list[Run]], events: list[tuple[float, str]], t0: float, title: str
) -> Any:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    shards = sorted(runs)
    workers = sorted({r.worker for rs in runs.values() for r in rs})
    cmap = plt.get_cmap("tab10")
    colour = {w: cmap(i % 10) for i, w in enumerate(workers)}
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(shards) + 2.6))
    for y, shard in enumerate(shards):
        for r in runs[shard]:
            ax.broken_barh(
                [(r.first - t0, max(r.last - r.first, 0.05))], (y - 0.4, 0.8), color=colour[r.worker]
            )
    ends = [t for rs in runs.values() for r in rs for t in (r.first - t0, r.last - t0)]
    ax.set_xlim(*_time_range(ends, events, t0))
    rows = _draw_events(ax, events, t0, labels=True)
    _headroom(ax, rows, -0.6, len(shards) - 0.4)
    ax.set_yticks(range(len(shards)))
    ax.set_yticklabels([s.replace("shardId-", "") for s in shards], fontsize=8)
    ax.set_xlabel("seconds since the start")
    ax.set_ylabel("shard")
    ax.set_title(title)
    handles = [Rectangle((0, 0), 1, 1, color=colour[w]) for w in workers]
    ax.legend(handles, workers, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


def plot_lag(
    points: list[LagPoint],
    latency: Mapping[str, list[tuple[float, float]]],
    events: list[tuple[float, str]],
    t0: float,
    title: str,
    path: Path,
) -> None:
    """Two panels over the same time axis, one line per shard, fleet events as dashed lines:
    ``MillisBehindLatest`` from the workers' EMF lines (seconds), and put-to-delivery latency from the journals.
    Lines break where a shard had no owner (a gap in the measurements, or another worker's points).
    """
    _save(lag_figure(points, latency, events, t0, title), path)


def lag_figure(
    points: list[LagPoint],
    latency: Mapping[str, list[tuple[float, float]]],
    events: list[tuple[float, str]],
    t0: float,
    title: str,
) -> Any:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 6.4), sharex=True)
    shards = sorted({p.shard for p in points} | set(latency))
    cmap = plt.get_cmap("tab10")
    top_max = bottom_max = 0.0
    for i, shard in enumerate(shards):
        mine = [(p.t - t0, p.millis_behind / 1000, p.worker) for p in points if p.shard == shard]
        style = {"color": cmap(i % 10), "label": _shard_label(shard), "lw": 1.2}
        xs, ys = broken_series(mine, _usual_gap([t for t, _, _ in mine]))
        top.plot(xs, ys, marker="o", ms=3, **style)
        series = [(t - t0, v, "") for t, v in latency.get(shard, [])]
        xs, ys = broken_series(series, _usual_gap([t for t, _, _ in series]))
        bottom.plot(xs, ys, **style)
        top_max = max([top_max, *(v for _, v, _ in mine)])
        bottom_max = max([bottom_max, *(v for _, v, _ in series)])
    times = [p.t - t0 for p in points] + [t - t0 for s in latency.values() for t, _ in s]
    top.set_xlim(*_time_range(times, events, t0))
    rows = _draw_events(top, events, t0, labels=True)
    _draw_events(bottom, events, t0, labels=False)
    _headroom(top, rows, 0.0, max(top_max, 0.5) * 1.05)
    bottom.set_ylim(0, max(bottom_max, 0.5) * 1.1)
    top.set_ylabel("MillisBehindLatest (s)")
    top.set_title(title)
    bottom.set_ylabel("put -> delivered (s)")
    bottom.set_xlabel("seconds since the demo started")
    if shards:
        top.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


def split_moves(
    moves: list[dict[str, Any]], killed: str | None, killed_at: float | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(planned hand-offs, failovers): a failover is a move away from the killed worker after the kill."""
    planned: list[dict[str, Any]] = []
    failovers: list[dict[str, Any]] = []
    for m in moves:
        crashed = (
            killed is not None and killed_at is not None and m["from"] == killed and m["at"] >= killed_at
        )
        (failovers if crashed else planned).append(m)
    return planned, failovers


def gap_figures(moves: list[dict[str, Any]]) -> dict[str, float | None]:
    return percentiles([float(m["gap_s"]) for m in moves])


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _s(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _processor_rows(processor: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The processor's own output (its table), when it has a table: rows, the newest-per-key check, the writes
    it refused and the stale-epoch probe."""
    if not processor or processor.get("table") is None:
        return []
    project = processor.get("project")
    label = f"{Path(project).name if project else processor['table']} table"
    check = processor.get("check")
    if check is None:
        return [(label, f"{_n(processor.get('rows', 0))} rows")]
    verdict = (
        f"(= {_n(check['keys_produced'])} keys produced; each holds its key's newest record, checked)"
        if check["each_key_newest"]
        else f"(MISMATCH: {_n(check['keys_produced'])} keys produced, {_n(check['missing_keys'])} missing, "
        f"{_n(check['unexpected_keys'])} unexpected, {_n(check['not_newest'])} not the newest)"
    )
    refused = processor["refused"]
    rows = [
        (label, f"{_n(check['rows'])} rows  {verdict}"),
        (
            "  writes refused",
            f"{_n(refused['older_than_stored'])} older than the stored record "
            f"({_n(refused['older_after_crash'])} after the SIGKILL), {_n(refused['stale_epoch'])} stale epoch",
        ),
    ]
    probe = processor.get("probe") or {}
    if probe.get("probed"):
        outcome = "refused" if probe["refused"] else "ACCEPTED"
        unchanged = "item unchanged" if probe["item_unchanged"] else "ITEM CHANGED"
        rows.append(
            (
                "  stale-epoch probe",
                f"{outcome}, {unchanged}  (epoch {probe['write_epoch']} over {probe['stored_epoch']}, "
                f"after the run)",
            )
        )
    return rows


def format_summary(summary: Mapping[str, Any]) -> str:
    """The summary block printed at the end of the demo (and shown verbatim in the README)."""
    records, raw, curated = summary["records"], summary["raw"], summary["curated"]
    planned, failover = summary["handoffs"], summary["failover"]
    names = summary["names"]
    width = 26
    rows = [
        ("records produced", f"{_n(records['produced'])}"),
        (
            "deliveries",
            f"{_n(records['delivered'])}  ({_n(records['redelivered'])} redelivered, {_n(records['lost'])} lost)",
        ),
        (
            "raw lines in S3",
            f"{_n(raw['lines'])}  ({_n(raw['duplicates'])} duplicates, {_n(raw['objects'])} objects)",
        ),
        (
            "curated rows",
            f"{_n(curated['rows'])}  "
            + (
                "(= distinct produced: each record exactly once)"
                if curated["exactly_once"]
                else f"(MISMATCH: {_n(curated['missing'])} missing, {_n(curated['unexpected'])} unexpected, "
                f"{_n(curated['duplicate_rows'])} duplicated)"
            ),
        ),
        *_processor_rows(summary.get("processor")),
        (
            f"planned hand-offs ({planned['n']})",
            f"gap p50 {_s(planned['p50'])}  p99 {_s(planned['p99'])}  max {_s(planned['max'])}",
        ),
        (
            "failover after SIGKILL",
            f"{_s(failover['max'])}  (lease duration {summary['settings']['lease_duration_s']:g}s)",
        ),
        ("dead-lettered", _n(summary["dead_lettered"])),
        ("wall time", f"{summary['wall_time_s']:.0f}s"),
    ]
    title = (
        f"demo summary: {summary['environment']} config, stream {names['streams'][0]} "
        f"({summary['settings']['shards']} shards)"
    )
    lines = [title, "-" * len(title)]
    lines += [f"{label:<{width}}{value}" for label, value in rows]
    report = Path(summary["report_dir"])
    with contextlib.suppress(ValueError):
        report = report.relative_to(Path.cwd())
    lines.append(f"{'report':<{width}}{report}/ (summary.json, ownership.png, lag.png)")
    return "\n".join(lines)


def _processor_ok(processor: Mapping[str, Any] | None) -> bool:
    """The processor's own output holds: its table has each key's newest record, and the stale-epoch probe
    was refused without changing the item (true when there is nothing of the kind to check)."""
    if not processor:
        return True
    check, probe = processor.get("check"), processor.get("probe") or {}
    if check is not None and not check["each_key_newest"]:
        return False
    return not probe.get("probed") or bool(probe["refused"] and probe["item_unchanged"])


@dataclass(frozen=True)
class Crash:
    """The worker the demo SIGKILLed, when (epoch seconds), and the shards it was delivering then."""

    worker: str
    at: float
    shards: tuple[str, ...]


def write_report(
    *,
    context: Mapping[str, Any],
    fleet: Fleet,
    crash: Crash,
    raw_root: Path,
    spark: Mapping[str, Any],
    drained: bool,
    began: float,
    out: Path,
) -> dict[str, Any]:
    """Analyse the run, draw ``ownership.png`` and ``lag.png`` and write ``summary.json`` into ``out``.

    ``context`` (environment, names, settings, ...) goes into the summary as it is; ``spark`` is the
    result of :mod:`tools.demo_spark`. ``ok`` is true when nothing was lost, the fleet drained, the
    curated table holds every produced record exactly once, and the processor's own table (``context``'s
    ``processor``, from :mod:`tools.demo_latest`) holds each key's newest record and refused the probe.
    """
    deliveries = fleet.deliveries()
    result = analyze(
        [(s, q) for s, q, _ in fleet.produced],
        deliveries,
        {crash.worker: crash.at},
        {crash.worker: list(crash.shards)},
    )
    planned, failovers = split_moves(result["moves"], crash.worker, crash.at)
    check = spark["check"]
    out.mkdir(parents=True, exist_ok=True)
    timeline, lag = out / "ownership.png", out / "lag.png"
    plot_ownership(ownership_runs(deliveries), fleet.events, began, "demo: shard ownership", timeline)
    plot_lag(
        lag_points(sorted(fleet.workdir.glob("*.stdout.jsonl"))),
        delivery_latency(fleet.produced, deliveries),
        fleet.events,
        began,
        "demo: lag per shard (top: MillisBehindLatest from the workers' EMF metrics)",
        lag,
    )
    summary: dict[str, Any] = {
        **context,
        "records": {
            "produced": result["produced"],
            "delivered": result["delivered"],
            "distinct_delivered": result["distinct_delivered"],
            "redelivered": result["extra_deliveries"],
            "lost": result["lost"],
            "drained": drained,
        },
        "raw": raw_counts(raw_root),
        "curated": {
            "rows": check["curated_rows"],
            "distinct_produced": check["produced_distinct"],
            "missing": check["produced_missing_from_curated"],
            "unexpected": check["curated_not_produced"],
            "duplicate_rows": check["curated_duplicate_rows"],
            "exactly_once": check["exactly_once"],
            "metrics_records": check["metrics_records"],
        },
        "handoffs": {**gap_figures(planned), "moves": planned},
        "failover": {
            **result["signal_to_new_owner_first_record_s"],
            "killed": crash.worker,
            "shards": list(crash.shards),
            "moves": failovers,
        },
        "concurrent_owner_overlaps": result["concurrent_owner_overlaps"],
        "spark": {k: spark[k] for k in ("compact", "aggregate", "seconds")},
        "events": [{"t": round(t - began, 3), "event": label} for t, label in fleet.events],
        "report_dir": str(out),
        "timeline_png": str(timeline),
        "lag_png": str(lag),
        "wall_time_s": round(time.time() - began, 1),
    }
    summary["ok"] = bool(
        result["lost"] == 0
        and drained
        and check["exactly_once"]
        and check["curated_rows"] == check["produced_distinct"]
        and _processor_ok(context.get("processor"))
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary
