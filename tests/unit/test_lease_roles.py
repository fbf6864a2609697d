"""The lease repository, split by role: the five small Protocols cover the whole seam once each, and both
implementations play every role with the Protocols' own signatures (the contract tests then hold them to the
same behaviour)."""

from __future__ import annotations

import inspect

import pytest

from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.memory import InMemoryLeaseRepository
from consumer.leases.repository import (
    AdminRepository,
    DiscoveryRepository,
    LeadershipRepository,
    LeaseRepository,
    LeaseTableRepository,
    MembershipRepository,
)

ROLES = (
    MembershipRepository,
    LeadershipRepository,
    LeaseTableRepository,
    DiscoveryRepository,
    AdminRepository,
)
IMPLEMENTATIONS = (InMemoryLeaseRepository, DynamoDBLeaseRepository)


def _methods(protocol: type) -> set[str]:
    return {n for n, member in vars(protocol).items() if inspect.isfunction(member) and not n.startswith("_")}


def test_the_roles_cover_the_repository_once_each_and_stay_small() -> None:
    names = [name for role in ROLES for name in _methods(role)]
    assert len(names) == len(set(names)), "a method in two roles"
    assert set(names) == {n for n in dir(LeaseRepository) if not n.startswith("_")}
    assert not _methods(LeaseRepository), "the union adds nothing of its own"
    assert all(len(_methods(role)) <= 12 for role in ROLES)


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.__name__)
@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda i: i.__name__)
def test_each_implementation_plays_each_role_with_its_signatures(impl: type, role: type) -> None:
    for name in _methods(role):
        wanted = inspect.signature(getattr(role, name))
        got = inspect.signature(getattr(impl, name))
        assert list(got.parameters) == list(wanted.parameters), f"{impl.__name__}.{name}"
        defaults = [p.default for p in got.parameters.values()]
        assert defaults == [p.default for p in wanted.parameters.values()], f"{impl.__name__}.{name}"


def test_every_role_method_says_what_it_does() -> None:
    missing = [f"{r.__name__}.{n}" for r in ROLES for n in _methods(r) if not getattr(r, n).__doc__]
    assert not missing, missing
