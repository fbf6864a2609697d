"""One contract, two backends: the in-memory fakes must behave like the DynamoDB repository and store.

Every case runs against ``InMemoryLeaseRepository`` + ``InMemoryCheckpointStore`` and against
``DynamoDBLeaseRepository`` + ``DynamoDBCheckpointStore`` on the moto server over HTTP. DynamoDB is the
reference: a case that fails only on ``memory`` is a bug in the fakes.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from consumer.checkpoint.store import CheckpointItem
from consumer.errors import CheckpointRejectedError, WorkerFencedError
from consumer.leases.model import Lease, LeaseState, WorkerItem
from consumer.leases.repository import RELEASE_ALL_MAX, OwnerObservation, TableSnapshot
from consumer.records import SHARD_END, Position
from tests.integration.contract_support import (
    CONFLICTS,
    KEEPING_THE_OWNER,
    OWNERSHIP_CHANGES,
    P1,
    P2,
    P3,
    Backend,
    WallWindow,
    in_step,
    refused,
    state,
)


# -- reads and creation --------------------------------------------------------------------------------
def test_empty_tables(b: Backend) -> None:
    assert b.repo.snapshot() == TableSnapshot((), ())
    assert b.repo.get_worker("w1") is None
    assert b.store.get("s", "sh") is None


def test_create_lease_creates_an_unowned_lease_once(b: Backend) -> None:
    assert b.repo.create_lease(Lease("s", "a", parents=("p1", "p2")))
    assert not b.repo.create_lease(Lease("s", "a"))  # a racing creator: the first one's item stays
    assert b.repo.create_lease(Lease("s", "e", epoch=4, state=LeaseState.ENDED))
    assert b.repo.create_lease(Lease("s", "k", state=LeaseState.ENDED, skipped=True))
    # Only the creation fields are stored: an ownership begins with a take, never with a create.
    busy = Lease("s", "o", "w", 0, LeaseState.ACTIVE, (), "x", 5, "1/0", 6)
    assert b.repo.create_lease(busy)
    assert state(b, Lease("s", "a")) == (
        [
            Lease("s", "a", parents=("p1", "p2")),
            Lease("s", "e", epoch=4, state=LeaseState.ENDED),
            Lease("s", "k", state=LeaseState.ENDED, skipped=True),
            Lease("s", "o"),
        ],
        [],
        [None],  # the first ownership change creates the checkpoint item
    )


# -- membership ----------------------------------------------------------------------------------------
def test_register_worker_starts_its_counters_at_zero_once(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1", 7, 3, 2, True, 4, 1234, 99, True, {"az": "a"}))
    assert b.worker("w1") == WorkerItem("w1", started_ms=1234)
    assert b.repo.snapshot().workers == (WorkerItem("w1", started_ms=1234),)
    refused(b, lambda: b.repo.register_worker(WorkerItem("w1")))


def test_heartbeat_counts_and_records_what_the_worker_reports(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1", started_ms=10))
    with WallWindow() as window:
        assert b.repo.heartbeat("w1", 0, 3, False) == 1
    item = b.worker("w1")
    assert (item.heartbeat, item.generation, item.lease_count, item.draining) == (1, 0, 3, False)
    assert item.heartbeat_ms in window
    assert b.repo.heartbeat("w1", 0, 0, True) == 2
    item = b.worker("w1")
    assert (item.heartbeat, item.lease_count, item.draining, item.started_ms) == (2, 0, True, 10)


def test_heartbeat_publishes_the_gone_streams_of_a_leader_and_removes_them_with_an_empty_set(
    b: Backend,
) -> None:
    b.repo.register_worker(WorkerItem("w1"))
    b.repo.heartbeat("w1", 0, 0, False, gone=frozenset({"s1", "s2"}))
    assert b.worker("w1").gone_streams == frozenset({"s1", "s2"})
    assert b.repo.snapshot().workers[0].gone_streams == frozenset({"s1", "s2"})
    b.repo.heartbeat("w1", 0, 0, False, gone=frozenset({"s2"}))  # replaced, not added to
    assert b.worker("w1").gone_streams == frozenset({"s2"})
    b.repo.heartbeat("w1", 0, 0, False, progress={})  # with the progress too; an empty set removes them
    assert b.worker("w1").gone_streams == frozenset()
    b.repo.heartbeat("w1", 0, 0, False)  # nothing to remove: fine
    assert b.worker("w1").heartbeat == 4


def test_heartbeat_is_fenced_on_another_generation_or_a_missing_item(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1"))
    with pytest.raises(WorkerFencedError):
        b.repo.heartbeat("w1", 1, 0, False)
    with pytest.raises(WorkerFencedError):
        b.repo.heartbeat("ghost", 0, 0, False)
    assert b.worker("w1").heartbeat == 0
    assert b.repo.get_worker("ghost") is None  # a failed heartbeat does not create the item


def test_a_take_from_a_dead_owner_fences_its_next_heartbeat(b: Backend) -> None:
    lease = b.owned("sh", "dead")
    b.repo.register_worker(WorkerItem("w2"))
    beat = b.repo.heartbeat("dead", 0, 1, False)
    b.repo.take(lease, "w2", OwnerObservation("dead", beat))
    assert b.worker("dead").generation == 1
    with pytest.raises(WorkerFencedError):
        b.repo.heartbeat("dead", 0, 1, False)
    assert b.worker("dead").heartbeat == beat
    assert b.repo.heartbeat("dead", 1, 0, False) == beat + 1  # after reconciling on the new generation


def test_deregister_worker_deletes_the_item_and_tolerates_an_absent_one(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1"))
    b.repo.register_worker(WorkerItem("w2"))
    b.repo.deregister_worker("w1")
    assert b.repo.snapshot().workers == (WorkerItem("w2"),)
    b.repo.deregister_worker("w1")
    b.repo.deregister_worker("never")
    assert b.repo.snapshot().workers == (WorkerItem("w2"),)


def test_forget_worker_deletes_only_a_still_silent_item(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1"))
    seen = b.worker("w1")
    b.repo.heartbeat("w1", 0, 0, False)
    refused(b, lambda: b.repo.forget_worker(seen))  # it beat since it was seen: alive
    seen = b.worker("w1")
    b.repo.forget_worker(seen)
    assert b.repo.get_worker("w1") is None
    refused(b, lambda: b.repo.forget_worker(seen))  # already gone


def test_forget_worker_refuses_an_item_fenced_since_it_was_seen(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    seen = b.worker("w1")
    b.repo.take(lease, "w2", OwnerObservation("w1", seen.heartbeat))  # same heartbeat, generation + 1
    refused(b, lambda: b.repo.forget_worker(seen))
    b.repo.forget_worker(b.worker("w1"))
    assert b.repo.get_worker("w1") is None


# -- take ----------------------------------------------------------------------------------------------
def test_take_an_unowned_lease(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1"))
    b.repo.create_lease(Lease("s", "sh", parents=("p",)))
    taken = b.repo.take(b.stored(Lease("s", "sh")), "w1", None)
    assert taken == Lease("s", "sh", "w1", 1, parents=("p",)) == b.stored(taken)
    assert b.checkpoint(taken) == CheckpointItem("s", "sh", 1, None)


def test_take_from_a_dead_owner_whose_heartbeat_stood_still(b: Backend) -> None:
    lease = b.owned("sh", "dead")
    b.store.save("s", "sh", lease.epoch, P1)
    b.repo.register_worker(WorkerItem("w2"))
    seen = b.worker("dead").heartbeat
    b.repo.heartbeat("dead", 0, 1, False)
    refused(b, lambda: b.repo.take(lease, "w2", OwnerObservation("dead", seen)), lease)  # alive after all
    seen = b.worker("dead").heartbeat
    taken = b.repo.take(lease, "w2", OwnerObservation("dead", seen))
    assert taken == Lease("s", "sh", "w2", 2) == b.stored(taken)
    assert in_step(b, taken).position == P1
    assert b.worker("dead").generation == 1


def test_take_from_a_dead_owner_whose_item_is_absent(b: Backend) -> None:
    lease = b.owned("sh", "gone")
    b.repo.register_worker(WorkerItem("w2"))
    b.repo.deregister_worker("gone")
    taken = b.repo.take(lease, "w2", OwnerObservation("gone", None))
    assert taken == Lease("s", "sh", "w2", 2) == b.stored(taken)
    in_step(b, taken)
    assert b.repo.get_worker("gone") is None  # checking its absence does not create it


def test_take_is_refused_when_the_owner_seen_absent_is_back(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    b.repo.deregister_worker("w1")
    b.repo.register_worker(WorkerItem("w1"))
    refused(b, lambda: b.repo.take(lease, "w2", OwnerObservation("w1", None)), lease)


def test_take_is_refused_when_the_owner_seen_beating_is_gone(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    b.repo.deregister_worker("w1")
    refused(b, lambda: b.repo.take(lease, "w2", OwnerObservation("w1", 0)), lease)


def test_a_reregistered_worker_whose_counter_repeats_the_value_seen_is_not_fenced(b: Backend) -> None:
    """Forgotten, then registered again under the same id: its counter restarts and may reach the value
    a taker last watched; the observation names the old incarnation, so neither a take nor a forget of
    the new item goes through."""
    lease = b.owned("sh", "w2")  # w2 holds a lease; w1 is the one that comes back
    b.repo.register_worker(WorkerItem("w1", incarnation="first"))
    for _ in range(3):
        b.repo.heartbeat("w1", 0, 1, False)
    old = b.worker("w1")
    assert (old.heartbeat, old.incarnation) == (3, "first")
    mine = b.repo.take(b.repo.release(lease), "w1", None)
    b.repo.forget_worker(old)  # the leader forgot it after a long silence
    b.repo.register_worker(WorkerItem("w1", incarnation="second"))
    for _ in range(3):
        b.repo.heartbeat("w1", 0, 1, False)
    assert (b.worker("w1").heartbeat, b.worker("w1").incarnation) == (3, "second")  # the same counter
    refused(b, lambda: b.repo.take(mine, "w2", OwnerObservation("w1", 3, "first")), mine)
    refused(b, lambda: b.repo.forget_worker(old))
    assert b.worker("w1").generation == 0  # not fenced
    taken = b.repo.take(mine, "w2", OwnerObservation("w1", 3, "second"))  # the right incarnation: fenced
    assert taken.owner == "w2" and b.worker("w1").generation == 1


def test_of_two_racing_takes_only_the_first_wins(b: Backend) -> None:
    for worker in ("a", "b", "c"):
        b.repo.register_worker(WorkerItem(worker))
    b.repo.create_lease(Lease("s", "sh"))
    seen = b.stored(Lease("s", "sh"))
    won = b.repo.take(seen, "a", None)
    refused(b, lambda: b.repo.take(seen, "b", None), seen)
    assert b.stored(seen) == won
    # Two takers that both saw the owner dead: the loser must not bump the generation a second time.
    beat = b.worker("a").heartbeat
    again = b.repo.take(won, "b", OwnerObservation("a", beat))
    refused(b, lambda: b.repo.take(won, "c", OwnerObservation("a", beat)), won)
    assert b.stored(won) == again
    assert b.worker("a").generation == 1


# -- every ownership change refuses every stale view ---------------------------------------------------
@pytest.mark.parametrize("conflict", CONFLICTS)
@pytest.mark.parametrize("change", OWNERSHIP_CHANGES)
def test_ownership_changes_refuse_a_lease_that_is_not_as_seen(b: Backend, change: str, conflict: str) -> None:
    view = CONFLICTS[conflict](b)
    if b.repo.get_worker("w2") is None:
        b.repo.register_worker(WorkerItem("w2"))
    current = replace(view, shard_id="sh")
    refused(b, lambda: OWNERSHIP_CHANGES[change](b, view), current)


# -- transfer, release ---------------------------------------------------------------------------------
def test_transfer_moves_the_lease_to_a_woken_successor(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    b.store.save("s", "sh", lease.epoch, P1)
    asked = b.repo.request_handoff(lease, "w2", 1234)
    inbox = b.worker("w2").inbox
    moved = b.repo.transfer(asked, "w2")
    assert moved == Lease("s", "sh", "w2", 2) == b.stored(moved)  # the request went with the ownership
    assert b.worker("w2").inbox == inbox + 1
    assert in_step(b, moved).position == P1
    with pytest.raises(CheckpointRejectedError) as info:
        b.store.save("s", "sh", lease.epoch, P2)  # the previous owner is fenced from this instant on
    assert info.value.stale_epoch
    b.store.save("s", "sh", moved.epoch, P2)
    assert in_step(b, moved).position == P2


def test_transfer_to_an_unregistered_successor_is_refused(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    refused(b, lambda: b.repo.transfer(lease, "nobody"), lease)
    assert b.repo.get_worker("nobody") is None


def test_transfer_to_a_draining_successor_is_refused(b: Backend) -> None:
    """A worker that is shutting down would not start what it is given: the lease would wait for expiry."""
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    b.repo.heartbeat("w2", 0, 0, True)
    refused(b, lambda: b.repo.transfer(lease, "w2"), lease)


def test_release_gives_the_lease_up_and_keeps_the_position(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    b.store.save("s", "sh", lease.epoch, P1)
    saved = in_step(b, lease)
    asked = b.repo.request_handoff(lease, "w2", 1234)
    released = b.repo.release(asked)
    assert released == Lease("s", "sh", None, 2) == b.stored(released)
    kept = in_step(b, released)
    assert (kept.position, kept.updated_ms) == (P1, saved.updated_ms)  # the position is not rewritten
    with pytest.raises(CheckpointRejectedError) as info:
        b.store.save("s", "sh", lease.epoch, P2)
    assert info.value.stale_epoch
    retaken = b.repo.take(released, "w2", None)
    assert retaken == Lease("s", "sh", "w2", 3) == b.stored(retaken)
    assert in_step(b, retaken).position == P1


def test_release_all_releases_every_lease_and_keeps_their_positions(b: Backend) -> None:
    leases = [b.owned(f"sh{i}", "w1") for i in range(RELEASE_ALL_MAX)]  # as many as one transaction holds
    b.store.save("s", "sh0", leases[0].epoch, P1)
    released = b.repo.release_all(leases)
    assert released == tuple(Lease("s", f"sh{i}", None, 2) for i in range(RELEASE_ALL_MAX))
    assert [b.stored(lease) for lease in released] == list(released)
    assert in_step(b, released[0]).position == P1
    for lease in released[1:]:
        in_step(b, lease)
    assert b.repo.release_all([]) == ()


def test_release_all_releases_none_if_one_lease_moved_on(b: Backend) -> None:
    a, c = b.owned("a", "w1"), b.owned("c", "w1")
    moved = b.repo.take(b.repo.release(b.owned("m", "w1")), "w2", None)
    stale = replace(moved, owner="w1", epoch=moved.epoch - 1)  # w1's view from before it let go
    refused(b, lambda: b.repo.release_all([a, stale, c]), a, moved, c)


def test_release_all_refuses_what_dynamodb_would_before_writing(b: Backend) -> None:
    leases = [b.owned(f"sh{i}", "w1") for i in range(RELEASE_ALL_MAX + 1)]
    before = state(b, *leases)
    with pytest.raises(ValueError, match="at most 50"):
        b.repo.release_all(leases)
    with pytest.raises(ValueError, match="twice"):
        b.repo.release_all([leases[0], leases[1], leases[0]])
    assert state(b, *leases) == before


# -- hand-off requests ---------------------------------------------------------------------------------
def test_request_handoff_asks_once_and_wakes_the_owner(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    b.repo.register_worker(WorkerItem("w3"))
    inbox = b.worker("w1").inbox
    asked = b.repo.request_handoff(lease, "w2", 1234)
    assert asked == replace(lease, handoff_to="w2", handoff_requested_ms=1234) == b.stored(asked)
    assert b.worker("w1").inbox == inbox + 1
    in_step(b, asked)  # a request is not an ownership change
    refused(b, lambda: b.repo.request_handoff(asked, "w3", 99), lease)  # somebody asked first
    refused(b, lambda: b.repo.request_handoff(lease, "w3", 99), lease)  # also from the older view


def test_clear_handoff_declines_the_request(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    asked = b.repo.request_handoff(lease, "w2", 1234)
    cleared = b.repo.clear_handoff(asked)
    assert cleared == lease == b.stored(cleared)
    assert b.repo.request_handoff(cleared, "w2", 2000) == b.stored(cleared)  # a new request may come


def test_mark_ended_ends_the_lease_and_drops_the_request(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    b.store.save("s", "sh", lease.epoch, SHARD_END)
    asked = b.repo.request_handoff(lease, "w2", 1234)
    ended = b.repo.mark_ended(asked)
    assert ended == replace(lease, state=LeaseState.ENDED) == b.stored(ended)
    assert in_step(b, ended).position == SHARD_END


def test_mark_halted_is_kept_until_the_ownership_moves(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    halted = b.repo.mark_halted(lease, "495903/0", 5000)
    assert halted == replace(lease, halted_at="495903/0", halted_since_ms=5000) == b.stored(halted)
    b.repo.heartbeat("w1", 0, 1, False)
    assert b.stored(lease) == halted


@pytest.mark.parametrize("change", [*OWNERSHIP_CHANGES, "take-from-dead"])
def test_an_ownership_change_clears_the_halt(b: Backend, change: str) -> None:
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    halted = b.repo.mark_halted(lease, "495903/0", 5000)
    if change == "take-from-dead":
        moved = b.repo.take(halted, "w2", OwnerObservation("w1", b.worker("w1").heartbeat))
    else:
        moved = OWNERSHIP_CHANGES[change](b, halted)
    assert moved == b.stored(moved)
    assert (moved.halted_at, moved.halted_since_ms, moved.epoch) == (None, None, lease.epoch + 1)
    in_step(b, moved)


@pytest.mark.parametrize("conflict", ["stale-epoch", "wrong-owner", "absent"])
@pytest.mark.parametrize("update", KEEPING_THE_OWNER)
def test_updates_that_keep_the_owner_refuse_a_lease_that_is_not_as_seen(
    b: Backend, update: str, conflict: str
) -> None:
    view = CONFLICTS[conflict](b)
    if b.repo.get_worker("w2") is None:
        b.repo.register_worker(WorkerItem("w2"))
    refused(b, lambda: KEEPING_THE_OWNER[update](b, view), replace(view, shard_id="sh"))


@pytest.mark.parametrize("case", ["unowned", "owner-unregistered"])
def test_request_handoff_needs_a_registered_owner(b: Backend, case: str) -> None:
    b.repo.register_worker(WorkerItem("w2"))
    if case == "unowned":
        b.repo.create_lease(Lease("s", "sh"))
        lease = b.stored(Lease("s", "sh"))
    else:
        lease = b.owned("sh", "w1")
        b.repo.deregister_worker("w1")
    refused(b, lambda: b.repo.request_handoff(lease, "w2", 1234), lease)


@pytest.mark.parametrize("update", KEEPING_THE_OWNER)
def test_updates_that_keep_the_owner_accept_an_ended_lease(b: Backend, update: str) -> None:
    """Only ownership changes require ACTIVE; these are conditional on owner and epoch alone."""
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    ended = b.repo.mark_ended(lease)
    if update == "clear_handoff":
        ended = b.repo.request_handoff(ended, "w2", 1234)
    out = KEEPING_THE_OWNER[update](b, ended)
    assert b.stored(out).state is LeaseState.ENDED
    assert (b.stored(out).owner, b.stored(out).epoch) == (lease.owner, lease.epoch)


# What the caller's view lacks when it calls the update: the stored halt, or a request it has not read yet.
RETURN_CASES = ["request_handoff-halted", "clear_handoff-halted", "mark_ended-halted", "mark_halted-asked"]


@pytest.mark.parametrize("case", RETURN_CASES)
def test_updates_that_keep_the_owner_return_what_is_stored(b: Backend, case: str) -> None:
    update, _, setup = case.partition("-")
    lease = b.owned("sh", "w1")
    b.repo.register_worker(WorkerItem("w2"))
    if setup == "halted":
        view = b.repo.mark_halted(lease, "495903/0", 5000)
        if update == "clear_handoff":
            view = b.repo.request_handoff(view, "w2", 1234)
    else:
        b.repo.request_handoff(lease, "w2", 1234)  # written after the owner's read: epoch and owner unchanged
        view = lease
    out = KEEPING_THE_OWNER[update](b, view)
    assert out == b.stored(out)


# -- retiring, draining, replaying ---------------------------------------------------------------------
def test_delete_lease_removes_the_lease_and_its_checkpoint(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    other = b.owned("other", "w1")
    b.store.save("s", "sh", lease.epoch, SHARD_END)
    ended = b.repo.mark_ended(lease)
    b.repo.delete_lease(ended)
    assert (b.lease("s", "sh"), b.checkpoint(lease)) == (None, None)
    assert b.repo.snapshot().leases == (other,)
    in_step(b, other)
    b.repo.delete_lease(ended)  # already gone: nothing to do
    assert b.repo.create_lease(Lease("s", "sh"))  # the key is free again, with a clean checkpoint
    assert in_step(b, b.repo.take(Lease("s", "sh"), "w1", None)).position is None


def test_restart_lease_starts_an_owned_lease_afresh_for_a_stream_created_again(b: Backend) -> None:
    created = Lease("s", "sh", parents=("p",), first_sequence="100")
    b.repo.create_lease(created)
    for worker in ("w1", "w2"):
        b.repo.register_worker(WorkerItem(worker))
    before = b.stored(created)
    lease = b.repo.take(before, "w1", None)
    b.store.save("s", "sh", lease.epoch, P2)
    asked = b.repo.request_handoff(lease, "w2", 5)
    inbox = b.worker("w1").inbox
    fresh = Lease("s", "sh", first_sequence="200")
    refused(b, lambda: b.repo.restart_lease(before, fresh), lease)  # read before the take
    restarted = b.repo.restart_lease(asked, fresh)
    assert restarted == Lease("s", "sh", None, lease.epoch + 1, first_sequence="200") == b.stored(restarted)
    assert b.checkpoint(restarted) == CheckpointItem(
        "s", "sh", restarted.epoch, None
    )  # the old position is gone
    assert b.worker("w1").inbox == inbox + 1  # the old owner is woken
    with pytest.raises(CheckpointRejectedError):
        b.store.save("s", "sh", lease.epoch, P3)  # and its next write refused
    assert in_step(b, b.repo.take(restarted, "w2", None)).position is None  # read from the initial position


def test_restart_lease_opens_an_ended_lease_or_skips_as_told(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    b.store.save("s", "sh", lease.epoch, SHARD_END)
    ended = b.repo.mark_ended(lease)
    opened = b.repo.restart_lease(ended, Lease("s", "sh", first_sequence="7"))
    assert opened == Lease("s", "sh", None, ended.epoch + 1, first_sequence="7") == b.stored(opened)
    assert b.checkpoint(opened) == CheckpointItem("s", "sh", opened.epoch, None)
    skipped = Lease("s", "sh", state=LeaseState.ENDED, skipped=True, first_sequence="8")
    again = b.repo.restart_lease(opened, skipped)
    assert again == replace(skipped, epoch=opened.epoch + 1) == b.stored(again)
    back = b.repo.restart_lease(again, Lease("s", "sh", first_sequence="9"))
    assert (
        back == Lease("s", "sh", epoch=again.epoch + 1, first_sequence="9") == b.stored(back)
    )  # not skipped


def test_request_drain_flags_and_wakes_a_registered_worker(b: Backend) -> None:
    b.repo.register_worker(WorkerItem("w1"))
    b.repo.request_drain("w1")
    item = b.worker("w1")
    assert (item.drain_requested, item.inbox, item.draining) == (True, 1, False)
    refused(b, lambda: b.repo.request_drain("nobody"))
    assert b.repo.get_worker("nobody") is None


def test_reset_checkpoint_takes_the_lease_and_moves_the_checkpoint_back(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    b.store.save("s", "sh", lease.epoch, P2)
    with WallWindow() as window:
        reset = b.repo.reset_checkpoint(lease, P1)
    assert reset == Lease("s", "sh", None, 2) == b.stored(reset)
    checkpoint = in_step(b, reset)
    assert checkpoint.position == P1
    assert checkpoint.updated_ms in window
    with pytest.raises(CheckpointRejectedError) as info:
        b.store.save("s", "sh", lease.epoch, P3)  # the old owner's next write is refused
    assert info.value.stale_epoch
    b.repo.register_worker(WorkerItem("w2"))
    taken = b.repo.take(reset, "w2", None)
    assert in_step(b, taken).position == P1  # the next owner starts from the replayed position
    b.store.save("s", "sh", taken.epoch, P2)


def test_reset_checkpoint_of_a_lease_never_owned(b: Backend) -> None:
    b.repo.create_lease(Lease("s", "sh"))
    reset = b.repo.reset_checkpoint(Lease("s", "sh"), P1)
    assert reset == Lease("s", "sh", None, 1) == b.stored(reset)
    assert in_step(b, reset).position == P1


# -- checkpoint store ----------------------------------------------------------------------------------
def test_save_needs_the_current_epoch(b: Backend) -> None:
    b.repo.create_lease(Lease("s", "sh"))
    with pytest.raises(CheckpointRejectedError) as info:
        b.store.save("s", "sh", 0, P1)  # never owned: no checkpoint item to write to
    assert info.value.stale_epoch
    assert b.store.get("s", "sh") is None
    lease = b.repo.take(Lease("s", "sh"), "w1", None)
    for epoch in (lease.epoch - 1, lease.epoch + 1):
        with pytest.raises(CheckpointRejectedError) as info:
            b.store.save("s", "sh", epoch, P1)
        assert info.value.stale_epoch
    assert b.store.get("s", "sh") == CheckpointItem("s", "sh", lease.epoch, None)
    with WallWindow() as window:
        b.store.save("s", "sh", lease.epoch, P1)
    saved = b.store.get("s", "sh")
    assert saved is not None
    assert (saved.stream, saved.shard_id, saved.epoch, saved.position) == ("s", "sh", lease.epoch, P1)
    assert saved.updated_ms in window


def test_save_never_moves_back(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    order = [Position("99", 9), Position("100", 2), Position("100", 3), Position("100", 3), P1, SHARD_END]
    for position in order:  # forward, or the same position again
        b.store.save("s", "sh", lease.epoch, position)
    for behind in (Position("100", 3), Position("99", 9), Position("9" * 56, 99), P3):
        with pytest.raises(CheckpointRejectedError) as info:
            b.store.save("s", "sh", lease.epoch, behind)
        assert not info.value.stale_epoch
    assert in_step(b, lease).position == SHARD_END


def test_a_write_both_stale_and_behind_is_reported_as_stale(b: Backend) -> None:
    lease = b.owned("sh", "w1")
    b.store.save("s", "sh", lease.epoch, P2)
    b.repo.release(lease)
    with pytest.raises(CheckpointRejectedError) as info:
        b.store.save("s", "sh", lease.epoch, P1)
    assert info.value.stale_epoch


def test_the_checkpoint_epoch_follows_the_lease_through_every_ownership_change(b: Backend) -> None:
    lease = b.owned("sh", "a")
    b.repo.register_worker(WorkerItem("b"))
    b.store.save("s", "sh", lease.epoch, P1)
    steps = [
        lambda x: b.repo.transfer(x, "b"),
        lambda x: b.repo.take(x, "a", OwnerObservation("b", b.worker("b").heartbeat)),
        b.repo.release,
        lambda x: b.repo.take(x, "b", None),
        lambda x: b.repo.reset_checkpoint(x, P2),
        lambda x: b.repo.take(x, "a", None),
    ]
    for number, step in enumerate(steps, start=2):
        lease = step(lease)
        assert lease.epoch == number
        assert lease == b.stored(lease)
        in_step(b, lease)
    assert in_step(b, lease).position == P2
