"""Each stream's registered fan-out consumer, registered again when a subscription finds it gone (the stream
was deleted and created again), at most once per interval per stream however many shards ask, on made-up
time."""

from __future__ import annotations

from consumer.errors import MissingResourceError
from consumer.lifecycle.fanout_start import FanOutConsumers


class _Api:
    def __init__(self) -> None:
        self.generation = 0
        self.calls = 0
        self.missing = False

    def register_consumer(self, stream: str, name: str) -> str:
        self.calls += 1
        if self.missing:
            raise MissingResourceError(f"Kinesis stream {stream!r} does not exist")
        return f"arn:{stream}/{name}/{self.generation}"

    def subscribe(self, *args: object, **kw: object) -> object:  # not used here
        raise AssertionError


def test_a_gone_consumer_is_registered_again_once_for_every_shard_that_asks() -> None:
    api, now = _Api(), [0.0]
    consumers = FanOutConsumers(api, "app", interval=10.0, now=lambda: now[0])  # type: ignore[arg-type]
    first = consumers.ready("s")
    api.generation = 1  # the stream was created again: a new consumer ARN
    assert consumers.renewed("s", first) == "arn:s/app/1"
    assert consumers.renewed("s", first) == "arn:s/app/1"  # another shard: the renewal already made
    assert consumers.arn("s") == "arn:s/app/1"
    assert api.calls == 2  # ready, then one renewal


def test_renewals_are_spaced_and_a_missing_stream_leaves_the_error_standing() -> None:
    api, now = _Api(), [0.0]
    consumers = FanOutConsumers(api, "app", interval=10.0, now=lambda: now[0])  # type: ignore[arg-type]
    arn = consumers.ready("s")
    api.missing = True  # deleted, not created again yet
    assert consumers.renewed("s", arn) is None
    now[0] = 5.0
    assert consumers.renewed("s", arn) is None and api.calls == 2  # within the interval: not asked again
    api.missing, api.generation, now[0] = False, 1, 10.5
    assert consumers.renewed("s", arn) == "arn:s/app/1"
