"""A shutdown ends only once nothing can have been handed to the worker unseen, on made-up time: its draining
heartbeat landed (no transfer to it passes after that), then a final, strongly consistent read of its own item
found nothing given. Before, a worker stopped just after a lease was handed to it (SIGTERM or ``drain`` in the
middle of a deploy) finished at once with nothing owned, deregistered, and left that shard unread for a whole
lease duration (the soak audit: 2 of 4 tries, then ``lease_expired``)."""

from __future__ import annotations

from consumer.leases.model import Lease
from consumer.lifecycle.messages import (
    AckGiven,
    ActionResult,
    Deregister,
    HeartbeatResult,
    InboxRead,
    OwnRead,
    ReadInbox,
    ReadOwn,
    Result,
    ShutdownRequested,
    Start,
    WriteKind,
)
from tests.unit.coordinator_support import T0, alive, coordinator, drained, of, worker, writes


def test_a_lease_handed_over_just_before_the_shutdown_is_handed_on_not_left_to_expire() -> None:
    c = coordinator()
    alive(c)
    c.step(T0 + 1, [ShutdownRequested()])  # holding nothing: before, it deregistered here
    acts = c.step(T0 + 1.1, [HeartbeatResult(T0 + 1.05, Result.OK, draining=True)])  # nothing more can come
    assert ReadInbox(final=True) in acts and not of(acts, Deregister)
    given = Lease("s", "sh0", owner=c.id, epoch=4)  # the transfer that landed just before
    acts = c.step(T0 + 1.2, [InboxRead(worker(c.id, inbox=1, given=frozenset({given.key})), final=True)])
    [read] = of(acts, ReadOwn)
    acts = c.step(T0 + 1.3, [OwnRead(read.keys, (given,))])
    assert not of(acts, Start)  # never started: handed straight on (released: a member knows no successor)
    [release] = writes(acts, WriteKind.RELEASE)
    assert release.lease == given and of(acts, AckGiven)
    acts = c.step(T0 + 1.4, [ActionResult(WriteKind.RELEASE, given, Result.OK)])
    assert ReadInbox(final=True) in acts and not of(acts, Deregister)  # read again before leaving
    assert of(c.step(T0 + 1.5, [InboxRead(worker(c.id, inbox=1), final=True)]), Deregister) and c.done


def test_a_heartbeat_from_before_the_shutdown_does_not_count_as_draining() -> None:
    c = coordinator()
    alive(c)
    c.step(T0 + 1, [ShutdownRequested()])
    acts = c.step(T0 + 1.1, [HeartbeatResult(T0 + 0.9, Result.OK)])  # sent before: without `draining`
    assert ReadInbox(final=True) not in acts
    # Nor one sent after it that the lane had taken up just before, without the flag.
    acts = c.step(T0 + 1.15, [HeartbeatResult(T0 + 1.1, Result.OK, draining=False)])
    assert ReadInbox(final=True) not in acts
    assert of(drained(c, T0 + 1.2), Deregister)


def test_when_dynamodb_does_not_answer_the_shutdown_does_not_wait_for_the_read() -> None:
    c = coordinator()
    alive(c)
    c.step(T0 + 1, [ShutdownRequested()])
    acts = c.step(T0 + 1.1, [HeartbeatResult(T0 + 1.05, Result.FAILED, error="unreachable")])
    assert of(acts, Deregister) and c.done  # nothing could be read nor handed on anyway


def test_a_final_read_that_fails_ends_the_wait_too() -> None:
    c = coordinator()
    alive(c)
    c.step(T0 + 1, [ShutdownRequested()])
    assert ReadInbox(final=True) in c.step(T0 + 1.1, [HeartbeatResult(T0 + 1.05, Result.OK, draining=True)])
    acts = c.step(T0 + 1.2, [InboxRead(None, error="throttled", final=True)])
    assert of(acts, Deregister)
