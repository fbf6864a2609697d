"""The demo's figures and pictures, from the files it wrote and the Spark step's counts (the ownership
timeline is also the fleet benchmark's)."""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from tools.demo_dev import Crash
from tools.fleet.analysis import Delivery, Run, analyze, ownership_runs, percentiles
from tools.fleet.runner import Fleet

__all__ = ["Crash", "format_summary", "lag_figure", "ownership_figure", "raw_counts", "save", "write_report"]

Events = Sequence[tuple[float, str]]  # fleet events: (epoch seconds, label)


def raw_counts(raw_root: Path) -> dict[str, int]:
    """Objects, lines and distinct records (stream, shard, sequence, sub-sequence) under ``raw_root``."""
    objects = lines = 0
    keys: set[tuple[str, str, str, int]] = set()
    for path in raw_root.rglob("*.jsonl.gz"):
        objects += 1
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for r in map(json.loads, filter(str.strip, f)):
                lines += 1
                keys.add((r["stream"], r["shard_id"], r["sequence_number"], int(r["sub_sequence_number"])))
    return {"objects": objects, "lines": lines, "distinct": len(keys), "duplicates": lines - len(keys)}


@dataclass(frozen=True)
class LagPoint:
    """One EMF document's ``MillisBehindLatest`` (the maximum over that flush interval) for one shard."""

    t: float  # epoch seconds
    shard: str
    worker: str
    millis_behind: float


def lag_points(docs: Iterable[Mapping[str, Any]]) -> list[LagPoint]:
    """Every per-shard ``MillisBehindLatest`` in the workers' EMF lines (``docs``)."""
    out: list[LagPoint] = []
    for doc in docs:
        with contextlib.suppress(ValueError, KeyError):  # another metric
            t, lag = doc["_aws"]["Timestamp"] / 1000, float(doc["MillisBehindLatest"])
            out.append(LagPoint(t, doc["Shard"], doc.get("WorkerId", "?"), lag))
    return sorted(out, key=lambda p: p.t)


