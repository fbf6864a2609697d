"""The properties file read as Java's ``Properties.load`` (the KCL's reader) reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumer.errors import ConfigError
from consumer.multilang.properties import parse_text


def test_java_properties_syntax() -> None:
    text = (
        "# a comment ending in a backslash is not continued \\\n"
        "a = 1\n"
        "! bang comment\n"
        "  executableName = python3 \\\n"
        "      app.py \\\n"
        "      --flag\n"
        "colon:value\n"
        "blank value with spaces\n"
        "escaped\\:key\\ name = v\n"
        "even = ends in one backslash \\\\\n"
        "next = kept\n"
        "uni = caf\\u00e9\\tx\n"
        "empty =\n"
        "AWSCredentialsProviderDynamoDB = DefaultAWSCredentialsProviderChain\r\n"
        "last = at end \\"
    )
    assert parse_text(text, "f") == {
        "a": "1",
        "executableName": "python3 app.py --flag",
        "colon": "value",
        "blank": "value with spaces",
        "escaped:key name": "v",
        "even": "ends in one backslash \\",
        "next": "kept",
        "uni": "caf\u00e9\tx",
        "empty": "",
        "AwsCredentialsProviderDynamoDB": "DefaultAWSCredentialsProviderChain",
        "last": "at end",
    }


def test_a_bad_escape_names_the_line() -> None:
    with pytest.raises(ConfigError, match=r"^f:2: malformed \\uXXXX escape"):
        parse_text("a = 1\nb = \\u12\n", "f")


def test_retrieval_mode_fanout_names_the_stream_consumer_after_the_application_as_the_kcl_does(
    tmp_path: Path,
) -> None:
    """Before, ``retrievalMode = FANOUT`` passed ``--check`` and the daemon then stopped with
    ``CONSUMER_FANOUT_NAME: is required``, a variable the file cannot set."""
    from consumer.multilang.daemon import multilang_config
    from consumer.multilang.properties import parse_properties

    text = (
        "executableName = app.py\nstreamName = orders\napplicationName = orders-app\nretrievalMode = FANOUT\n"
    )
    settings = parse_properties(parse_text(text, "app.properties"), "app.properties", tmp_path)
    config, _ = multilang_config(settings, {})
    assert (config.retrieval.mode, config.retrieval.fanout_consumer_name) == ("fanout", "orders-app")
    config, _ = multilang_config(settings, {"CONSUMER_FANOUT_NAME": "mine"})
    assert config.retrieval.fanout_consumer_name == "mine"
