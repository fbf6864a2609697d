"""Empty GetRecords answers at a shard's tip, given by the limits proxy itself (docs/emulators.md), without I/O.

kinesis-local spends ~14 ms of CPU on every GetRecords, an empty one too, and a consumer that has caught up
asks four or five times a second per shard. When kinesis-local answers a call with no records, nothing behind
the latest record (``MillisBehindLatest`` 0) and a next iterator, nothing can come after that iterator until a
record is put to the stream (or the stream changes): a GetRecords on it would be empty too. So the proxy
answers such calls itself, from the answer it remembers, until the stream's ``version`` moves (every put and
every call that changes a stream moves it, before and after it is forwarded). Each answer carries a new
iterator of its own (an alias of kinesis-local's), so that every iterator has its own issue time, as on AWS;
the proxy forwards an alias as the iterator it stands for. Answers are given only from an iterator that
kinesis-local issued less than ``max_age`` seconds ago, so an alias stays good at kinesis-local (which expires
iterators after 300 s) for at least ``300 - max_age`` seconds after it was handed out.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

#: Seconds after kinesis-local issued an iterator during which the proxy answers calls on it from memory.
MAX_AGE: Final = 60.0
#: Seconds an alias is remembered after it was handed out: twice the iterator lifetime, as the limiter keeps
#: iterators (a late caller still gets kinesis-local's or the limiter's answer about its age).
ALIAS_KEEP: Final = 600.0
_PREFIX: Final = "tip-"


@dataclass(frozen=True)
class Tip:
    """An empty answer at the tip of ``stream``'s ``shard``, given while the stream was at ``version``, whose
    next iterator kinesis-local issued at ``issued``."""

    stream: str
    shard: str
    answer: dict[str, Any]
    version: int
    issued: float


class TipCache:
    """The empty answers to repeat and the aliases handed out, for one proxy. Thread-safe (one lock)."""

    def __init__(self, max_age: float = MAX_AGE, alias_keep: float = ALIAS_KEEP) -> None:
        if not 0 <= max_age < 300:
            raise ValueError(f"max_age {max_age!r} is not within [0, 300) s")
        self.max_age, self.alias_keep = max_age, alias_keep
        self._lock = threading.Lock()
        self._versions: dict[str, int] = {}
        #: kinesis-local's next iterator -> its empty answer, oldest first
        self._tips: OrderedDict[str, Tip] = OrderedDict()
        #: alias -> (kinesis-local's iterator, when the alias was handed out), oldest first
        self._aliases: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._counter = itertools.count()
        #: answers given from memory, and calls forwarded to kinesis-local
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        """The empty answers remembered now."""
        with self._lock:
            return len(self._tips)

    def upstream(self, iterator: str) -> str:
        """The iterator to send kinesis-local for ``iterator`` (itself unless it is an alias)."""
        if not iterator.startswith(_PREFIX):
            return iterator
        with self._lock:
            entry = self._aliases.get(iterator)
        return entry[0] if entry is not None else iterator

    def version(self, stream: str) -> int:
        """``stream``'s version now: read before a GetRecords is forwarded, passed to :meth:`answered`."""
        with self._lock:
            return self._versions.get(stream, 0)

    def changed(self, stream: str) -> None:
        """Records were put to ``stream`` or it changed: called before the call is forwarded and after."""
        with self._lock:
            self._versions[stream] = self._versions.get(stream, 0) + 1

    def answered(self, stream: str, shard: str, answer: dict[str, Any], version: int, issued: float) -> None:
        """kinesis-local answered a GetRecords on ``stream``'s ``shard`` forwarded at ``version``, and the next
        iterator in it was issued at ``issued``: remembered if the answer is empty at the tip."""
        following = answer.get("NextShardIterator")
        if answer.get("Records") or answer.get("MillisBehindLatest") != 0 or not isinstance(following, str):
            return
        with self._lock:
            if self._versions.get(stream, 0) != version:  # records may have come meanwhile
                return
            self._tips[following] = Tip(stream, shard, answer, version, issued)
            self._prune(issued)

    def serve(self, iterator: str, now: float) -> dict[str, Any] | None:
        """The answer to a GetRecords on ``iterator`` (with a new alias as its next iterator), or None if it
        has to go to kinesis-local."""
        with self._lock:
            entry = self._aliases.get(iterator)
            base = entry[0] if entry is not None else iterator
            tip = self._tips.get(base)
            if (
                tip is None
                or tip.version != self._versions.get(tip.stream, 0)
                or now - tip.issued >= self.max_age
            ):
                self.misses += 1
                return None
            alias = f"{_PREFIX}{next(self._counter):x}-{tip.shard}"
            self._aliases[alias] = (base, now)
            self._prune(now)
            self.hits += 1
            return {**tip.answer, "NextShardIterator": alias}

    def clear(self) -> None:
        """Forget every answer (aliases still stand for their iterators)."""
        with self._lock:
            self._tips.clear()

    def _prune(self, now: float) -> None:
        while self._tips and now - next(iter(self._tips.values())).issued >= self.max_age:
            self._tips.popitem(last=False)
        while self._aliases and now - next(iter(self._aliases.values()))[1] > self.alias_keep:
            self._aliases.popitem(last=False)