def delivery_latency(
    produced: Iterable[tuple[str, str, float]], deliveries: Iterable[Delivery], bucket: float = 0.5
) -> dict[str, list[tuple[float, float]]]:
    """shard -> [(time, worst put-to-delivery latency in seconds)] per ``bucket`` seconds of delivery time."""
    put_at = {(shard, seq): t for shard, seq, t in produced}
    worst: dict[str, dict[int, float]] = defaultdict(dict)
    for d in deliveries:
        if (t_put := put_at.get((d.shard, d.sequence))) is not None:
            slot = int(d.t // bucket)
            worst[d.shard][slot] = max(worst[d.shard].get(slot, 0.0), d.t - t_put)
    return {shard: [(s * bucket, v) for s, v in sorted(slots.items())] for shard, slots in worst.items()}


_EVENT_PREFIXES = ("SIG", "start", "split", "producer stopped")
_LANE_HEIGHT = 0.075  # axes fraction per row of event labels
_LABEL_PT = 7
_LABEL_BOX: Final = {"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 0.5}
_LABEL_STYLE: Final = {"fontsize": _LABEL_PT, "va": "top", "bbox": _LABEL_BOX}


def label_lanes(xs: Sequence[float], widths: Sequence[float]) -> list[int]:
    """A row (0 = top) per label ``[xs[i], xs[i] + widths[i]]`` (``xs`` sorted), none overlapping in a row."""
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
    points: Sequence[tuple[float, float, str]], max_gap: float | None = None
) -> tuple[list[float], list[float]]:
    """x, y of ``(t, value, owner)`` points, NaN-broken where the owner changes or ``max_gap`` is exceeded
    (by default 2.5 times the median spacing)."""
    if max_gap is None:
        diffs = sorted(b - a for a, b in itertools.pairwise(t for t, _, _ in points) if b > a)
        max_gap = 2.5 * diffs[len(diffs) // 2] if diffs else math.inf
    xs: list[float] = []
    ys: list[float] = []
    for i, (t, value, owner) in enumerate(points):
        if i and (owner != points[i - 1][2] or t - points[i - 1][0] > max_gap):
            xs.append(math.nan)
            ys.append(math.nan)
        xs.append(t)
        ys.append(value)
    return xs, ys


def _draw_events(ax: Any, events: Events, t0: float, *, labels: bool) -> int:
    """Dashed lines at the events and, with ``labels``, their names in rows inside ``ax`` (so never over the
    title); returns the rows used."""
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
        left_of = x + width > right  # a label at the right edge goes left of its line, not over the legend
        spans.append((x - width if left_of else x, width, x, text, "right" if left_of else "left"))
    spans.sort()
    lanes = label_lanes([start for start, *_ in spans], [width for _, width, *_ in spans])
    for (_, _, x, text, align), lane in zip(spans, lanes, strict=True):
        y = 0.985 - lane * _LANE_HEIGHT
        ax.text(x, y, f" {text} ", transform=ax.get_xaxis_transform(), ha=align, **_LABEL_STYLE)
    return max(lanes) + 1


def _frame(ax: Any, ts: Iterable[float], events: Events, t0: float, low: float, high: float) -> None:
    """The x range of ``ts`` and the events, the events drawn, and y room above ``high`` for their labels."""
    every = [0.0, *ts, *(t - t0 for t, _ in events)]
    pad = 0.02 * (max(every) - min(every)) or 1.0
    ax.set_xlim(min(every) - pad, max(every) + pad)
    band = min(0.6, _draw_events(ax, events, t0, labels=True) * _LANE_HEIGHT + 0.03)
    ax.set_ylim(low, low + (high - low) / (1 - band))


def ownership_figure(runs: Mapping[str, list[Run]], events: Events, t0: float, title: str) -> Figure:
    """Shards on the y-axis, time on the x-axis, one colour per worker, fleet events labelled in rows."""
    shards = sorted(runs)
    workers = sorted({r.worker for rs in runs.values() for r in rs})
    colour = {w: colormaps["tab10"](i % 10) for i, w in enumerate(workers)}
    fig = Figure(figsize=(12, 0.45 * len(shards) + 2.6))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for y, shard in enumerate(shards):
        for r in runs[shard]:
            span = (r.first - t0, max(r.last - r.first, 0.05))
            ax.broken_barh([span], (y - 0.4, 0.8), color=colour[r.worker])
    ends = [t - t0 for rs in runs.values() for r in rs for t in (r.first, r.last)]
    _frame(ax, ends, events, t0, -0.6, len(shards) - 0.4)
    ax.set_yticks(range(len(shards)), [s.replace("shardId-", "") for s in shards], fontsize=8)
    ax.set(xlabel="seconds since the start", ylabel="shard", title=title)
    handles = [Rectangle((0, 0), 1, 1, color=colour[w]) for w in workers]
    ax.legend(handles, workers, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


def save(fig: Figure, path: Path) -> None:
    """Save ``fig`` as the PNG ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def lag_figure(
    points: list[LagPoint],
    latency: Mapping[str, list[tuple[float, float]]],
    events: Events,
    t0: float,
    title: str,
) -> Figure:
    """Two panels over one time axis, a line per shard, fleet events dashed: ``MillisBehindLatest`` (seconds)
    from the workers' EMF lines, and put-to-delivery latency from the journals. Lines break where a shard had
    no owner (a gap in the measurements, or another worker's points)."""
    fig = Figure(figsize=(12, 6.4))
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    shards = sorted({p.shard for p in points} | set(latency))
    for i, shard in enumerate(shards):
        label = f"shard {int(shard.rsplit('-', 1)[-1])}"  # shardId-000000000001: shard 1
        style = {"color": colormaps["tab10"](i % 10), "label": label, "lw": 1.2}
        lag = [(p.t - t0, p.millis_behind / 1000, p.worker) for p in points if p.shard == shard]
        top.plot(*broken_series(lag), marker="o", ms=3, **style)
        series = [(t - t0, v, "") for t, v in latency.get(shard, [])]
        bottom.plot(*broken_series(series), **style)
    times = [p.t - t0 for p in points] + [t - t0 for s in latency.values() for t, _ in s]
    _frame(top, times, events, t0, 0.0, max(0.5, top.dataLim.y1) * 1.05)
    _draw_events(bottom, events, t0, labels=False)
    bottom.set_ylim(0, max(0.5, bottom.dataLim.y1) * 1.1)
    top.set(ylabel="MillisBehindLatest (s)", title=title)
    bottom.set(ylabel="put -> delivered (s)", xlabel="seconds since the demo started")
    if shards:
        top.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


_SUMMARY = """\
{title}
{rule}
records produced          {records[produced]:,}
deliveries                {records[delivered]:,}  ({records[redelivered]:,} redelivered, {records[lost]:,} lost)
raw lines in S3           {raw[lines]:,}  ({raw[duplicates]:,} duplicates, {raw[objects]:,} objects)
curated rows              {curated[rows]:,}  {once}
{table:<26}{processor[check][rows]:,} rows  {newest}
  writes refused          {processor[refused][older_than_stored]:,} older than the stored record \
({processor[refused][older_after_crash]:,} after the SIGKILL), {processor[refused][stale_epoch]:,} stale epoch
  stale-epoch probe       {fence}
{planned:<26}{gaps}
failover after SIGKILL    {failover_s}  (lease duration {settings[lease_duration_s]:g}s)
dead-lettered             {dead_lettered:,}
wall time                 {wall_time_s:.0f}s
report                    {report}/ (summary.json, ownership.png, lag.png)"""


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def format_summary(summary: Mapping[str, Any]) -> str:
    """The summary block printed at the end of the demo (and shown verbatim in the README)."""
    c, h, p = summary["curated"], summary["handoffs"], summary["processor"]
    t, probe = p["check"], p["probe"]
    once = "(= distinct produced: each record exactly once)"
    if not c["exactly_once"]:
        once = f"(MISMATCH: {c['missing']:,} missing, {c['unexpected']:,} unexpected, {c['duplicate_rows']:,} duplicated)"
    newest = f"(= {t['keys_produced']:,} keys produced; each holds its key's newest record, checked)"
    if not t["each_key_newest"]:
        newest = (
            f"(MISMATCH: {t['keys_produced']:,} keys produced, {t['missing_keys']:,} missing, "
            f"{t['unexpected_keys']:,} unexpected, {t['not_newest']:,} not the newest)"
        )
    fence = "not made: the table is empty"
    if probe["probed"]:
        fence = (
            f"{'refused' if probe['refused'] else 'ACCEPTED'}, "
            f"{'item unchanged' if probe['item_unchanged'] else 'ITEM CHANGED'}  "
            f"(epoch {probe['write_epoch']} over {probe['stored_epoch']}, after the run)"
        )
    report, cwd = Path(summary["report_dir"]), Path.cwd()
    report = report.relative_to(cwd) if report.is_relative_to(cwd) else report
    title = f"demo summary: {summary['environment']} config, stream {summary['names']['streams'][0]} "
    title += f"({summary['settings']['shards']} shards)"
    return _SUMMARY.format(
        **summary,
        title=title,
        rule="-" * len(title),
        once=once,
        table=f"{Path(p['project']).name} table",
        newest=newest,
        fence=fence,
        planned=f"planned hand-offs ({h['n']})",
        gaps=f"gap p50 {_s(h['p50'])}  p99 {_s(h['p99'])}  max {_s(h['max'])}",
        failover_s=_s(summary["failover"]["max"]),
        report=report,
    )


def write_report(
    context: Mapping[str, Any], fleet: Fleet, crash: Crash, drained: bool, out: Path
) -> dict[str, Any]:
    """Analyse the run, draw ``ownership.png`` and ``lag.png``, write ``summary.json`` (``context`` as is) into
    ``out``. ``ok``: nothing lost, the fleet drained, every record curated exactly once, the processor's table
    holds each key's newest record and its fence refused the probe without a change."""
    deliveries, began = fleet.deliveries(), fleet.began
    produced = [(s, q) for s, q, _ in fleet.produced]
    result = analyze(produced, deliveries, {crash.worker: crash.at}, {crash.worker: list(crash.shards)})
    planned: list[dict[str, Any]] = []
    failovers: list[dict[str, Any]] = []
    for m in result["moves"]:  # a failover: a move away from the killed worker after the kill
        (failovers if m["source"] == crash.worker and m["at"] >= crash.at else planned).append(m)
    curated, processor = context["curated"], context["processor"]
    runs = ownership_runs(deliveries)
    save(ownership_figure(runs, fleet.events, began, "demo: shard ownership"), out / "ownership.png")
    lag = lag_figure(
        lag_points(fleet.lines("*.stdout.jsonl")),
        delivery_latency(fleet.produced, deliveries),
        fleet.events,
        began,
        "demo: lag per shard (top: MillisBehindLatest from the workers' EMF metrics)",
    )
    save(lag, out / "lag.png")
    summary: dict[str, Any] = {
        **context,
        "records": {k: result[k] for k in ("produced", "delivered", "distinct_delivered", "lost")}
        | {"redelivered": result["extra_deliveries"], "drained": drained},
        "handoffs": {**percentiles([m["gap"] for m in planned]), "moves": planned},
        "failover": {**result["signal_to_new_owner_first_record_s"], **asdict(crash), "moves": failovers},
        "concurrent_owner_overlaps": result["concurrent_owner_overlaps"],
        "events": [{"t": round(t - began, 3), "event": label} for t, label in fleet.events],
        "report_dir": str(out),
        "wall_time_s": round(time.time() - began, 1),
    }
    fenced = all(processor["probe"].get(k) for k in ("probed", "refused", "item_unchanged"))
    newest = processor["check"]["each_key_newest"]
    summary["ok"] = bool(result["lost"] == 0 and drained and curated["exactly_once"] and newest and fenced)
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary
