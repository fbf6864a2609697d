"""CloudWatch Logs retention from a number of days (settings hold plain integers)."""

from __future__ import annotations

from aws_cdk import aws_logs as logs

from stacks.config_consumer import LOG_RETENTION_DAYS

__all__ = ["log_retention"]

# Every retention CloudWatch Logs accepts (LOG_RETENTION_DAYS, which consumer.log_retention_days is checked against).
_BY_DAYS = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS,
    2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


def log_retention(days: int) -> logs.RetentionDays:
    """CloudWatch's retention of exactly ``days`` days; ``ValueError`` for a number of days it does not accept
    (the settings refuse those first, naming consumer.log_retention_days)."""
    try:
        return _BY_DAYS[days]
    except KeyError:
        allowed = ", ".join(map(str, LOG_RETENTION_DAYS))
        raise ValueError(f"CloudWatch Logs keeps log events for one of {allowed} days, not {days}") from None
