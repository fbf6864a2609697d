"""``create_worker`` / ``Worker.create`` given arguments of the wrong kind: one ``ConfigError`` naming the
argument, before any AWS call (not an ``AttributeError`` from inside the start-up checks)."""

from __future__ import annotations

from typing import Any

import pytest

from consumer import (
    ConfigError,
    Worker,
    create_worker,
)
from tests.unit.helpers import ORDERS_CONFIG as CONFIG
from tests.unit.helpers import Orders

NOWHERE = "http://127.0.0.1:9"  # nothing answers: a call that got this far would fail, not hang

ENV = {
    "CONSUMER_STREAMS": "orders",
    "CONSUMER_APPLICATION": "orders",
    "CONSUMER_LEASE_TABLE": "orders-leases",
    "CONSUMER_CHECKPOINT_TABLE": "orders-checkpoints",
    "AWS_REGION": "eu-west-1",
}


@pytest.mark.parametrize(
    ("config", "options", "message"),
    [
        (
            {"application": "orders"},
            {},
            "config: must be a consumer.WorkerConfig (or None to read CONSUMER_*), got dict",
        ),
        (
            CONFIG,
            {"session": "eu-west-1"},
            "session: must be a boto3.Session (give a region as region=...), got str",
        ),
        (
            None,
            {"env": ENV, "processor": Orders()},
            "processor: got a 'Orders' instance, not a class or factory: pass the class Orders",
        ),
        (
            None,
            {"env": ENV, "processor": "mypkg.orders:Orders"},
            "processor: got the string 'mypkg.orders:Orders': give the class itself",
        ),
    ],
)
def test_an_argument_of_the_wrong_kind_is_one_config_error_naming_it(
    config: Any, options: dict[str, Any], message: str
) -> None:
    for create in (create_worker, Worker.create):
        with pytest.raises(ConfigError) as caught:
            create(config, endpoint_url=NOWHERE, **options)
        assert str(caught.value).startswith(message), caught.value
