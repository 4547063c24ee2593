"""Triton's dynamic batcher, once: the queue rules shared by the fleet simulator and the CPU executor.

Pure module (no I/O, no clock, no asyncio). Time is a float in seconds passed in by the caller as
`now_s`: the simulator drives it with its virtual clock, the executor with `time.monotonic()`.
Items are opaque to the batcher (the simulator passes ints, the executor its request objects).

Contract
--------
- `QueuePolicy` / `BatcherConfig` (frozen, validated on construction; `ValueError` names the field).
  `BatcherConfig.from_model_config(cfg)` takes the Triton JSON model config as `GET .../config`
  returns it (or the gRPC `as_json` form with int64 as strings).
- `BatchQueue(config)`:
  - `enqueue(item, *, now_s, batch_size=1, priority=0, timeout_us=None) -> bool`: False means the
    request's priority level is full (`max_queue_size`): answer it at once with 503
    `QUEUE_FULL_MESSAGE`. Raises `ValueError` if `batch_size` is < 1 or > max_batch_size (Triton
    rejects such a request before it reaches the scheduler).
  - `next_action(now_s, free_instances) -> Dispatch`: call it whenever a request arrives, an
    instance frees up, or `now_s` reaches the last `wake_at_s`. `Dispatch.execute` is one batch for
    ONE free instance (call again while instances are free and `execute` is non-empty);
    `Dispatch.rejected` are requests whose queue-policy timeout expired under REJECT (answer them
    with `TIMEOUT_MESSAGE`, Triton's UNAVAILABLE "Request timeout expired"); `Dispatch.wake_at_s` is
    when to call again if nothing can go now (the oldest pending request's delay expiry or the
    closest timeout), None if only an arrival or a freed instance can change anything. With
    `free_instances <= 0` nothing is examined (Triton's batcher thread waits for a free slot too).
    The returned sequences are tuples and may be shared between calls: do not mutate them.
  - `len(queue)` (or the plain attribute `queue.count`, read-only, cheaper on a hot path): pending
    requests (for `nv_inference_pending_request_count`);
    `queue.queued_batch_size`: pending batch-dimension total.
  - `reconfigure(config)`: new settings apply to requests still queued (model reload swap). Queued
    requests keep their enqueue time and their timeout deadline; they are re-sorted into the new
    priority levels by the priority they asked for.

Semantics (triton.md §1.2; core `dynamic_batch_scheduler.cc GetDynamicBatch`, `scheduler_utils.cc`)
----------------------------------------------------------------------------------------------
- Requests are examined in order: priority level 1 first (FIFO within a level; at each level the
  requests that timed out under DELAY come after the level's other requests). Priority 0 or above
  `priority_levels` means `default_priority_level`.
- A batch grows while the batch-dimension total stays ≤ `max_batch_size` (a request of batch b
  uses b). The first request of a batch is always taken.
- If a prefix of the queue reaches one of `preferred_batch_sizes` (empty means
  `[max_batch_size]`, as Triton normalises it), the largest such prefix goes at once, unless the
  oldest pending request has already waited `max_queue_delay_us` (then everything pending goes).
  Triton also treats the batch as "preferred" when the next request would push it past the
  largest preferred size.
- Otherwise the batch goes when it cannot grow (next request would exceed `max_batch_size`, or
  it reached the largest preferred size), when the delay is 0, or when the OLDEST request of the
  pending batch has waited `max_queue_delay_us` (`now_s >= oldest + delay`); else wait.
- Queue policies per level (`priority_queue_policy`, else `default_queue_policy`): a request's
  timeout is `default_timeout_us`; with `allow_timeout_override` a request may ask for a SHORTER
  non-zero one (as in Triton's code, an override cannot add a timeout when the default is 0).
  Timeouts are applied lazily when the batcher examines the request (as Triton's cursor does);
  expired means `now_s >= enqueue + timeout` (≥ rather than Triton's > so that a virtual clock
  woken exactly at the deadline makes progress). REJECT ⇒ `rejected`; DELAY ⇒ moved behind the
  level's non-timed-out requests and never times out again.
- `max_queue_size` is per level and counts that level's queued + delayed requests.

Cost: O(1) per `enqueue` and O(1) per `next_action` while waiting on a delay (the decision is
cached until a size threshold, a deadline or a non-tail insertion can change it, like Triton's
`next_preferred_batch_size_` wake-up rule); O(batch) per dispatch.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter
from types import MappingProxyType
from typing import Any, Final, Generic, Literal, NamedTuple, TypeVar

T = TypeVar("T")

TIMEOUT_MESSAGE = "Request timeout expired"
QUEUE_FULL_MESSAGE = "Exceeds maximum queue size"

TimeoutAction = Literal["REJECT", "DELAY"]

_INF = math.inf


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """Triton's `ModelQueuePolicy` for one priority level."""

    timeout_action: TimeoutAction = "REJECT"
    default_timeout_us: int = 0  # 0 = no timeout
    allow_timeout_override: bool = False
    max_queue_size: int = 0  # 0 = unbounded

    def __post_init__(self) -> None:
        if self.timeout_action not in ("REJECT", "DELAY"):
            raise ValueError(f"timeout_action must be REJECT or DELAY, got {self.timeout_action!r}")
        if self.default_timeout_us < 0:
            raise ValueError(f"default_timeout_us must be >= 0, got {self.default_timeout_us}")
        if self.max_queue_size < 0:
            raise ValueError(f"max_queue_size must be >= 0, got {self.max_queue_size}")

    def timeout_s(self, requested_timeout_us: int | None) -> float:
        """Effective timeout in seconds (inf = none): an override may only lower a non-zero default."""
        timeout_us = self.default_timeout_us
        if (
            self.allow_timeout_override
            and requested_timeout_us is not None
            and 0 < requested_timeout_us < timeout_us
        ):
            timeout_us = requested_timeout_us
        return timeout_us / 1e6 if timeout_us > 0 else _INF

    @staticmethod
    def from_json(obj: Mapping[str, Any], where: str) -> QueuePolicy:
        """Parse a `ModelQueuePolicy` JSON object; `where` names it in errors."""
        known = {"timeout_action", "default_timeout_microseconds", "allow_timeout_override", "max_queue_size"}
        unknown = set(obj) - known
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
        action = str(obj.get("timeout_action", "REJECT")).upper()
        if action not in ("REJECT", "DELAY"):
            raise ValueError(f"{where}.timeout_action must be REJECT or DELAY, got {action!r}")
        return QueuePolicy(
            timeout_action="DELAY" if action == "DELAY" else "REJECT",
            default_timeout_us=_as_int(
                obj.get("default_timeout_microseconds", 0), f"{where}.default_timeout_microseconds"
            ),
            allow_timeout_override=bool(obj.get("allow_timeout_override", False)),
            max_queue_size=_as_int(obj.get("max_queue_size", 0), f"{where}.max_queue_size"),
        )


