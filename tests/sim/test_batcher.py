"""The shared batcher core against Triton's documented dynamic-batching rules (triton.md §1.2)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poolpilot.triton.batcher import BatcherConfig, BatchQueue, Dispatch, QueuePolicy


def cfg(**kw: Any) -> BatcherConfig:
    kw.setdefault("max_batch_size", 8)
    return BatcherConfig(**kw)


def drain(q: BatchQueue[Any], now_s: float) -> list[tuple[Any, ...]]:
    """Batches an idle server with one instance would run at `now_s`, one after another."""
    batches: list[tuple[Any, ...]] = []
    while True:
        d = q.next_action(now_s, 1)
        if not d.execute:
            return batches
        batches.append(d.execute)


def test_delay_is_measured_from_the_oldest_request() -> None:
    q: BatchQueue[str] = BatchQueue(cfg(max_queue_delay_us=10_000))
    q.enqueue("a", now_s=0.0)
    q.enqueue("b", now_s=0.006)
    d = q.next_action(0.009, 1)
    assert d.execute == ()
    assert d.wake_at_s == pytest.approx(0.010)  # a's expiry, not b's (0.016)
    d = q.next_action(0.010, 1)
    assert d.execute == ("a", "b")
    assert len(q) == 0


def test_preferred_size_fires_at_once_even_with_a_long_delay() -> None:
    q: BatchQueue[int] = BatchQueue(cfg(preferred_batch_sizes=(4,), max_queue_delay_us=1_000_000))
    for i in range(3):
        q.enqueue(i, now_s=0.0)
        assert q.next_action(0.0, 1).execute == ()
    q.enqueue(3, now_s=0.001)
    assert q.next_action(0.001, 1).execute == (0, 1, 2, 3)


def test_largest_reachable_preferred_size_is_chosen() -> None:
    q: BatchQueue[int] = BatchQueue(cfg(preferred_batch_sizes=(2, 4), max_queue_delay_us=1_000_000))
    for i in range(5):
        q.enqueue(i, now_s=0.0)
    assert q.next_action(0.0, 1).execute == (0, 1, 2, 3)
    assert len(q) == 1


def test_expired_delay_sends_everything_pending_past_the_preferred_size() -> None:
    q: BatchQueue[int] = BatchQueue(cfg(preferred_batch_sizes=(2,), max_queue_delay_us=5_000))
    for i in range(2):
        q.enqueue(i, now_s=0.0)
    # An instance was busy until after the delay expired: the batch is not cut at the preferred size.
    q.enqueue(2, now_s=0.001)
    assert q.next_action(0.006, 1).execute == (0, 1, 2)


def test_max_batch_size_counts_the_batch_dimension() -> None:
    q: BatchQueue[str] = BatchQueue(cfg(max_batch_size=8))
    q.enqueue("a", now_s=0.0, batch_size=3)
    q.enqueue("b", now_s=0.0, batch_size=3)
    q.enqueue("c", now_s=0.0, batch_size=3)
    assert drain(q, 0.0) == [("a", "b"), ("c",)]
    assert q.queued_batch_size == 0


def test_full_max_batch_goes_at_once_with_a_delay() -> None:
    q: BatchQueue[str] = BatchQueue(cfg(max_batch_size=8, max_queue_delay_us=1_000_000))
    q.enqueue("a", now_s=0.0, batch_size=4)
    assert q.next_action(0.0, 1).execute == ()
    q.enqueue("b", now_s=0.0, batch_size=4)
    assert q.next_action(0.0, 1).execute == ("a", "b")


def test_batch_that_cannot_grow_goes_at_once() -> None:
    q: BatchQueue[str] = BatchQueue(cfg(max_batch_size=8, max_queue_delay_us=1_000_000))
    q.enqueue("a", now_s=0.0, batch_size=5)
    q.enqueue("b", now_s=0.0, batch_size=5)  # 10 > 8: a cannot join b
    assert q.next_action(0.0, 1).execute == ("a",)


def test_zero_delay_dispatches_whatever_is_there() -> None:
    q: BatchQueue[int] = BatchQueue(cfg(max_batch_size=64))
    q.enqueue(1, now_s=0.0)
    q.enqueue(2, now_s=0.0)
    d = q.next_action(0.0, 1)
    assert d.execute == (1, 2)
    assert d.wake_at_s is None


def test_no_free_instance_means_no_batch() -> None:
    q: BatchQueue[int] = BatchQueue(cfg())
    q.enqueue(1, now_s=0.0)
    assert q.next_action(0.0, 0) == Dispatch()
    assert len(q) == 1


def test_oversized_request_is_an_error_naming_the_field() -> None:
    q: BatchQueue[int] = BatchQueue(cfg(max_batch_size=4))
    with pytest.raises(ValueError, match="batch_size"):
        q.enqueue(1, now_s=0.0, batch_size=5)


def test_priority_level_one_goes_first_and_fifo_within_a_level() -> None:
    q: BatchQueue[str] = BatchQueue(cfg(max_batch_size=1, priority_levels=2, default_priority_level=2))
    q.enqueue("low1", now_s=0.0, priority=2)
    q.enqueue("dflt", now_s=0.001, priority=0)  # 0 ⇒ default level 2
    q.enqueue("high1", now_s=0.002, priority=1)
    q.enqueue("high2", now_s=0.003, priority=1)
    q.enqueue("oor", now_s=0.004, priority=9)  # above priority_levels ⇒ default level
    assert [b[0] for b in drain(q, 0.01)] == ["high1", "high2", "low1", "dflt", "oor"]


def test_higher_priority_arrival_joins_a_waiting_batch_first() -> None:
    q: BatchQueue[str] = BatchQueue(
        cfg(max_batch_size=2, max_queue_delay_us=100_000, priority_levels=2, default_priority_level=2)
    )
    q.enqueue("l1", now_s=0.0)
    assert q.next_action(0.0, 1).execute == ()
    q.enqueue("l2", now_s=0.001)
    q.enqueue("h", now_s=0.001, priority=1)
    assert q.next_action(0.001, 1).execute == ("h", "l1")


def test_timeout_reject_answers_the_expired_request() -> None:
    pol = QueuePolicy(default_timeout_us=5_000)
    q: BatchQueue[str] = BatchQueue(cfg(max_batch_size=1, default_queue_policy=pol))
    q.enqueue("old", now_s=0.0)
    q.enqueue("new", now_s=0.004)
    assert q.next_action(0.003, 0).execute == ()  # instance busy
    d = q.next_action(0.006, 1)
    assert d.rejected == ("old",)
    assert d.execute == ("new",)
    assert len(q) == 0


def test_timeout_delay_moves_the_request_behind_the_others() -> None:
    pol = QueuePolicy(timeout_action="DELAY", default_timeout_us=5_000)
    q: BatchQueue[str] = BatchQueue(cfg(max_batch_size=1, default_queue_policy=pol))
    q.enqueue("old", now_s=0.0)
    q.enqueue("new", now_s=0.004)
    d = q.next_action(0.0055, 1)
    assert d.rejected == ()
    assert d.execute == ("new",)
    # Once delayed it never times out: it is served, not rejected.
    d = q.next_action(10.0, 1)
    assert d.execute == ("old",)
    assert d.rejected == ()


def test_wake_at_includes_the_closest_timeout() -> None:
    pol = QueuePolicy(default_timeout_us=20_000)
    q: BatchQueue[int] = BatchQueue(cfg(max_queue_delay_us=100_000, default_queue_policy=pol))
    q.enqueue(1, now_s=0.0)
    assert q.next_action(0.0, 1).wake_at_s == pytest.approx(0.020)
    d = q.next_action(0.020, 1)
    assert d.rejected == (1,)


@pytest.mark.parametrize(
    ("default_us", "allow", "asked_us", "expires_at_s"),
    [
        (10_000, True, 2_000, 0.002),  # a shorter timeout is honoured
        (10_000, True, 50_000, 0.010),  # a longer one is not
        (10_000, False, 2_000, 0.010),  # override not allowed
        (0, True, 2_000, None),  # no default timeout: Triton's code ignores the override
    ],
)
def test_timeout_override_only_lowers(
    default_us: int, allow: bool, asked_us: int, expires_at_s: float | None
) -> None:
    pol = QueuePolicy(default_timeout_us=default_us, allow_timeout_override=allow)
    q: BatchQueue[int] = BatchQueue(cfg(max_batch_size=1, default_queue_policy=pol))
    q.enqueue(1, now_s=0.0, timeout_us=asked_us)
    if expires_at_s is None:
        assert q.next_action(100.0, 1).execute == (1,)
        return
    assert q.next_action(expires_at_s - 1e-4, 0).rejected == ()
    before = q.next_action(expires_at_s - 1e-4, 1)
    assert before.execute == (1,) and before.rejected == ()
    q.enqueue(2, now_s=0.0, timeout_us=asked_us)
    assert q.next_action(expires_at_s, 1).rejected == (2,)


def test_max_queue_size_rejects_at_enqueue_per_level() -> None:
    q: BatchQueue[str] = BatchQueue(
        cfg(
            priority_levels=2,
            default_priority_level=2,
            priority_queue_policy={1: QueuePolicy(max_queue_size=1)},
            default_queue_policy=QueuePolicy(max_queue_size=2),
        )
    )
    assert q.enqueue("h1", now_s=0.0, priority=1)
    assert not q.enqueue("h2", now_s=0.0, priority=1)
    assert q.enqueue("l1", now_s=0.0)
    assert q.enqueue("l2", now_s=0.0)
    assert not q.enqueue("l3", now_s=0.0)
    assert len(q) == 3
    q.next_action(0.0, 1)  # frees the queue
    assert q.enqueue("h3", now_s=0.0, priority=1)


def test_reconfigure_applies_new_settings_to_queued_requests() -> None:
    q: BatchQueue[int] = BatchQueue(cfg(max_queue_delay_us=1_000_000))
    q.enqueue(1, now_s=0.0)
    assert q.next_action(0.0, 1).execute == ()
    q.reconfigure(cfg(max_queue_delay_us=0))
    assert q.next_action(0.0, 1).execute == (1,)


def test_from_model_config_reads_triton_json() -> None:
    c = BatcherConfig.from_model_config(
        {
            "max_batch_size": 64,
            "dynamic_batching": {
                "preferred_batch_size": [16, 32],
                "max_queue_delay_microseconds": "5000",  # gRPC as_json renders int64 as strings
                "preserve_ordering": False,
                "priority_levels": 2,
                "default_priority_level": 2,
                "default_queue_policy": {
                    "timeout_action": "DELAY",
                    "default_timeout_microseconds": 100000,
                    "allow_timeout_override": True,
                    "max_queue_size": 0,
                },
                "priority_queue_policy": {"1": {"timeout_action": "REJECT", "max_queue_size": 10}},
            },
        }
    )
    assert c.max_batch_size == 64
    assert c.preferred_batch_sizes == (16, 32)
    assert c.max_queue_delay_us == 5000
    assert c.policy_for(1) == QueuePolicy(max_queue_size=10)
    assert c.policy_for(2).timeout_action == "DELAY"
    assert c.policy_for(2).default_timeout_us == 100_000


def test_model_without_dynamic_batching_runs_requests_one_by_one() -> None:
    q: BatchQueue[int] = BatchQueue(BatcherConfig.from_model_config({"max_batch_size": 8}))
    q.enqueue(1, now_s=0.0)
    q.enqueue(2, now_s=0.0)
    assert drain(q, 0.0) == [(1,), (2,)]


@pytest.mark.parametrize(
    ("db", "field"),
    [
        ({"preferred_batch_size": [16]}, "preferred"),
        ({"max_queue_delay_microseconds": "soon"}, "max_queue_delay_microseconds"),
        ({"priority_levels": 2, "default_priority_level": 3}, "default_priority_level"),
        ({"priority_levels": 2, "default_priority_level": 1, "priority_queue_policy": {"3": {}}}, "level 3"),
        ({"default_queue_policy": {"timeout_action": "DROP"}}, "timeout_action"),
        ({"default_queue_policy": {"max_queue_sise": 1}}, "max_queue_sise"),
    ],
)
def test_bad_model_config_names_the_field(db: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        BatcherConfig.from_model_config({"max_batch_size": 8, "dynamic_batching": db})


class _Uncached(BatchQueue[Any]):
    """Re-examines the whole queue with the general rules on every call: the reference for the fast paths."""

    def __init__(self, config: BatcherConfig) -> None:
        super().__init__(config)
        self._force_general = True

    def next_action(self, now_s: float, free_instances: int) -> Dispatch[Any]:
        self._invalidate()
        return super().next_action(now_s, free_instances)


_op = st.one_of(
    st.tuples(st.just("enq"), st.sampled_from([1, 1, 1, 2, 3]), st.integers(0, 3), st.floats(0, 0.01)),
    st.tuples(st.just("act"), st.integers(0, 2), st.just(0), st.floats(0, 0.01)),
)


@settings(max_examples=400, deadline=None)
@given(
    ops=st.lists(_op, max_size=60),
    delay_us=st.sampled_from([0, 2_000, 8_000]),
    preferred=st.sampled_from([(), (2,), (3, 6)]),
    timeout_us=st.sampled_from([0, 0, 4_000]),
    action=st.sampled_from(["REJECT", "DELAY"]),
    levels=st.sampled_from([0, 3]),
)
def test_cached_fast_path_decides_like_a_full_examination(
    ops: list[tuple[str, int, int, float]],
    delay_us: int,
    preferred: tuple[int, ...],
    timeout_us: int,
    action: str,
    levels: int,
) -> None:
    c = BatcherConfig(
        max_batch_size=8,
        preferred_batch_sizes=preferred,
        max_queue_delay_us=delay_us,
        priority_levels=levels,
        default_priority_level=2 if levels else 0,
        default_queue_policy=QueuePolicy(
            timeout_action="DELAY" if action == "DELAY" else "REJECT", default_timeout_us=timeout_us
        ),
    )
    fast: BatchQueue[int] = BatchQueue(c)
    ref: _Uncached = _Uncached(c)
    now = 0.0
    served: list[int] = []
    for n, (kind, a, b, dt) in enumerate(ops):
        now += dt
        if kind == "enq":
            assert fast.enqueue(n, now_s=now, batch_size=a, priority=b) == ref.enqueue(
                n, now_s=now, batch_size=a, priority=b
            )
        else:
            d1, d2 = fast.next_action(now, a), ref.next_action(now, a)
            assert (d1.execute, d1.rejected, d1.wake_at_s) == (d2.execute, d2.rejected, d2.wake_at_s)
            served.extend(d1.execute)
            served.extend(d1.rejected)
        assert len(fast) == len(ref)
    assert len(set(served)) == len(served)  # nothing is answered twice
