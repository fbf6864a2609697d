"""DynamoDB condition and update expressions over items in wire form ({"S": ...}, {"N": ...}).

Conditions: comparisons (= <> < <= > >=), BETWEEN, IN, attribute_exists, attribute_not_exists,
attribute_type, begins_with, contains, size(), AND / OR / NOT and parentheses. Updates: SET (with + and -,
if_not_exists, list_append), REMOVE, ADD (numbers and sets) and DELETE (from sets). Names and values come
from ExpressionAttributeNames / ExpressionAttributeValues; as in DynamoDB, one that no expression uses is an
error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

__all__ = ["ExpressionError", "Expressions", "Item", "Value"]

Value = dict[str, Any]  # one attribute value in wire form
Item = dict[str, Value]
Path = tuple[str | int, ...]

_TOKEN = re.compile(
    r"\s*(?:(?P<op><>|<=|>=|[=<>(),.\[\]+-])|(?P<name>#[A-Za-z0-9_]+)|(?P<value>:[A-Za-z0-9_]+)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<int>\d+))"
)
_SET_KINDS = {"SS", "NS", "BS"}


class ExpressionError(ValueError):
    """A malformed expression, or one that does not fit the item (DynamoDB's ValidationException)."""


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ExpressionError(f"Invalid expression: syntax error near {text[pos : pos + 20]!r}")
        out.append(m.group(m.lastgroup or "op"))
        pos = m.end()
    return out


def _kind(v: Value) -> str:
    return next(iter(v))


def _norm(v: Value) -> Any:
    """A hashable form for equality: numbers by value, sets unordered."""
    kind, x = next(iter(v.items()))
    if kind == "N":
        return ("N", Decimal(x))
    if kind == "NS":
        return ("NS", frozenset(Decimal(n) for n in x))
    if kind in ("SS", "BS"):
        return (kind, frozenset(bytes(b) if kind == "BS" else b for b in x))
    if kind == "L":
        return ("L", tuple(_norm(e) for e in x))
    if kind == "M":
        return ("M", tuple(sorted((k, _norm(e)) for k, e in x.items())))
    if kind == "B":
        return ("B", bytes(x))
    return (kind, x)


def _ordered(a: Value, b: Value) -> tuple[Any, Any] | None:
    ka, kb = _kind(a), _kind(b)
    if ka != kb or ka not in ("N", "S", "B"):
        return None
    if ka == "N":
        return Decimal(a["N"]), Decimal(b["N"])
    if ka == "S":
        return a["S"].encode(), b["S"].encode()
    return bytes(a["B"]), bytes(b["B"])


def _compare(op: str, a: Value | None, b: Value | None) -> bool:
    if op in ("=", "<>"):
        equal = a is not None and b is not None and _norm(a) == _norm(b)
        return equal if op == "=" else not equal
    if a is None or b is None:
        return False
    pair = _ordered(a, b)
    if pair is None:
        return False
    x, y = pair
    return bool({"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op])


def _number(d: Decimal) -> Value:
    text = format(d.normalize(), "f") if d != d.to_integral_value() else str(int(d))
    return {"N": text}


def get_path(item: Mapping[str, Value], path: Path) -> Value | None:
    cur: Any = item.get(path[0]) if isinstance(path[0], str) else None
    for part in path[1:]:
        if cur is None:
            return None
        if isinstance(part, int):
            seq = cur.get("L")
            cur = seq[part] if seq is not None and part < len(seq) else None
        else:
            m = cur.get("M")
            cur = m.get(part) if m is not None else None
    found: Value | None = cur
    return found


def _with(container: Value | None, rest: Path, new: Value | None) -> Value:
    """``container`` with ``new`` at ``rest`` (None: removed), copied, never changed in place."""
    head, tail = rest[0], rest[1:]
    if isinstance(head, int):
        if container is None or "L" not in container:
            raise ExpressionError("The document path provided in the update expression is invalid for update")
        seq = list(container["L"])
        if head >= len(seq):
            if new is not None and not tail:
                seq.append(new)
            return {"L": seq}
        if tail:
            seq[head] = _with(seq[head], tail, new)
        elif new is None:
            del seq[head]
        else:
            seq[head] = new
        return {"L": seq}
    if container is None or "M" not in container:
        raise ExpressionError("The document path provided in the update expression is invalid for update")
    m = dict(container["M"])
    if tail:
        m[head] = _with(m.get(head), tail, new)
    elif new is None:
        m.pop(head, None)
    else:
        m[head] = new
    return {"M": m}


def set_path(item: Item, path: Path, new: Value | None) -> None:
    top = path[0]
    assert isinstance(top, str)
    if len(path) == 1:
        if new is None:
            item.pop(top, None)
        else:
            item[top] = new
    else:
        item[top] = _with(item.get(top), path[1:], new)


Operand = Callable[[Mapping[str, Value]], Value | None]
Condition = Callable[[Mapping[str, Value]], bool]


def _either(a: Condition, b: Condition) -> Condition:
    return lambda item: a(item) or b(item)


def _both(a: Condition, b: Condition) -> Condition:
    return lambda item: a(item) and b(item)


class _Parser:
    def __init__(self, text: str, ctx: Expressions) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.ctx = ctx

    # -- token helpers
    def peek(self, offset: int = 0) -> str | None:
        j = self.i + offset
        return self.toks[j] if j < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok.upper() != want.upper()):
            raise ExpressionError(f"Invalid expression: expected {want or 'a token'}, got {tok!r}")
        self.i += 1
        return tok

    def at_word(self, *words: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.upper() in words

    def end(self) -> bool:
        return self.i >= len(self.toks)

    # -- operands
    def path(self) -> Path:
        parts: list[str | int] = [self._name(self.take())]
        while self.peek() in (".", "["):
            if self.take() == ".":
                parts.append(self._name(self.take()))
            else:
                parts.append(int(self.take()))
                self.take("]")
        return tuple(parts)

    def _name(self, tok: str) -> str:
        if tok.startswith("#"):
            return self.ctx.name(tok)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tok):
            raise ExpressionError(f"Invalid expression: {tok!r} is not an attribute name")
        return tok

    def operand(self) -> Operand:
        tok = self.peek()
        if tok is not None and tok.startswith(":"):
            value = self.ctx.value(self.take())
            return lambda _item: value
        if tok is not None and tok.lower() == "size" and self.peek(1) == "(":
            self.take()
            self.take("(")
            path = self.path()
            self.take(")")
            return lambda item: _size(get_path(item, path))
        path = self.path()
        return lambda item: get_path(item, path)

    # -- conditions
    def condition(self) -> Condition:
        left = self._and()
        while self.at_word("OR"):
            self.take()
            right = self._and()
            left = _either(left, right)
        return left

    def _and(self) -> Condition:
        left = self._not()
        while self.at_word("AND"):
            self.take()
            right = self._not()
            left = _both(left, right)
        return left

    def _not(self) -> Condition:
        if self.at_word("NOT"):
            self.take()
            inner = self._not()
            return lambda item: not inner(item)
        return self._primary()

    def _primary(self) -> Condition:
        if self.peek() == "(":
            self.take()
            inner = self.condition()
            self.take(")")
            return inner
        tok = (self.peek() or "").lower()
        if self.peek(1) == "(" and tok in ("attribute_exists", "attribute_not_exists", "attribute_type"):
            self.take()
            self.take("(")
            path = self.path()
            if tok == "attribute_type":
                self.take(",")
                want = self.ctx.value(self.take())
                self.take(")")
                return lambda item: (v := get_path(item, path)) is not None and _kind(v) == want.get("S")
            self.take(")")
            if tok == "attribute_exists":
                return lambda item: get_path(item, path) is not None
            return lambda item: get_path(item, path) is None
        if self.peek(1) == "(" and tok in ("begins_with", "contains"):
            self.take()
            self.take("(")
            target = self.operand()
            self.take(",")
            arg = self.operand()
            self.take(")")
            fn = _begins_with if tok == "begins_with" else _contains
            return lambda item: fn(target(item), arg(item))
        left = self.operand()
        if self.at_word("BETWEEN"):
            self.take()
            low = self.operand()
            self.take("AND")
            high = self.operand()
            return lambda item: (
                _compare(">=", left(item), low(item)) and _compare("<=", left(item), high(item))
            )
        if self.at_word("IN"):
            self.take()
            self.take("(")
            options = [self.operand()]
            while self.peek() == ",":
                self.take()
                options.append(self.operand())
            self.take(")")
            return lambda item: any(_compare("=", left(item), o(item)) for o in options)
        op = self.take()
        if op not in ("=", "<>", "<", "<=", ">", ">="):
            raise ExpressionError(f"Invalid expression: unexpected {op!r}")
        right = self.operand()
        return lambda item: _compare(op, left(item), right(item))

    # -- updates
    def update(self) -> list[Callable[[Mapping[str, Value], Item], Path]]:
        actions: list[Callable[[Mapping[str, Value], Item], Path]] = []
        seen: set[str] = set()
        while not self.end():
            clause = self.take().upper()
            if clause not in ("SET", "REMOVE", "ADD", "DELETE") or clause in seen:
                raise ExpressionError(f"Invalid UpdateExpression: unexpected {clause!r}")
            seen.add(clause)
            while True:
                actions.append(getattr(self, f"_{clause.lower()}")())
                if self.peek() != ",":
                    break
                self.take()
        return actions

    def _set(self) -> Callable[[Mapping[str, Value], Item], Path]:
        path = self.path()
        self.take("=")
        value = self._set_value()

        def apply(old: Mapping[str, Value], new: Item) -> Path:
            set_path(new, path, value(old))
            return path

        return apply

    def _set_value(self) -> Callable[[Mapping[str, Value]], Value]:
        first = self._set_operand()
        if self.peek() in ("+", "-"):
            sign = self.take()
            second = self._set_operand()
            return lambda item: _arith(first(item), second(item), sign)
        return lambda item: _present(first(item))

    def _set_operand(self) -> Callable[[Mapping[str, Value]], Value | None]:
        tok = (self.peek() or "").lower()
        if tok in ("if_not_exists", "list_append") and self.peek(1) == "(":
            self.take()
            self.take("(")
            if tok == "if_not_exists":
                path = self.path()
                self.take(",")
                default = self._set_operand()
                self.take(")")
                return lambda item: get_path(item, path) or default(item)
            a = self._set_operand()
            self.take(",")
            b = self._set_operand()
            self.take(")")
            return lambda item: {"L": [*_list(a(item)), *_list(b(item))]}
        return self.operand()

    def _remove(self) -> Callable[[Mapping[str, Value], Item], Path]:
        path = self.path()

        def apply(_old: Mapping[str, Value], new: Item) -> Path:
            if get_path(new, path) is not None or len(path) == 1:
                set_path(new, path, None)
            return path

        return apply

    def _add(self) -> Callable[[Mapping[str, Value], Item], Path]:
        path = self.path()
        value = self.ctx.value(self.take())

        def apply(old: Mapping[str, Value], new: Item) -> Path:
            cur = get_path(old, path)
            kind = _kind(value)
            if kind == "N":
                base = Decimal(cur["N"]) if cur is not None and "N" in cur else None
                if cur is not None and base is None:
                    raise ExpressionError("An operand in the update expression has an incorrect data type")
                set_path(new, path, _number((base or Decimal(0)) + Decimal(value["N"])))
            elif kind in _SET_KINDS:
                if cur is not None and _kind(cur) != kind:
                    raise ExpressionError("An operand in the update expression has an incorrect data type")
                members = list(cur[kind]) if cur is not None else []
                members += [m for m in value[kind] if m not in members]
                set_path(new, path, {kind: members})
            else:
                raise ExpressionError("Incorrect operand type for operator or function; operator: ADD")
            return path

        return apply

    def _delete(self) -> Callable[[Mapping[str, Value], Item], Path]:
        path = self.path()
        value = self.ctx.value(self.take())

        def apply(old: Mapping[str, Value], new: Item) -> Path:
            kind = _kind(value)
            if kind not in _SET_KINDS:
                raise ExpressionError("Incorrect operand type for operator or function; operator: DELETE")
            cur = get_path(old, path)
            if cur is None:
                return path
            if _kind(cur) != kind:
                raise ExpressionError("An operand in the update expression has an incorrect data type")
            left = [m for m in cur[kind] if m not in value[kind]]
            set_path(new, path, {kind: left} if left else None)
            return path

        return apply


def _present(v: Value | None) -> Value:
    if v is None:
        raise ExpressionError(
            "The provided expression refers to an attribute that does not exist in the item"
        )
    return v


def _list(v: Value | None) -> list[Value]:
    if v is None or "L" not in v:
        raise ExpressionError("An operand in the update expression has an incorrect data type")
    return list(v["L"])


def _arith(a: Value | None, b: Value | None, sign: str) -> Value:
    a, b = _present(a), _present(b)
    if "N" not in a or "N" not in b:
        raise ExpressionError("An operand in the update expression has an incorrect data type")
    x, y = Decimal(a["N"]), Decimal(b["N"])
    return _number(x + y if sign == "+" else x - y)


def _size(v: Value | None) -> Value | None:
    if v is None:
        return None
    kind, x = next(iter(v.items()))
    if kind == "S":
        return {"N": str(len(x.encode()))}
    if kind in ("B", "L", "M", "SS", "NS", "BS"):
        return {"N": str(len(x))}
    return None


def _begins_with(a: Value | None, b: Value | None) -> bool:
    if a is None or b is None or _kind(a) != _kind(b) or _kind(a) not in ("S", "B"):
        return False
    return bool(a[_kind(a)][: len(b[_kind(b)])] == b[_kind(b)])


def _contains(a: Value | None, b: Value | None) -> bool:
    if a is None or b is None:
        return False
    kind = _kind(a)
    if kind == "S" and _kind(b) == "S":
        return b["S"] in a["S"]
    if kind in _SET_KINDS or kind == "L":
        return any(_norm(m if kind == "L" else {kind[0]: m}) == _norm(b) for m in a[kind])
    return False


class Expressions:
    """The expressions of one request, sharing its attribute names and values."""

    def __init__(self, names: Mapping[str, str] | None, values: Mapping[str, Value] | None) -> None:
        self._names = dict(names or {})
        self._values = dict(values or {})
        self._used_names: set[str] = set()
        self._used_values: set[str] = set()

    def name(self, token: str) -> str:
        if token not in self._names:
            raise ExpressionError(
                f"Value provided in ExpressionAttributeNames unused in expressions or not defined: {token}"
            )
        self._used_names.add(token)
        return self._names[token]

    def value(self, token: str) -> Value:
        if token not in self._values:
            raise ExpressionError(
                f"An expression attribute value used in expression is not defined; attribute value: {token}"
            )
        self._used_values.add(token)
        return self._values[token]

    def condition(self, text: str | None) -> Condition | None:
        if text is None:
            return None
        parser = _Parser(text, self)
        cond = parser.condition()
        if not parser.end():
            raise ExpressionError(f"Invalid ConditionExpression: unexpected {parser.peek()!r}")
        return cond

    def update(self, text: str) -> Callable[[Mapping[str, Value]], tuple[Item, set[str]]]:
        """A function of the old item returning the new item and the top-level names it wrote."""
        actions = _Parser(text, self).update()

        def apply(old: Mapping[str, Value]) -> tuple[Item, set[str]]:
            new: Item = dict(old)
            touched: set[str] = set()
            for action in actions:
                touched.add(str(action(old, new)[0]))
            return new, touched

        return apply

    def projection(self, text: str | None) -> list[Path] | None:
        if text is None:
            return None
        parser = _Parser(text, self)
        paths = [parser.path()]
        while parser.peek() == ",":
            parser.take()
            paths.append(parser.path())
        return paths

    def check_all_used(self) -> None:
        unused_names = set(self._names) - self._used_names
        if unused_names:
            raise ExpressionError(
                f"Value provided in ExpressionAttributeNames unused in expressions: keys: {sorted(unused_names)}"
            )
        unused_values = set(self._values) - self._used_values
        if unused_values:
            raise ExpressionError(
                f"Value provided in ExpressionAttributeValues unused in expressions: keys: {sorted(unused_values)}"
            )
