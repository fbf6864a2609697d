"""Java's ``.properties`` syntax, as ``java.util.Properties.load`` (and so the KCL's MultiLangDaemon) reads it."""

from __future__ import annotations

import re

from consumer.errors import ConfigError

__all__ = ["parse_text"]


def parse_text(text: str, source: str) -> dict[str, str]:
    """Java properties as ``java.util.Properties.load`` (and so the KCL) reads them: ``key = value``,
    ``key: value`` or ``key value``; ``#``/``!`` comment lines; a line ending in an odd number of backslashes
    continues on the next (its leading blanks dropped); escapes ``\\uXXXX``, ``\\t``, ``\\n``, ``\\r``,
    ``\\f`` and ``\\x`` for any other ``x`` (``\\=``, ``\\:``, ``\\ `` in a key). Later keys win.
    ``AWSCredentialsProvider...`` in any case is the KCL's ``AwsCredentialsProvider...``."""
    out: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line, f"{source}:{number}")
        out[_normal_key(key)] = value.strip()
    return out


_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line's number, the logical line with its continuations joined), comments and blanks left out."""
    lines = re.split(r"\r\n|\r|\n", text)
    out: list[tuple[int, str]] = []
    index = 0
    while index < len(lines):
        number, line = index + 1, lines[index].lstrip(_BLANKS)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continued(line) and index < len(lines):
            line = line[:-1] + lines[index].lstrip(_BLANKS)
            index += 1
        if _continued(line):  # a backslash at the very end of the file continues into nothing
            line = line[:-1]
        out.append((number, line))
    return out


def _continued(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise ConfigError(where, f"malformed \\uXXXX escape: {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split(line: str, where: str) -> tuple[str, str]:
    """A logical line's key (up to the first unescaped ``=``, ``:`` or blank) and value, both unescaped."""
    i = 0
    while i < len(line) and line[i] not in "=:" + _BLANKS:
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(_BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANKS)
    if not key:
        raise ConfigError(where, f"not a 'key = value' line: {line!r}")
    return _unescape(key, where), _unescape(rest, where)


def _normal_key(key: str) -> str:
    """The KCL reads ``AWSCredentialsProvider`` (its 1.x/2.x samples) and ``AwsCredentialsProvider`` (3.x) alike."""
    prefix = "awscredentialsprovider"
    if key.lower().startswith(prefix):
        return "AwsCredentialsProvider" + key[len(prefix) :]
    return key
