"""The properties file read as Java's ``Properties.load`` (the KCL's reader) reads it."""

from __future__ import annotations

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
