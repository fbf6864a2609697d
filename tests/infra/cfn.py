"""Small readers for synthesized CloudFormation: render intrinsic references as readable strings."""

from __future__ import annotations

from typing import Any


def render(value: Any) -> str:
    """``{"Fn::GetAtt": ["LeaseTable1", "Arn"]}`` -> ``LeaseTable1.Arn``; joins are concatenated.

    Weak cross-stack references (``Fn::GetStackOutput``) render as their output name, which embeds the
    producing resource's logical id.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return f"{arg}"
        if fn == "Fn::GetAtt":
            return ".".join(arg) if isinstance(arg, list) else str(arg)
        if fn == "Fn::Join":
            return arg[0].join(render(v) for v in arg[1])
        if fn == "Fn::GetStackOutput":
            return f"{arg['StackName']}:{arg['OutputName']}"
        if fn == "Fn::ImportValue":
            return f"import:{render(arg)}"
    return repr(value)


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements_of(template: dict[str, Any], role_logical_id: str) -> list[dict[str, Any]]:
    """Every statement of every ``AWS::IAM::Policy`` attached to the role."""
    found = []
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        roles = [render(r) for r in resource["Properties"].get("Roles", [])]
        if role_logical_id in roles:
            found.extend(resource["Properties"]["PolicyDocument"]["Statement"])
    return found


def logical_id(template: dict[str, Any], type_: str, contains: str) -> str:
    """The one logical id of ``type_`` whose id contains ``contains``."""
    ids = [k for k, r in template["Resources"].items() if r["Type"] == type_ and contains in k]
    assert len(ids) == 1, f"expected one {type_} containing {contains!r}, got {ids}"
    return ids[0]