def _as_int(value: Any, name: str) -> int:
    """Triton JSON carries 64-bit ints as numbers or strings; anything else is an error naming the field."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError(f"{name} must be an integer, got {value!r}")


_DEFAULT_POLICY = QueuePolicy()


@dataclass(frozen=True, slots=True)
class BatcherConfig:
    """The dynamic-batching settings of one model, validated like Triton's `ValidateModelConfig`."""

    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy = _DEFAULT_POLICY
    priority_queue_policy: Mapping[int, QueuePolicy] = field(default_factory=lambda: MappingProxyType({}))
    preserve_ordering: bool = False

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(
                f"max_batch_size must be >= 1 for the dynamic batcher, got {self.max_batch_size}"
            )
        for size in self.preferred_batch_sizes:
            if size <= 0 or size > self.max_batch_size:
                raise ValueError(
                    f"preferred_batch_sizes: dynamic batching preferred size must be <= max batch size "
                    f"({self.max_batch_size}) and > 0, got {size}"
                )
        if self.max_queue_delay_us < 0:
            raise ValueError(f"max_queue_delay_us must be >= 0, got {self.max_queue_delay_us}")
        if self.priority_levels < 0:
            raise ValueError(f"priority_levels must be >= 0, got {self.priority_levels}")
        if self.priority_levels > 0:
            if not 1 <= self.default_priority_level <= self.priority_levels:
                raise ValueError(
                    f"default_priority_level must be in [1, {self.priority_levels}], "
                    f"got {self.default_priority_level}"
                )
            for level in self.priority_queue_policy:
                if not 1 <= level <= self.priority_levels:
                    raise ValueError(
                        f"priority_queue_policy: level {level} not in [1, {self.priority_levels}]"
                    )
        elif self.priority_queue_policy:
            raise ValueError("priority_queue_policy requires priority_levels > 0")
        if self.preserve_ordering:
            if self.priority_levels > 1:
                raise ValueError("preserve_ordering is incompatible with priority_levels > 1")
            policies = [self.default_queue_policy, *self.priority_queue_policy.values()]
            if any(p.timeout_action == "DELAY" and p.default_timeout_us > 0 for p in policies):
                raise ValueError("preserve_ordering is incompatible with a DELAY queue policy with a timeout")
        # Freeze the mapping so the config really is immutable.
        if not isinstance(self.priority_queue_policy, MappingProxyType):
            object.__setattr__(
                self, "priority_queue_policy", MappingProxyType(dict(self.priority_queue_policy))
            )

    def policy_for(self, level: int) -> QueuePolicy:
        """The queue policy of a priority level (its own, else the default)."""
        return self.priority_queue_policy.get(level, self.default_queue_policy)

    @staticmethod
    def from_model_config(cfg: Mapping[str, Any]) -> BatcherConfig:
        """Build from Triton's JSON model config (`GET v2/models/<m>/config`).

        No `dynamic_batching` block means Triton runs each request on its own: that is
        max_batch_size 1 with no delay here. `max_batch_size` 0 (no batching) is treated as 1.
        """
        mbs = max(1, _as_int(cfg.get("max_batch_size", 0), "max_batch_size"))
        db = cfg.get("dynamic_batching")
        if db is None:
            return BatcherConfig(max_batch_size=1)
        if not isinstance(db, Mapping):
            raise ValueError("dynamic_batching must be an object")
        preferred_raw = db.get("preferred_batch_size", [])
        if not isinstance(preferred_raw, list | tuple):
            raise ValueError("dynamic_batching.preferred_batch_size must be a list")
        preferred = tuple(
            _as_int(v, f"dynamic_batching.preferred_batch_size[{i}]") for i, v in enumerate(preferred_raw)
        )
        dqp = db.get("default_queue_policy")
        default_policy = (
            QueuePolicy.from_json(dqp, "dynamic_batching.default_queue_policy") if dqp else _DEFAULT_POLICY
        )
        pqp_raw = db.get("priority_queue_policy", {}) or {}
        if not isinstance(pqp_raw, Mapping):
            raise ValueError("dynamic_batching.priority_queue_policy must be an object keyed by level")
        pqp = {
            _as_int(k, f"dynamic_batching.priority_queue_policy key {k!r}"): QueuePolicy.from_json(
                v, f"dynamic_batching.priority_queue_policy[{k}]"
            )
            for k, v in pqp_raw.items()
        }
        try:
            return BatcherConfig(
                max_batch_size=mbs,
                preferred_batch_sizes=preferred,
                max_queue_delay_us=_as_int(
                    db.get("max_queue_delay_microseconds", 0), "dynamic_batching.max_queue_delay_microseconds"
                ),
                priority_levels=_as_int(db.get("priority_levels", 0), "dynamic_batching.priority_levels"),
                default_priority_level=_as_int(
                    db.get("default_priority_level", 0), "dynamic_batching.default_priority_level"
                ),
                default_queue_policy=default_policy,
                priority_queue_policy=pqp,
                preserve_ordering=bool(db.get("preserve_ordering", False)),
            )
        except ValueError as exc:
            raise ValueError(f"dynamic_batching: {exc}") from None


