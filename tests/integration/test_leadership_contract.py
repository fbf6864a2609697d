"""The leadership item, the ``given`` set, and the leader's writes on behalf of others: one contract, two
backends (the in-memory fakes and DynamoDB on the moto server over HTTP)."""

from __future__ import annotations

import pytest

from consumer.errors import LeaseConflictError
from consumer.leases.model import Leader, Lease, WorkerItem
from consumer.leases.repository import OwnerObservation
from tests.integration.contract_support import (
    Backend,
    in_step,
    refused,
)


def test_the_first_claim_of_an_absent_item_wins_and_a_second_one_is_refused(b: Backend) -> None:
    assert b.repo.get_leader() is None
    assert b.repo.claim_leader(None, "w1", None) == Leader("w1", 1)
    assert b.repo.get_leader() == Leader("w1", 1)
    with pytest.raises(LeaseConflictError):
        b.repo.claim_leader(None, "w2", None)
    assert b.repo.get_leader() == Leader("w1", 1)


def test_resigning_leaves_the_item_unowned_for_the_next_claim(b: Backend) -> None:
    mine = b.repo.claim_leader(None, "w1", None)
    with pytest.raises(LeaseConflictError):
        b.repo.resign_leader(Leader("w1", 7))  # not as it is stored: nothing changes
    b.repo.resign_leader(mine)
    assert b.repo.get_leader() == Leader(None, 2)
    with pytest.raises(LeaseConflictError):
        b.repo.claim_leader(Leader(None, 1), "w2", None)  # an older view of it
    assert b.repo.claim_leader(Leader(None, 2), "w2", None) == Leader("w2", 3)


def test_a_claim_from_a_dead_leader_fences_its_worker_item_and_fails_if_it_heartbeat_since(
    b: Backend,
) -> None:
    b.repo.register_worker(WorkerItem("old"))
    b.repo.heartbeat("old", 0, 0, False)
    seen = b.repo.claim_leader(None, "old", None)
    b.repo.heartbeat("old", 0, 0, False)  # heartbeat 2: alive after all
    refused(b, lambda: b.repo.claim_leader(seen, "new", OwnerObservation("old", 1)))
    assert b.repo.claim_leader(seen, "new", OwnerObservation("old", 2)) == Leader("new", 2)
    assert b.worker("old").generation == 1  # its next heartbeat is refused


def test_a_claim_from_a_leader_whose_item_is_gone_requires_it_still_gone(b: Backend) -> None:
    seen = b.repo.claim_leader(None, "old", None)
    b.repo.register_worker(WorkerItem("old"))
    refused(b, lambda: b.repo.claim_leader(seen, "new", OwnerObservation("old", None)))
    b.repo.deregister_worker("old")
    assert b.repo.claim_leader(seen, "new", OwnerObservation("old", None)) == Leader("new", 2)


def test_assign_moves_the_epoch_adds_the_key_to_the_given_set_and_wakes_the_worker(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w2"))
    assert b.repo.create_lease(Lease("s", "sh"))
    new = b.repo.assign(Lease("s", "sh"), "w2", None)
    assert (new.owner, new.epoch) == ("w2", 1)
    assert b.stored(new) == new and in_step(b, new).epoch == 1
    w2 = b.worker("w2")
    assert (w2.inbox, w2.given) == (1, frozenset({new.key}))
    b.repo.ack_given("w2", frozenset({new.key}))
    assert b.worker("w2").given == frozenset()


def test_assign_to_a_draining_or_unregistered_worker_changes_nothing(b: Backend) -> None:
    assert b.repo.create_lease(Lease("s", "sh"))
    refused(b, lambda: b.repo.assign(Lease("s", "sh"), "nobody", None), Lease("s", "sh"))
    b.repo.register_worker(WorkerItem("w2"))
    b.repo.heartbeat("w2", 0, 0, True)
    refused(b, lambda: b.repo.assign(Lease("s", "sh"), "w2", None), Lease("s", "sh"))


def test_assign_of_a_dead_owners_lease_fences_it(b: Backend) -> None:
    taken = b.owned("sh", "dead")
    b.repo.heartbeat("dead", 0, 1, False)
    b.repo.register_worker(WorkerItem("w2"))
    refused(b, lambda: b.repo.assign(taken, "w2", OwnerObservation("dead", 0)), taken)
    new = b.repo.assign(taken, "w2", OwnerObservation("dead", 1))
    assert b.stored(new).owner == "w2" and b.worker("dead").generation == 1


def test_transfer_puts_the_key_in_the_successors_given_set(b: Backend) -> None:
    mine = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    b.repo.transfer(mine, "w2")
    assert b.worker("w2").given == frozenset({mine.key})


def test_a_request_wakes_the_owner_and_the_requester(b: Backend) -> None:
    mine = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    b.repo.request_handoff(mine, "w2", 1234)
    assert b.worker("w1").inbox == 1 and b.worker("w2").inbox == 1
    assert (b.worker("w1").expect, b.worker("w2").expect) == (0, 1)  # only the requester polls fast
    assert b.stored(mine).handoff_to == "w2"


def test_a_release_after_giving_up_names_the_worker_until_the_next_owner(b: Backend) -> None:
    mine = b.owned("sh", "w1")
    released = b.repo.release(mine, given_up=True)
    assert b.stored(released).given_up_by == "w1" and b.stored(released).owner is None
    b.repo.register_worker(WorkerItem("w2"))
    assert b.stored(b.repo.assign(released, "w2", None)).given_up_by is None


def test_get_leases_reads_the_ones_that_exist(b: Backend) -> None:
    one = b.owned("sh1", "w1")
    two = b.owned("sh2", "w1")
    got = b.repo.get_leases((one.key, two.key, "shard#s#missing", one.key))
    assert sorted(got, key=lambda x: x.key) == [b.stored(one), b.stored(two)]
    assert b.repo.get_leases(()) == ()


def test_wake_bumps_a_registered_workers_inbox_only(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1"))
    b.repo.wake("w1")
    assert b.worker("w1").inbox == 1
    refused(b, lambda: b.repo.wake("nobody"))


def test_an_operator_replay_wakes_the_owner(b: Backend) -> None:
    from tests.integration.contract_support import P1

    mine = b.owned("sh", "w1")
    b.repo.reset_checkpoint(mine, P1)
    assert b.worker("w1").inbox == 1


def test_registration_records_the_streams_a_worker_consumes(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1", streams=frozenset({"a", "b"})))
    assert b.worker("w1").streams == frozenset({"a", "b"})
