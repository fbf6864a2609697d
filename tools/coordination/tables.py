"""Storage for the in-memory DynamoDB: one table's items by key, its global secondary indexes, item sizes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tools.coordination.billing import item_size, write_units
from tools.coordination.expressions import Item, Value, _norm

__all__ = ["Index", "Table", "key_of"]

Key = tuple[Any, ...]


def key_of(item: Mapping[str, Value], hash_key: str, range_key: str | None) -> Key | None:
    """The normalized key of ``item`` (None when it lacks a key attribute)."""
    h = item.get(hash_key)
    if h is None:
        return None
    if range_key is None:
        return (_norm(h),)
    r = item.get(range_key)
    return None if r is None else (_norm(h), _norm(r))


@dataclass
class Index:
    """A global secondary index: entries grouped by their index hash key."""

    name: str
    hash_key: str
    range_key: str | None
    projection: str  # ALL, KEYS_ONLY or INCLUDE
    non_key: tuple[str, ...]
    base_keys: tuple[str, ...]
    partitions: dict[Any, dict[Key, Item]] = field(default_factory=dict)

    def entry(self, item: Item | None) -> Item | None:
        if item is None or key_of(item, self.hash_key, self.range_key) is None:
            return None
        if self.projection == "ALL":
            return item
        keep = {*self.base_keys, self.hash_key, *([self.range_key] if self.range_key else [])}
        if self.projection == "INCLUDE":
            keep |= set(self.non_key)
        return {k: v for k, v in item.items() if k in keep}

    def key_changed(self, before: Item, after: Item) -> bool:
        return key_of(before, self.hash_key, self.range_key) != key_of(after, self.hash_key, self.range_key)

    def write_units(self, before: Item | None, after: Item | None) -> int:
        """Units the index consumes when a base item goes from ``before`` to ``after``."""
        old, new = self.entry(before), self.entry(after)
        if old is None and new is None:
            return 0
        if old is None:
            return write_units(item_size(new))
        if new is None:
            return write_units(item_size(old))
        if self.key_changed(old, new):  # moves: a delete and a put
            return write_units(item_size(old)) + write_units(item_size(new))
        if {k: _norm(v) for k, v in old.items()} == {k: _norm(v) for k, v in new.items()}:
            return 0
        return write_units(item_size(old), item_size(new))

    def move(self, base_key: Key, before: Item | None, after: Item | None) -> None:
        old, new = self.entry(before), self.entry(after)
        if old is not None:
            part = self.partitions.get(_norm(old[self.hash_key]))
            if part is not None:
                part.pop(base_key, None)
                if not part:
                    del self.partitions[_norm(old[self.hash_key])]
        if new is not None:
            self.partitions.setdefault(_norm(new[self.hash_key]), {})[base_key] = new


@dataclass
class Table:
    name: str
    hash_key: str
    range_key: str | None
    attribute_types: dict[str, str]
    indexes: dict[str, Index] = field(default_factory=dict)
    items: dict[Key, Item] = field(default_factory=dict)
    sizes: dict[Key, int] = field(default_factory=dict)
    _order: list[Key] | None = None  # keys in scan order, rebuilt after an insert or a delete

    @property
    def key_names(self) -> tuple[str, ...]:
        return (self.hash_key, *([self.range_key] if self.range_key else []))

    def key(self, item: Mapping[str, Value]) -> Key | None:
        return key_of(item, self.hash_key, self.range_key)

    def get(self, key: Key) -> Item | None:
        return self.items.get(key)

    def put(self, key: Key, item: Item | None) -> None:
        """Store ``item`` (None: delete) and keep the indexes in step. Items are never changed in place."""
        before = self.items.get(key)
        for index in self.indexes.values():
            index.move(key, before, item)
        if item is None:
            if before is not None:
                del self.items[key]
                del self.sizes[key]
                self._order = None
            return
        if before is None:
            self._order = None
        self.items[key] = item
        self.sizes[key] = item_size(item)

    def order(self) -> list[Key]:
        if self._order is None:
            self._order = sorted(self.items, key=repr)
        return self._order

    def scan_from(self, start: Key | None) -> Iterator[Key]:
        keys = self.order()
        i = 0
        if start is not None:
            probe = repr(start)
            lo, hi = 0, len(keys)
            while lo < hi:  # first key sorting after ``start``
                mid = (lo + hi) // 2
                if repr(keys[mid]) <= probe:
                    lo = mid + 1
                else:
                    hi = mid
            i = lo
        yield from keys[i:]

    def key_item(self, item: Mapping[str, Value]) -> Item:
        return {k: item[k] for k in self.key_names}
