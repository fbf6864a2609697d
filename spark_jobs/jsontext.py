"""Column expressions that check text against the raw format's rules (docs/data-format.md, sections 1-2).

Pure ``Column -> Column`` functions, no UDFs: what "one strict JSON text within Spark's bounds" and "strict
base64" mean for the compaction. Expensive checks run only on the rare values that could fail them (a text
nested 501 deep has at least 1,002 characters), so that a typical payload costs a length lookup.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

__all__ = [
    "MAX_DEPTH",
    "MAX_KEY",
    "STRICT_OPTIONS",
    "canonical_base64",
    "one_json_text",
    "within_bounds",
    "wrapped",
]

#: Options of Spark's JSON reader (``from_json``) for strict parsing (RFC 8259): it accepts NaN/Infinity,
#: single quotes, comments and more unless told not to.
STRICT_OPTIONS = {
    "allowNonNumericNumbers": "false",
    "allowSingleQuotes": "false",
    "allowComments": "false",
    "allowUnquotedFieldNames": "false",
    "allowNumericLeadingZeros": "false",
    "allowUnquotedControlChars": "false",
    "allowBackslashEscapingAnyCharacter": "false",
}
#: The deepest nesting of arrays and objects a kept JSON text may have (the sink's bound too).
MAX_DEPTH = 500
#: The longest key, in characters of the decoded text (an escape is one character), a kept JSON text may have.
MAX_KEY = 10_000

# One escape sequence (a surrogate pair as one, as in the decoded text). A find of these alternatives
# consumes one short escape at a time: no regex recursion on long values.
_ESCAPE = r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}|\\."
# Every string of a text without escapes, with the white space and colon after it when it is a key.
_STRING = r'"[^"]*"[ \t\n\r]*:?'
# The last three characters of base64 with padding whose unused bits are zero (RFC 4648, 3.5).
_CANONICAL_PADDING = r"^(?:[AQgw]==|.[AEIMQUYcgkosw048]=)$"


def wrapped(text: Column) -> Column:
    """``[text]`` parsed as a VARIANT (null when it is not strict JSON); see :func:`one_json_text`."""
    return F.try_parse_json(F.concat(F.lit("["), text, F.lit("]")))


def one_json_text(text: Column, parsed: Column) -> Column:
    """Whether ``text`` is exactly one strict JSON text, given ``parsed = wrapped(text)``.

    ``parse_json`` is strict (no NaN, single quotes, comments, trailing commas, control characters, duplicate
    keys or lone surrogates) but stops after the first value. Wrapped in ``[...]``, anything after that value
    makes the array invalid or longer than one element, except text that starts with ``]``; so text holding a
    ``]`` is parsed once more as ``{"k": text}``, where a ``]`` after the value is invalid.
    """
    one = (
        F.try_variant_get(parsed, "$[0]", "variant").isNotNull()
        & F.try_variant_get(parsed, "$[1]", "variant").isNull()
        & (
            (F.instr(text, "]") == 0)
            | F.try_parse_json(F.concat(F.lit('{"k":'), text, F.lit("}"))).isNotNull()
        )
    )
    return F.coalesce(one, F.lit(False))


def _depth(text: Column) -> Column:
    """The deepest nesting of arrays and objects in JSON ``text`` (brackets inside strings do not count)."""
    no_strings = F.regexp_replace(F.regexp_replace(text, _ESCAPE, "e"), r'"[^"]*"', "")
    brackets = F.split(F.regexp_replace(no_strings, r"[^\[\]{}]", ""), "")
    step = F.struct(F.lit(0).alias("depth"), F.lit(0).alias("deepest"))

    def merge(acc: Column, bracket: Column) -> Column:
        depth = acc.getField("depth") + F.when(bracket.isin("[", "{"), 1).otherwise(-1)
        return F.struct(depth.alias("depth"), F.greatest(acc.getField("deepest"), depth).alias("deepest"))

    return F.aggregate(brackets, step, merge, lambda acc: acc.getField("deepest"))


def _longest_key(text: Column) -> Column:
    """The length of the longest key in JSON ``text``, in characters of its decoded form."""
    strings = F.regexp_extract_all(F.regexp_replace(text, _ESCAPE, "e"), F.lit(_STRING), 0)
    keys = F.filter(strings, lambda s: s.endswith(":"))
    # '"key"  :' -> 'key'
    lengths = F.transform(keys, lambda k: F.length(F.regexp_replace(k, r'"[ \t\n\r]*:$', "")) - 1)
    return F.coalesce(F.array_max(lengths), F.lit(0))


def within_bounds(text: Column) -> Column:
    """Whether JSON ``text`` (already known to be one JSON text) nests at most :data:`MAX_DEPTH` deep and has
    no key longer than :data:`MAX_KEY` characters.

    Byte length and a count of opening brackets bound both cheaply; only texts past those bounds are
    scanned (strings, then brackets).
    """
    size = F.octet_length(text)
    may_be_deep = F.length(text) - F.length(F.translate(text, "[{", "")) > MAX_DEPTH
    too_deep = F.when(may_be_deep, _depth(text) > MAX_DEPTH).otherwise(F.lit(False))
    key_too_long = F.when(size > MAX_KEY + 2, _longest_key(text) > MAX_KEY).otherwise(F.lit(False))
    # one comparison for a typical payload: a text nested 501 deep has at least 1,002 characters
    return F.when(size > 2 * MAX_DEPTH + 1, ~too_deep & ~key_too_long).otherwise(F.lit(True))


def canonical_base64(value: Column) -> Column:
    """Whether ``value`` is strict base64 (RFC 4648): the alphabet, padded to a multiple of 4, no white space,
    and padding bits of zero (``YQ==``, not ``YR==``), so that each byte string has exactly one form."""
    padding_ok = ~value.endswith("=") | F.substring(value, -3, 3).rlike(_CANONICAL_PADDING)
    return (F.length(value) % 4 == 0) & value.rlike(r"^[A-Za-z0-9+/]*={0,2}$") & padding_ok
