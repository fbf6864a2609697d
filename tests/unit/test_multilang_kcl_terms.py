"""A MultiLang properties file's errors in the file's terms, KCL booleans as the KCL reads them, and the KCL
2.5+/3.x keys the daemon classifies (audit D2, D3, D6)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from consumer.errors import ConfigError
from consumer.multilang.daemon import multilang_config
from consumer.multilang.kcl_keys import KEYS, kcl_boolean
from consumer.multilang.key_terms import in_key_terms
from consumer.multilang.properties import MultiLangSettings, parse_properties, parse_text

REPO = Path(__file__).resolve().parents[2]
_BASE = "executableName = app.py\nstreamName = orders\napplicationName = orders-app\nregionName = us-east-1\n"


def _settings(extra: str) -> MultiLangSettings:
    return parse_properties(parse_text(_BASE + extra, "app.properties"), "app.properties", Path("/x"))


def test_a_cross_check_against_a_default_names_the_files_key_not_variables_never_set() -> None:
    """Before: ``CONSUMER_LEADER_CHECK_SECONDS: must be shorter than CONSUMER_LEASE_DURATION_SECONDS (1.0);
    got 1.0``, naming neither the file nor failoverTimeMillis."""
    with pytest.raises(ConfigError) as caught:
        multilang_config(_settings("failoverTimeMillis = 1000\n"), {})
    text = str(caught.value)
    assert text.startswith("app.properties: failoverTimeMillis: "), text
    assert "failoverTimeMillis (1000 ms)" in text and "CONSUMER_LEASE_DURATION_SECONDS" not in text, text
    assert "CONSUMER_LEADER_CHECK_SECONDS (1.0 s, its default)" in text, text


def test_a_variable_the_operator_set_stays_and_numbers_of_millis_keys_are_millis() -> None:
    env = {"CONSUMER_SCAN_INTERVAL_SECONDS": "2", "CONSUMER_LEADER_CHECK_SECONDS": "0.2"}
    with pytest.raises(ConfigError) as caught:
        multilang_config(_settings("failoverTimeMillis = 1000\n"), env)
    assert str(caught.value) == (
        "CONSUMER_SCAN_INTERVAL_SECONDS: must be shorter than failoverTimeMillis (1000 ms); got 2.0"
    )
    # A key of the file is the error's own, its number in the key's unit; a setting the file leaves out is
    # said to be the default.
    settings = _settings("leaseAssignmentIntervalMillis = 10000\n")
    exc = ConfigError(
        "CONSUMER_SCAN_INTERVAL_SECONDS",
        "must be shorter than CONSUMER_LEASE_DURATION_SECONDS (10.0); got 10.0",
    )
    assert str(in_key_terms(exc, settings, {})) == (
        "app.properties: leaseAssignmentIntervalMillis: must be shorter than failoverTimeMillis "
        "(not set: 10000 ms, the default); got 10000 ms"
    )


def test_metrics_buffer_time_names_its_key() -> None:
    settings = _settings("metricsBufferTimeMillis = 500\n")
    exc = ConfigError("CONSUMER_METRICS_INTERVAL_SECONDS", "must be > 0 seconds, got 0")
    assert str(in_key_terms(exc, settings, {})).startswith("app.properties: metricsBufferTimeMillis: ")


def test_the_kcl_3_default_lease_assignment_interval_is_cut_with_one_warning_not_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """KCL 3.x's leaseAssignmentIntervalMillis defaults to 2 x failoverTimeMillis: a KCL user writing the
    default down was refused (``must be shorter than CONSUMER_LEASE_DURATION_SECONDS (10.0); got 20.0``)."""
    caplog.set_level(logging.WARNING)
    config, _ = multilang_config(_settings("leaseAssignmentIntervalMillis = 20000\n"), {})
    assert (config.lease.scan_interval, config.lease.lease_duration) == (5.0, 10.0)
    capped = [r for r in caplog.records if getattr(r, "event", None) == "multilang_setting_capped"]
    assert [getattr(r, "key", None) for r in capped] == ["leaseAssignmentIntervalMillis"], caplog.records
    config, _ = multilang_config(
        _settings("failoverTimeMillis = 20000\nleaseAssignmentIntervalMillis = 40000\n"), {}
    )
    assert config.lease.scan_interval == 10.0
    config, _ = multilang_config(_settings("leaseAssignmentIntervalMillis = 2500\n"), {})
    assert config.lease.scan_interval == 2.5  # under a lease duration: as given


@pytest.mark.parametrize(
    ("line", "accepted"),
    [
        ("isGracefulLeaseHandoffEnabled = True", True),
        ("isGracefulLeaseHandoffEnabled = YES", True),
        ("isGracefulLeaseHandoffEnabled = on", True),
        ("callProcessRecordsEvenForEmptyRecordList = FALSE", True),
        ("callProcessRecordsEvenForEmptyRecordList = 0", True),
        ("callProcessRecordsEvenForEmptyRecordList = Off", True),
        ("isGracefulLeaseHandoffEnabled = False", False),
        ("callProcessRecordsEvenForEmptyRecordList = True", False),
    ],
)
def test_kcl_booleans_are_read_as_the_kcl_reads_them(line: str, accepted: bool) -> None:
    """Before: ``'True' is refused: ... (true is the default)``."""
    key = line.split(" = ", maxsplit=1)[0]
    if accepted:
        assert key in [k for k, _ in _settings(line + "\n").ignored]
    else:
        with pytest.raises(ConfigError, match=rf"^app.properties: {key}: '\w+' is refused: "):
            _settings(line + "\n")


def test_a_value_that_is_no_boolean_says_so() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^app.properties: isGracefulLeaseHandoffEnabled: must be true or false .*got 'maybe'$",
    ):
        _settings("isGracefulLeaseHandoffEnabled = maybe\n")
    assert [kcl_boolean(v) for v in ("TRUE", " y ", "N", "1", "2")] == ["true", "true", "false", "true", None]


@pytest.mark.parametrize(
    "key", ["enablePriorityLeaseAssignment", "leaseTableDeletionProtectionEnabled", "leaseTablePitrEnabled"]
)
def test_kcl_lease_management_keys_are_classified_and_documented(key: str) -> None:
    """Before: ``unknown setting (refused: a MultiLangDaemon key this daemon does not know)``."""
    fate = KEYS[key]
    assert fate.kind == "ignored" and fate.why
    assert (key, fate.why) in _settings(f"{key} = true\n").ignored
    doc = (REPO / "docs" / "migrating-from-kcl.md").read_text()
    assert f"| `{key}` | ignored: {fate.why} |" in doc
