"""``tools.fleet.scenarios.formed``: when the fleet scenarios and the demo count a fleet as formed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from tools.fleet.runner import Fleet, FleetSettings
from tools.fleet.scenarios import formed


@dataclass
class _Owners:
    """Stands in for a fleet: who delivered each shard last."""

    settings: FleetSettings
    owners: dict[str, list[str]]

    def last_owners(self, before: float) -> dict[str, list[str]]:
        return self.owners


def _formed(shards: int, owners: dict[str, list[str]], workers: set[str]) -> bool:
    fleet: Any = _Owners(FleetSettings(shards=shards), owners)
    return formed(cast(Fleet, fleet), workers)


def test_every_worker_its_share_of_every_shard_is_formed() -> None:
    assert _formed(4, {"a": ["0", "1"], "b": ["2", "3"]}, {"a", "b"})
    assert _formed(4, {"a": ["0", "1"], "b": ["2"], "c": ["3"]}, {"a", "b", "c"})  # 4 = 1 + 1 + 2


def test_a_shard_no_live_worker_delivers_is_not_formed() -> None:
    assert not _formed(4, {"a": ["0", "1"], "b": ["2"]}, {"a", "b"})
    assert not _formed(4, {"a": ["0", "1"], "b": ["2"], "dead": ["3"]}, {"a", "b"})


def test_a_worker_short_of_its_share_or_over_it_is_not_formed() -> None:
    assert not _formed(4, {"a": ["0", "1", "2"], "b": ["3"]}, {"a", "b"})
    assert not _formed(4, {"a": ["0", "1", "2", "3"]}, {"a", "b"})


def test_with_more_workers_than_shards_one_shard_each_and_the_rest_standby() -> None:
    assert _formed(2, {"a": ["0"], "b": ["1"]}, {"a", "b", "c"})
    assert not _formed(2, {"a": ["0", "1"]}, {"a", "b", "c"})
