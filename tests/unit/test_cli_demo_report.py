"""The demo's pictures (``make demo``): event labels never overprint each other or the title, and lag lines
are not drawn across the time a shard had no owner."""

from __future__ import annotations

import itertools
import math

import matplotlib
import pytest

from tools.demo_report import LagPoint, broken_series, label_lanes, lag_figure, ownership_figure
from tools.fleet.analysis import Run

matplotlib.use("Agg")

T0 = 1000.0
# Bursts of events as the demo has them: two starts 50 ms apart, three events within 1.5 s, one at the end.
EVENTS = [
    (T0 + t, label)
    for t, label in [
        (1.5, "start w1"),
        (16.30, "start w2"),
        (16.35, "start w3"),
        (28.5, "SIGTERM w3 after scale-in"),
        (44.0, "SIGTERM w1"),
        (44.6, "start w5"),
        (45.4, "SIGTERM w2"),
        (62.2, "SIGKILL w4"),
        (84.3, "producer stopped"),
    ]
]
LABELS = {
    "start w1",
    "start w2",
    "start w3",
    "SIGTERM w3",
    "SIGTERM w1",
    "start w5",
    "SIGTERM w2",
    "SIGKILL w4",
}


def test_label_lanes_put_overlapping_labels_in_different_rows() -> None:
    assert label_lanes([0, 1, 2, 10], [3, 3, 3, 3]) == [0, 1, 2, 0]
    assert label_lanes([0, 5, 10], [4, 4, 4]) == [0, 0, 0]


def test_broken_series_breaks_at_an_owner_change_and_at_a_gap() -> None:
    xs, ys = broken_series([(0, 1, "a"), (2, 1, "a"), (4, 1, "b"), (14, 9, "b"), (16, 0, "b")], max_gap=5)
    assert [math.isnan(x) for x in xs] == [False, False, True, False, True, False, False]
    assert ys[-2:] == [9, 0]


def _texts(fig) -> tuple[list, list]:
    renderer = fig.canvas.get_renderer()
    title = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_title()]
    labels = [
        (t.get_text().strip(), t.get_window_extent(renderer))
        for ax in fig.axes
        for t in ax.texts
        if t.get_text().strip()
    ]
    return title, labels


def _assert_no_overprint(fig) -> None:
    fig.canvas.draw()
    titles, labels = _texts(fig)
    assert {text for text, _ in labels} >= LABELS
    for (a, box_a), (b, box_b) in itertools.combinations(labels, 2):
        assert not box_a.overlaps(box_b), f"{a!r} overprints {b!r}"
    for text, box in labels:
        assert not any(box.overlaps(t) for t in titles), f"{text!r} overprints the title"


def test_ownership_labels_do_not_overprint() -> None:
    runs = {
        "shardId-0": [
            Run("shardId-0", "w1", 1, T0 + 2, T0 + 16.4),
            Run("shardId-0", "w5", 2, T0 + 45, T0 + 84),
        ],
        "shardId-1": [
            Run("shardId-1", "w4", 1, T0 + 2, T0 + 62.2),
            Run("shardId-1", "w5", 2, T0 + 72, T0 + 84),
        ],
    }
    _assert_no_overprint(ownership_figure(runs, EVENTS, T0, "demo: shard ownership"))


def test_lag_labels_do_not_overprint_and_lines_skip_the_unowned_gap() -> None:
    points = []
    for t in range(2, 84, 2):
        if 62 <= t < 72:
            continue  # shard 1's owner was SIGKILLed at 62 s; the next one took it at 72 s
        points.append(LagPoint(T0 + t, "shardId-1", "w4" if t < 62 else "w5", 9600.0 if t == 72 else 0.0))
    latency = {"shardId-1": [(T0 + t / 2, 0.1) for t in range(4, 168) if not 124 <= t < 143]}
    fig = lag_figure(points, latency, EVENTS, T0, "demo: lag per shard")
    _assert_no_overprint(fig)
    for ax in fig.axes:
        for line in ax.get_lines():
            xs = list(line.get_xdata())
            if len(xs) < 3:
                continue  # the dashed event lines
            drawn = [(a, b) for a, b in itertools.pairwise(xs) if not (math.isnan(a) or math.isnan(b))]
            assert drawn and not [(a, b) for a, b in drawn if a < 62 < 71 < b], "a line crosses the gap"
            assert not [(a, b) for a, b in drawn if b - a > 5]


@pytest.mark.parametrize("n", [1, 12])
def test_many_simultaneous_events_still_do_not_overprint(n: int) -> None:
    events = [(T0 + 30 + i * 0.01, f"start w{i}") for i in range(n)]
    runs = {"shardId-0": [Run("shardId-0", "w0", 1, T0, T0 + 60)]}
    fig = ownership_figure(runs, events, T0, "t")
    fig.canvas.draw()
    _, labels = _texts(fig)
    assert len(labels) == n
    for (a, box_a), (b, box_b) in itertools.combinations(labels, 2):
        assert not box_a.overlaps(box_b), f"{a!r} overprints {b!r}"