class Dispatch(NamedTuple, Generic[T]):
    """What to do now: run `execute` as one batch on one free instance, answer `rejected` with an error.

    A NamedTuple (immutable, and cheap to build on the hot path).
    """

    execute: tuple[T, ...] = ()
    rejected: tuple[T, ...] = ()
    wake_at_s: float | None = None


# A queued request: (item, enqueue_s, batch_size, deadline_s, asked_priority); tuples keep the hot path fast.
_Entry = tuple[Any, float, int, float, int]
_ITEM: Final = 0
_ENQ: Final = 1
_BS: Final = 2
_DEADLINE: Final = 3
_PRIO: Final = 4
_first = itemgetter(0)


class _Level:
    """One priority level: its normal queue, its DELAY-parked queue, and its policy."""

    __slots__ = ("delayed", "policy", "q")

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        self.q: deque[_Entry] = deque()
        self.delayed: deque[_Entry] = deque()


class BatchQueue(Generic[T]):
    """One model's scheduler queue on one server; see the module docstring for the contract."""

    def __init__(self, config: BatcherConfig) -> None:
        self.count = 0  # pending requests; read-only for callers
        self._queued_size = 0
        # Sticky flags, cleared when the queue empties: the general examination is needed while set.
        self._complex = False  # some queued request has batch_size > 1, a deadline, or was delayed
        self._force_general = False  # tests set it to compare the fast path with the general rules
        self._levels: list[_Level] = []
        self._apply_config(config)

    # -- configuration -------------------------------------------------------------------------
    def _apply_config(self, config: BatcherConfig) -> None:
        self.config = config
        self._mbs = config.max_batch_size
        pref = set(config.preferred_batch_sizes) or {config.max_batch_size}
        self._preferred = frozenset(pref)
        self._preferred_sorted = tuple(sorted(pref))
        self._max_pref = max(pref)
        self._delay_s = config.max_queue_delay_us / 1e6
        n = max(1, config.priority_levels)
        self._levels = [
            _Level(config.policy_for(i + 1) if config.priority_levels else config.default_queue_policy)
            for i in range(n)
        ]
        self._default_idx = (config.default_priority_level - 1) if config.priority_levels else 0
        # Fast path tables (one level, unit batch sizes, no deadlines): largest preferred size <= k,
        # smallest preferred size > k, for k in 0..max_batch_size.
        self._best_le = [max((s for s in pref if s <= k), default=0) for k in range(self._mbs + 1)]
        self._next_gt = [min((s for s in pref if s > k), default=0) for k in range(self._mbs + 1)]
        self._single = config.priority_levels == 0
        # Delay a lone unit request waits for (0 = it would go at once or the fast path does not apply).
        self._prime_s = (
            self._delay_s if self._single and self._best_le[1] == 0 and not self._force_general else 0.0
        )
        self._q0 = self._levels[0].q
        self._p0 = self._levels[0].policy
        self._invalidate()

    def reconfigure(self, config: BatcherConfig) -> None:
        """Swap in new settings (model reload): queued requests stay, re-sorted by their asked priority."""
        old_entries: list[_Entry] = []
        for lvl in self._levels:
            old_entries.extend(lvl.q)
            old_entries.extend(lvl.delayed)
        self._apply_config(config)
        # Keep global FIFO per level by enqueue time (stable for equal times).
        old_entries.sort(key=lambda e: e[_ENQ])
        for e in old_entries:
            self._levels[self._level_index(e[_PRIO])].q.append(e)
            if e[_BS] != 1 or e[_DEADLINE] != _INF:
                self._complex = True

    def _level_index(self, priority: int) -> int:
        levels = self.config.priority_levels
        if levels == 0 or priority <= 0 or priority > levels:
            return self._default_idx
        return priority - 1

    def _invalidate(self) -> None:
        self._cache: Dispatch[T] | None = None
        self._cache_until_s = _INF
        self._cache_next_size = 0
        self._cache_tail_level = 0
        self._cache_tail_delayed = False

    # -- queries ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.count

    @property
    def queued_batch_size(self) -> int:
        """Sum of the batch dimension of every pending request."""
        return self._queued_size

    # -- enqueue ---------------------------------------------------------------------------------
    def enqueue(
        self,
        item: T,
        *,
        now_s: float,
        batch_size: int = 1,
        priority: int = 0,
        timeout_us: int | None = None,
    ) -> bool:
        """Queue a request; False ⇒ its level is full (503 "Exceeds maximum queue size")."""
        if batch_size == 1 and self._single:  # the common case, kept short
            policy = self._p0
            q = self._q0
            if policy.max_queue_size and self.count >= policy.max_queue_size:
                return False
            if policy.default_timeout_us:
                q.append((item, now_s, 1, now_s + policy.timeout_s(timeout_us), priority))
                self._complex = True
            else:
                q.append((item, now_s, 1, _INF, priority))
            self.count += 1
            self._queued_size += 1
            if self.count == 1 and self._prime_s > 0 and not self._complex:
                # A lone request with a delay and no preferred size of 1: it waits for companions until
                # now + delay (what `_walk_simple` would decide), so cache that without examining.
                wake = now_s + self._prime_s
                self._cache = Dispatch((), (), wake)
                self._cache_until_s = wake
                self._cache_next_size = self._next_gt[1]
                self._cache_tail_delayed = False
            elif self._cache is not None and self._cache_tail_delayed:
                self._cache = None
            return True
        if batch_size < 1 or batch_size > self._mbs:
            raise ValueError(f"batch_size must be in [1, max_batch_size={self._mbs}], got {batch_size}")
        idx = self._level_index(priority) if self.config.priority_levels else 0
        lvl = self._levels[idx]
        policy = lvl.policy
        if policy.max_queue_size and len(lvl.q) + len(lvl.delayed) >= policy.max_queue_size:
            return False
        deadline = now_s + policy.timeout_s(timeout_us) if policy.default_timeout_us else _INF
        lvl.q.append((item, now_s, batch_size, deadline, priority))
        self.count += 1
        self._queued_size += batch_size
        if batch_size != 1 or deadline != _INF:
            self._complex = True
        if self._cache is not None and (
            idx < self._cache_tail_level or (idx == self._cache_tail_level and self._cache_tail_delayed)
        ):
            self._cache = None  # inserted inside the examined batch: re-examine
        return True

    # -- dispatch --------------------------------------------------------------------------------
    def next_action(self, now_s: float, free_instances: int) -> Dispatch[T]:
        """Decide for one free instance: a batch to run now, requests to reject, or when to look again."""
        if free_instances <= 0 or self.count == 0:
            return _EMPTY
        cache = self._cache
        if cache is not None and now_s < self._cache_until_s and self._queued_size < self._cache_next_size:
            return cache
        self._cache = None
        if not self._complex and self._single and not self._force_general:
            return self._walk_simple(now_s)
        d = self._walk(now_s)
        if self.count == 0:
            self._complex = False
        return d

    def _walk_simple(self, now_s: float) -> Dispatch[T]:
        """`_walk` for one level of unit-size requests without deadlines: the same rules in O(batch)."""
        q = self._q0
        n = len(q)
        mbs = self._mbs
        walked = n if n < mbs else mbs
        best = self._best_le[walked]
        delay_s = self._delay_s
        wake = q[0][_ENQ] + delay_s
        exceeded = delay_s > 0 and now_s >= wake
        if best and not exceeded:
            take = best
        elif exceeded or delay_s == 0 or n > mbs or walked >= self._max_pref:
            take = walked
        else:
            wait: Dispatch[T] = Dispatch((), (), wake)
            self._cache = wait
            self._cache_until_s = wake
            self._cache_next_size = self._next_gt[walked]
            self._cache_tail_level = 0
            self._cache_tail_delayed = False
            return wait
        if take == n:
            items = tuple(map(_first, q))
            q.clear()
        else:
            items = tuple(map(_first, islice(q, take)))
            popleft = q.popleft
            for _ in range(take):
                popleft()
        self.count -= take
        self._queued_size -= take
        return Dispatch(items, (), None)

    def _walk(self, now_s: float) -> Dispatch[T]:
        mbs = self._mbs
        max_pref = self._max_pref
        preferred = self._preferred
        entries: list[_Entry] = []
        segments: list[tuple[deque[_Entry], int]] = []
        rejected: list[Any] = []
        pend = 0
        best_n = 0
        oldest = _INF
        closest = _INF
        send_now = False
        tail_level = 0
        tail_delayed = False
        for li, lvl in enumerate(self._levels):
            if send_now:
                break
            for is_delayed in (False, True):
                dq = lvl.delayed if is_delayed else lvl.q
                if not dq:
                    continue
                i = 0
                while i < len(dq):
                    e = dq[i]
                    if e[_DEADLINE] <= now_s:  # queue policy at the cursor (delayed entries have inf)
                        del dq[i]
                        if lvl.policy.timeout_action == "REJECT":
                            rejected.append(e[_ITEM])
                            self.count -= 1
                            self._queued_size -= e[_BS]
                        else:
                            lvl.delayed.append((e[_ITEM], e[_ENQ], e[_BS], _INF, e[_PRIO]))
                        continue
                    bs = e[_BS]
                    if entries:
                        if pend + bs > max_pref and best_n == 0:
                            best_n = len(entries)
                        if pend + bs > mbs:
                            send_now = True
                            break
                    entries.append(e)
                    pend += bs
                    i += 1
                    if e[_ENQ] < oldest:
                        oldest = e[_ENQ]
                    if e[_DEADLINE] < closest:
                        closest = e[_DEADLINE]
                    if pend in preferred:
                        best_n = len(entries)
                if i:
                    segments.append((dq, i))
                    tail_level, tail_delayed = li, is_delayed
                if send_now:
                    break
        rej = tuple(rejected)
        if not entries:
            return Dispatch((), rej, None) if rej else _EMPTY
        delay_s = self._delay_s
        delay_exceeded = delay_s > 0 and now_s >= oldest + delay_s
        if best_n and not delay_exceeded:
            take = best_n
        elif send_now or pend >= max_pref or delay_exceeded or delay_s == 0:
            take = len(entries)
        else:
            # Wait: the whole queue was examined (no send_now), so only a bigger total, a deadline,
            # or an insertion before the tail can change the decision.
            wake = min(oldest + delay_s, closest)
            next_size = next(s for s in self._preferred_sorted if s > pend)
            wait: Dispatch[T] = Dispatch((), rej, wake)
            self._cache = Dispatch((), (), wake)
            self._cache_until_s = wake
            self._cache_next_size = next_size
            self._cache_tail_level = tail_level
            self._cache_tail_delayed = tail_delayed
            return wait
        # Dequeue the first `take` examined entries, segment by segment (each a prefix of its deque).
        left = take
        for dq, n in segments:
            k = n if n < left else left
            popleft = dq.popleft
            for _ in range(k):
                popleft()
            left -= k
            if left == 0:
                break
        batch = entries[:take] if take < len(entries) else entries
        self.count -= take
        self._queued_size -= sum(e[_BS] for e in batch)
        return Dispatch(tuple(e[_ITEM] for e in batch), rej, None)


_EMPTY: Dispatch[Any] = Dispatch((), (), None)
