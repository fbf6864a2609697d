"""The shipped example processors refuse settings that cannot work, at start-up, naming their variable."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.config import worker_config_from_env
from consumer.errors import ConfigError
from consumer.examples.async_webhook import WebhookTarget
from consumer.examples.copier import StreamCopier
from consumer.lifecycle.processor import InitializationInput
from consumer.loader import load_processor


def test_the_copier_refuses_to_copy_a_stream_into_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Made for its own target stream (what the start-up checks do, once per stream), the copier refuses:
    the copies would be copied again without end."""
    monkeypatch.setenv("COPIER_TARGET_STREAM", "s4")
    monkeypatch.setenv("AWS_REGION", "us-east-1")  # its Kinesis client is made, never called
    env = {
        "CONSUMER_APPLICATION": "a",
        "CONSUMER_LEASE_TABLE": "l",
        "CONSUMER_CHECKPOINT_TABLE": "c",
        "CONSUMER_STREAMS": "s4,other",
        "CONSUMER_PROCESSOR": "consumer.examples.copier:StreamCopier",
    }
    cfg = worker_config_from_env(env, load_processor)
    with pytest.raises(ConfigError) as info:
        cfg.stream("s4").processor_factory()
    assert str(info.value).startswith("COPIER_TARGET_STREAM: must differ from the stream being copied ('s4')")
    assert isinstance(cfg.stream("other").processor_factory(), StreamCopier)


def test_a_copier_made_elsewhere_refuses_at_initialize() -> None:
    copier = StreamCopier(client=object(), target_stream="s4")
    data: Any = InitializationInput("s4", "shardId-0", 1, None, "TRIM_HORIZON", guard=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="COPIER_TARGET_STREAM: must differ"):
        copier.initialize(data)
    copier.check_source_stream("s5")  # another stream: fine


@pytest.mark.parametrize("timeout", ["inf", "-inf", "nan", "0", "-1"])
def test_webhook_timeouts_that_never_end_or_never_start_are_refused(
    monkeypatch: pytest.MonkeyPatch, timeout: str
) -> None:
    monkeypatch.setenv("WEBHOOK_URL", "http://localhost:1/hook")
    monkeypatch.setenv("WEBHOOK_TIMEOUT_SECONDS", timeout)
    with pytest.raises(ConfigError, match="WEBHOOK_TIMEOUT_SECONDS: must be a finite number of seconds > 0"):
        WebhookTarget.from_env()
    monkeypatch.setenv("WEBHOOK_TIMEOUT_SECONDS", "2.5")
    assert WebhookTarget.from_env().timeout == 2.5
