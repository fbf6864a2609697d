"""The emulator's shortcut through moto's response serializer gives exactly moto's own output."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from moto.core.serialize import BaseJSONSerializer, XFormedAttributePicker, get_serializer_class
from moto.core.utils import get_service_model

from tools._emulator_moto import copy_plain_attributes, plain_attribute

_text = st.text(max_size=8)
_number = st.integers(-(10**12), 10**12).map(str)
_scalar = st.one_of(
    st.builds(lambda v: {"S": v}, _text),
    st.builds(lambda v: {"N": v}, _number),
    st.builds(lambda v: {"BOOL": v}, st.booleans()),
    st.just({"NULL": True}),
    st.builds(lambda v: {"SS": v}, st.lists(_text, min_size=1, max_size=3, unique=True)),
    st.builds(lambda v: {"NS": v}, st.lists(_number, min_size=1, max_size=3, unique=True)),
    st.builds(lambda v: {"B": v}, st.binary(max_size=8)),  # binary: moto encodes it, the shortcut steps aside
    st.builds(lambda v: {"BS": v}, st.lists(st.binary(min_size=1, max_size=4), min_size=1, max_size=2)),
)
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.builds(lambda v: {"M": v}, st.dictionaries(_text, inner, max_size=3)),
        st.builds(lambda v: {"L": v}, st.lists(inner, max_size=3)),
    ),
    max_leaves=8,
)
_item = st.dictionaries(st.text(max_size=6), _value, min_size=1, max_size=5)


class _Shortcut(get_serializer_class("dynamodb", "json")):  # type: ignore[misc]
    _serialize_type_structure = copy_plain_attributes(BaseJSONSerializer._serialize_type_structure)


def _body(serializer: type, operation: str, result: dict[str, Any]) -> Any:
    model = get_service_model("dynamodb").operation_model(operation)
    out = serializer(operation_model=model, pretty_print=False, value_picker=XFormedAttributePicker())
    return json.loads(out.serialize(result)["body"])


@settings(max_examples=150, deadline=None)
@given(items=st.lists(_item, max_size=4))
def test_a_scan_serializes_as_moto_serializes_it(items: list[dict[str, Any]]) -> None:
    result = {"Items": items, "Count": len(items), "ScannedCount": len(items)}
    expected = _body(get_serializer_class("dynamodb", "json"), "Scan", result)
    assert _body(_Shortcut, "Scan", result) == expected


@settings(max_examples=100, deadline=None)
@given(item=_item)
def test_an_item_and_its_old_values_serialize_as_moto_serializes_them(item: dict[str, Any]) -> None:
    for operation, result in (("GetItem", {"Item": item}), ("UpdateItem", {"Attributes": item})):
        assert _body(_Shortcut, operation, result) == _body(
            get_serializer_class("dynamodb", "json"), operation, result
        )


def test_only_values_moto_would_copy_unchanged_take_the_shortcut() -> None:
    assert plain_attribute({"M": {"a": {"L": [{"S": "x"}, {"NULL": True}]}}})
    assert not plain_attribute({"B": "eA=="})  # moto base64-encodes what it holds
    assert not plain_attribute({"M": {"a": {"BS": [b"x"]}}})
    assert not plain_attribute({"M": {"": {"S": "x"}}})  # moto answers that one its own way
    assert not plain_attribute({"S": "x", "N": "1"})  # moto keeps one member of each; so does DynamoDB
    assert not plain_attribute({"N": 1})  # moto turns it into "1"
    assert not plain_attribute({"BOOL": "true"})
