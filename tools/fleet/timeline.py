"""Shard-ownership timelines as PNG: shards on the y-axis, time on the x-axis, one colour per worker."""

from __future__ import annotations

from pathlib import Path

import matplotlib

from tools.fleet.analysis import Run

__all__ = ["plot_timeline"]


def plot_timeline(
    runs: dict[str, list[Run]], events: list[tuple[float, str]], t0: float, title: str, path: Path
) -> None:
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    shards = sorted(runs)
    workers = sorted({r.worker for rs in runs.values() for r in rs})
    cmap = plt.get_cmap("tab10")
    colour = {w: cmap(i % 10) for i, w in enumerate(workers)}
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(shards) + 2.2))
    for y, shard in enumerate(shards):
        for r in runs[shard]:
            ax.broken_barh(
                [(r.first - t0, max(r.last - r.first, 0.05))], (y - 0.4, 0.8), color=colour[r.worker]
            )
    for t, label in events:
        if label.startswith(("SIG", "start", "split")):
            ax.axvline(t - t0, color="black", lw=0.8, ls="--")
            ax.text(t - t0, len(shards) - 0.4, label, rotation=90, fontsize=7, va="top", ha="right")
    ax.set_yticks(range(len(shards)))
    ax.set_yticklabels([s.replace("shardId-", "") for s in shards], fontsize=8)
    ax.set_xlabel("seconds")
    ax.set_ylabel("shard")
    ax.set_title(title)
    handles = [Rectangle((0, 0), 1, 1, color=colour[w]) for w in workers]
    ax.legend(handles, workers, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
