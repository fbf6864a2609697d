"""The limits proxy's tip cache on made-up time (tools/emulators/kinesis_tip.py): which empty answers it
repeats, for how long, and that anything put to the stream ends the repeating."""

from __future__ import annotations

from typing import Any

import pytest

from tools.emulators.kinesis_proxy import TIP_SECONDS_ENV, tip_seconds
from tools.emulators.kinesis_tip import TipCache
from tools.emulators.limits import LimitsError


def empty(following: str | None = "it-1", behind: int = 0) -> dict[str, Any]:
    return {"ChildShards": None, "MillisBehindLatest": behind, "NextShardIterator": following, "Records": []}


def test_an_empty_answer_at_the_tip_is_repeated_with_a_new_iterator_each_time() -> None:
    tips = TipCache(max_age=60)
    tips.answered("s", "shard-0", empty("it-1"), tips.version("s"), issued=100.0)
    first = tips.serve("it-1", 100.2)
    assert first is not None and first["Records"] == [] and first["MillisBehindLatest"] == 0
    second = tips.serve(first["NextShardIterator"], 100.4)
    assert second is not None
    aliases = {first["NextShardIterator"], second["NextShardIterator"]}
    assert len(aliases) == 2 and "it-1" not in aliases
    assert {tips.upstream(a) for a in aliases} == {"it-1"}  # forwarded as kinesis-local's iterator
    assert tips.upstream("it-9") == "it-9"
    assert (tips.hits, tips.misses) == (2, 0)


@pytest.mark.parametrize(
    "answer",
    [
        {**empty(), "Records": [{"SequenceNumber": "1", "Data": "eA==", "PartitionKey": "k"}]},
        empty(behind=1500),  # behind the tip: more may be there already
        empty(following=None),  # a closed shard's end
        {"Records": [], "NextShardIterator": "it-1"},  # no MillisBehindLatest
    ],
)
def test_only_an_empty_answer_at_the_tip_with_a_next_iterator_is_remembered(answer: dict[str, Any]) -> None:
    tips = TipCache(max_age=60)
    tips.answered("s", "shard-0", answer, tips.version("s"), issued=100.0)
    assert tips.serve("it-1", 100.1) is None


def test_a_change_of_the_stream_ends_the_repeating_and_the_alias_goes_to_kinesis_local() -> None:
    tips = TipCache(max_age=60)
    tips.answered("s", "shard-0", empty("it-1"), tips.version("s"), issued=100.0)
    served = tips.serve("it-1", 100.1)
    assert served is not None
    alias = served["NextShardIterator"]
    tips.changed("other")  # another stream's puts change nothing here
    assert tips.serve(alias, 100.2) is not None
    tips.changed("s")
    assert tips.serve(alias, 100.3) is None
    assert tips.upstream(alias) == "it-1"


def test_an_answer_forwarded_while_records_were_put_is_not_remembered() -> None:
    tips = TipCache(max_age=60)
    version = tips.version("s")  # read when the GetRecords was forwarded
    tips.changed("s")  # a put began (or ended) before kinesis-local's empty answer came back
    tips.answered("s", "shard-0", empty("it-1"), version, issued=100.0)
    assert tips.serve("it-1", 100.1) is None
    tips.answered("s", "shard-0", empty("it-2"), tips.version("s"), issued=100.2)
    assert tips.serve("it-2", 100.3) is not None


def test_answers_come_only_from_iterators_younger_than_max_age() -> None:
    tips = TipCache(max_age=60)
    tips.answered("s", "shard-0", empty("it-1"), tips.version("s"), issued=100.0)
    assert tips.serve("it-1", 159.9) is not None
    assert tips.serve("it-1", 160.0) is None
    never = TipCache(max_age=0)
    never.answered("s", "shard-0", empty("it-1"), never.version("s"), issued=100.0)
    assert never.serve("it-1", 100.0) is None


def test_old_answers_and_aliases_are_forgotten() -> None:
    tips = TipCache(max_age=60, alias_keep=600)
    tips.answered("s", "shard-0", empty("it-1"), tips.version("s"), issued=100.0)
    served = tips.serve("it-1", 100.0)
    assert served is not None
    alias = served["NextShardIterator"]
    tips.answered("s", "shard-1", empty("it-2"), tips.version("s"), issued=650.0)
    assert len(tips) == 1  # it-1's answer went as the next one came, 550 s later
    assert tips.upstream(alias) == "it-1"  # an alias is kept for 600 s ...
    assert tips.serve("it-2", 700.5) is not None
    assert tips.upstream(alias) == alias  # ... and then forgotten (kinesis-local answers for it)


def test_clear_forgets_answers_but_keeps_aliases() -> None:
    tips = TipCache(max_age=60)
    tips.answered("s", "shard-0", empty("it-1"), tips.version("s"), issued=100.0)
    served = tips.serve("it-1", 100.0)
    assert served is not None
    tips.clear()
    assert tips.serve(served["NextShardIterator"], 100.1) is None
    assert tips.upstream(served["NextShardIterator"]) == "it-1"


def test_max_age_must_stay_below_the_iterator_lifetime() -> None:
    with pytest.raises(ValueError, match="max_age"):
        TipCache(max_age=300)


def test_the_setting_switches_it_off_and_a_bad_value_names_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TIP_SECONDS_ENV, raising=False)
    assert tip_seconds() == 60
    monkeypatch.setenv(TIP_SECONDS_ENV, "0")
    assert tip_seconds() == 0
    for bad in ("soon", "-1", "300", "nan"):
        monkeypatch.setenv(TIP_SECONDS_ENV, bad)
        with pytest.raises(LimitsError, match=TIP_SECONDS_ENV):
            tip_seconds()
