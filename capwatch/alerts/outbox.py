"""Durable alert routing: an outbox in the models store, suppression and grouping that
survive restarts, and at-least-once delivery to the sinks.

Every alert is first written to the store's outbox in the same transaction as what
caused it (a model version, a queued or failed assessment), so a crash can delay an
alert but never lose it. Routing then runs in two steps, each one store transaction:

1. :meth:`AlertOutbox.route` reads the pending outbox and, per dedup key, when an alert
   with that key last went out; :func:`plan_routing` (pure, no clock) drops repeats inside
   their suppression window, holds alerts until their group has waited ``group_wait``,
   and turns each closed group into one delivery ("7 agents of rover-v3: ...");
2. :meth:`AlertOutbox.deliver` sends each due delivery to the sinks that have not taken it
   yet and records which did. A failing sink is retried with backoff without re-sending
   to the others; a replica that dies mid-delivery leaves a lease that runs out.

An *ending* (an alert with ``ends_at``: the awaiting-assessment alert once its
assessment ended) is neither suppressed nor grouped: it goes out alone as soon as what it
ends has gone out, so Alertmanager closes the alert instead of keeping it until
``resolve_after``. Its outbox key is :func:`ending_key` of the alert it ends. An alert that
went out grouped ("N agents of ...") has labels of its own, which no member's ending
names: once every member has its ending, the group gets one too (:meth:`AlertOutbox.route`).

A delivery's content and dedup key are fixed when its group closes, so a re-delivery
(after a sink failure or a crash between sending and recording) is byte-identical, and
consumers can deduplicate on the key.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import structlog

from capwatch.alerts.policy import AlertPolicy, merge_group
from capwatch.alerts.sinks import AlertDeliveryError, AlertSink
from capwatch.alerts.types import Alert
from capwatch.contracts.errors import error_text
from capwatch.contracts.store import AlertDelivery, AlertOutboxStore, OutboxAlert, RoutingPlan

log = structlog.get_logger("capwatch.alerts")


def outbox_record(alert: Alert, key: str) -> OutboxAlert:
    """The outbox row for ``alert``; ``key`` must be the same whenever the same cause
    produces it again (a retry, a replay), so that it is written once."""
    return OutboxAlert(
        key=key, dedup_key=alert.dedup_key, group_key="|".join(alert.group_key),
        family=alert.family, alert_type=alert.type.value, alert=alert.to_record(),
        created_at=alert.time)


ENDING_PREFIX = "ended:"
FORCED_PASSES = 3
"""Routing passes a forced run makes: alerts, their endings, the endings of groups."""


def ending_key(key: str) -> str:
    """Outbox key of the ending of the alert written under outbox key ``key``."""
    return f"{ENDING_PREFIX}{key}"


def _digest(parts: Sequence[str], n: int) -> str:
    return hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()[:n]


def plan_routing(pending: Sequence[OutboxAlert], last_sent: Mapping[str, datetime],
                 policy: AlertPolicy, now: datetime, sinks: Sequence[str],
                 force: bool = False) -> RoutingPlan:
    """Decide what to suppress and what to deliver (pure: the caller supplies ``now``).

    An alert is suppressed when an alert with its dedup key was let through less than its
    type's suppression window before it (times are the alerts' own, so the decision does
    not depend on when routing happens to run). The others gather in groups keyed by
    (type, family, action, fingerprint); a group closes once its oldest alert is
    its type's group wait old (or at once with ``force``) and becomes one delivery. Alerts of a
    group still open stay pending, and count as let through for the repeats behind them.
    """
    if not sinks:
        raise ValueError("alert routing needs at least one sink")
    sent = dict(last_sent)
    suppressed: list[str] = []
    groups: dict[str, list[tuple[OutboxAlert, Alert]]] = {}
    endings: list[tuple[OutboxAlert, Alert]] = []
    for row in sorted(pending, key=lambda r: (r.created_at, r.key)):
        alert = Alert.from_record(row.alert)
        if alert.ends_at is not None:
            endings.append((row, alert))
            continue
        window = policy.suppress_for.get(alert.type, timedelta(0))
        last = sent.get(row.dedup_key)
        if last is not None and window > timedelta(0) and alert.time - last < window:
            suppressed.append(row.key)
            continue
        sent[row.dedup_key] = alert.time if last is None else max(last, alert.time)
        severity = policy.severities.get(alert.type, alert.severity)
        groups.setdefault(row.group_key, []).append((row, alert.with_severity(severity)))
    deliveries: list[AlertDelivery] = []
    let_through: dict[str, datetime] = {}
    for _, members in sorted(groups.items()):
        opened = min(a.time for _, a in members)
        wait = policy.wait_for(members[0][1].type)
        # A group opened further after ``now`` than its wait (the clock was set back, or the
        # replica that wrote it runs ahead) has waited for an unknown time, and waiting
        # until the clock reached its stamp held even a group wait of 0 back for as long
        # as the clock had jumped: it goes out now. A stamp a little ahead is the usual
        # race with a writer (its alert committed after this pass read the clock): it
        # waits as usual, at most twice its wait.
        if not force and now - opened < wait and opened - now <= wait:
            continue
        rows = [r for r, _ in members]
        tag = _digest([r.dedup_key for r in rows], 8) if len(rows) > 1 else None
        merged = merge_group([a for _, a in members], policy.max_agents_listed, tag)
        deliveries.append(AlertDelivery(
            key=_digest([r.key for r in rows], 32), alert=merged.to_record(),
            sinks_pending=tuple(sinks), created_at=now, members=tuple(r.key for r in rows)))
        for r, a in members:
            previous = let_through.get(r.dedup_key)
            let_through[r.dedup_key] = a.time if previous is None else max(previous, a.time)
    # An ending goes out alone and at once, but never before what it ends: while an alert
    # with its dedup key is pending (or routed in this very pass), it waits a pass.
    unsent = {r.dedup_key for members in groups.values() for r, _ in members}
    for row, alert in endings:
        if row.dedup_key in unsent:
            continue
        severity = policy.severities.get(alert.type, alert.severity)
        deliveries.append(AlertDelivery(
            key=_digest([row.key], 32), alert=alert.with_severity(severity).to_record(),
            sinks_pending=tuple(sinks), created_at=now, members=(row.key,)))
    return RoutingPlan(tuple(suppressed), tuple(deliveries), let_through)


@dataclass
class DeliveryReport:
    """What one :meth:`AlertOutbox.run_once` did."""

    routed: list[Alert] = field(default_factory=list)
    """Alerts let out by routing (grouped ones once)."""
    suppressed: list[OutboxAlert] = field(default_factory=list)
    delivered: int = 0
    """Deliveries every sink has taken."""
    failures: dict[str, list[str]] = field(default_factory=dict)
    """Sink name → errors, for deliveries that will be retried."""


class AlertOutbox:
    """Routes the store's alert outbox to ``sinks``; safe to run on every replica."""

    def __init__(self, store: AlertOutboxStore, sinks: Sequence[AlertSink],
                 policy: AlertPolicy | None = None, *,
                 retry_after: timedelta = timedelta(seconds=5),
                 max_retry_after: timedelta = timedelta(minutes=5),
                 lease: timedelta = timedelta(seconds=60),
                 on_routed: Callable[[Alert], None] | None = None,
                 on_suppressed: Callable[[OutboxAlert], None] | None = None,
                 on_failure: Callable[[str, AlertDeliveryError], None] | None = None,
                 on_delivered: Callable[[Alert], None] | None = None,
                 on_backlog: Callable[[int], None] | None = None) -> None:
        if not sinks:
            raise ValueError("an alert outbox needs at least one sink")
        names = [s.name for s in sinks]
        if len(set(names)) != len(names):
            raise ValueError(f"alert sink names must be distinct: {names}")
        self.store = store
        self.sinks = {s.name: s for s in sinks}
        self.policy = policy or AlertPolicy()
        self.retry_after = retry_after
        self.max_retry_after = max_retry_after
        self.lease = lease
        self._on_routed = on_routed
        self._on_suppressed = on_suppressed
        self._on_failure = on_failure
        self._on_delivered = on_delivered
        self._on_backlog = on_backlog

    def route(self, now: datetime, force: bool = False,
              report: DeliveryReport | None = None) -> RoutingPlan:
        """Suppress repeats and close groups that waited long enough (one transaction)."""
        seen: dict[str, OutboxAlert] = {}

        def planner(pending: Sequence[OutboxAlert],
                    last_sent: Mapping[str, datetime]) -> RoutingPlan:
            seen.update((r.key, r) for r in pending)
            return plan_routing(pending, last_sent, self.policy, now, list(self.sinks), force)

        plan = self.store.route_alerts(planner, now)
        for key in plan.suppressed:
            row = seen[key]
            log.info("alert suppressed", dedup_key=row.dedup_key, alert_type=row.alert_type)
            if report is not None:
                report.suppressed.append(row)
            if self._on_suppressed is not None:
                self._on_suppressed(row)
        ended: list[tuple[str, datetime]] = []
        for d in plan.deliveries:
            alert = Alert.from_record(d.alert)
            if alert.ends_at is not None:
                # An ending is not an alert of its own.
                ended += [(k.removeprefix(ENDING_PREFIX), alert.ends_at) for k in d.members
                          if k.startswith(ENDING_PREFIX)]
                continue
            if report is not None:
                report.routed.append(alert)
            if self._on_routed is not None:
                self._on_routed(alert)
        if ended:
            self._end_groups(dict(ended))
        return plan

    def _end_groups(self, ended: Mapping[str, datetime]) -> None:
        """Write the ending of every group delivery whose members have all been ended now
        that ``ended`` (outbox key → end) have: at the group's last member's end, with the
        group's own labels. It is routed at the next pass, like any ending. The check runs
        after the routing transaction committed, so of two routers ending a group's last
        members at once the later one sees both; two that both see it write one row (the
        key is the group delivery's)."""
        groups = {d.key: d for d in self.store.carried_by(list(ended)).values()
                  if len(d.members) > 1}
        if not groups:
            return
        members = {m for d in groups.values() for m in d.members}
        done = self.store.outbox_keys([ending_key(m) for m in members])
        endings = []
        for d in groups.values():
            if not all(ending_key(m) in done for m in d.members):
                continue
            at = max(ended.get(m, datetime.min.replace(tzinfo=UTC)) for m in d.members)
            alert = Alert.from_record(d.alert)
            endings.append(outbox_record(replace(alert, time=at, ends_at=at),
                                         ending_key(d.key)))
        if endings:
            self.store.add_alerts(endings)

    def _backoff(self, attempts: int) -> timedelta:
        factor: int = 2 ** min(max(0, attempts - 1), 30)
        return min(self.retry_after * factor, self.max_retry_after)

    def deliver(self, now: datetime, limit: int = 100,
                report: DeliveryReport | None = None) -> DeliveryReport:
        """Send every due delivery to the sinks still owing it."""
        report = report if report is not None else DeliveryReport()
        start = _monotonic()
        lease_s = self.lease.total_seconds()
        for _ in range(limit):
            # One at a time, each held for the lease from when it is taken: a batch held
            # from the run's start ran out behind a slow sink (an Alertmanager timing out,
            # 5 s a try), and another replica sent its rest while this one still did.
            taken = _monotonic()
            claimed = self.store.claim_deliveries(now, lease_s + (taken - start), 1)
            if not claimed:
                break
            held_until = taken + lease_s
            d = claimed[0]
            alert = Alert.from_record(d.alert)
            done: list[str] = []
            errors: list[str] = []
            for name in d.sinks_pending:
                sink = self.sinks.get(name)
                if sink is None:
                    # The configuration dropped this sink since the alert was routed:
                    # nobody is left to deliver it to there.
                    log.warning("alert sink no longer configured", sink=name,
                                dedup_key=alert.dedup_key)
                    done.append(name)
                    continue
                if held_until - _monotonic() < min(send_bound_s(sink), lease_s / 2):
                    # The sinks before took most of the hold: a send begun now could end
                    # after it, when another replica may have taken the delivery and
                    # sent it too. Left to the next claim (at once, with a whole hold).
                    break
                try:
                    sink.send([alert])
                except Exception as e:
                    error = e if isinstance(e, AlertDeliveryError) else AlertDeliveryError(
                        f"{name}: {error_text(e)}")
                    errors.append(f"{name}: {error}")
                    report.failures.setdefault(name, []).append(str(error))
                    log.warning("alert delivery failed", sink=name, error=str(error),
                                dedup_key=alert.dedup_key, attempts=d.attempts)
                    if self._on_failure is not None:
                        self._on_failure(name, error)
                    continue
                if _monotonic() > held_until:
                    log.warning("alert sent after its delivery's hold ran out: another "
                                "replica may have sent it as well (alerts.delivery_lease_s "
                                "is shorter than this sink's send)", sink=name,
                                dedup_key=alert.dedup_key, hold_s=lease_s)
                done.append(name)
            finished = self.store.finish_delivery(
                d.key, done, now, "; ".join(errors)[:1000] or None,
                now + self._backoff(d.attempts) if errors else now)
            if finished.status == "sent":
                report.delivered += 1
                if self._on_delivered is not None:
                    self._on_delivered(alert)
        return report

    def run_once(self, now: datetime, force: bool = False) -> DeliveryReport:
        """Route, then deliver what is due. Store failures propagate (the caller's job
        runs again); sink failures are recorded and retried."""
        report = DeliveryReport()
        plan = self.route(now, force, report)
        self.deliver(now, report=report)
        # Forced (a finite run's last pass): what one pass lets out can make more due (an
        # ending waits a pass for the alert it ends, a group's ending for its members'
        # endings), and there is no next tick to route it. Each pass is delivered before
        # the next is routed: deliveries of one pass go out in key order, and an ending
        # must never reach a sink before what it ends.
        for _ in range(FORCED_PASSES - 1):
            if not force or not plan.deliveries:
                break
            plan = self.route(now, force, report)
            self.deliver(now, report=report)
        if self._on_backlog is not None:
            self._on_backlog(sum(self.store.undelivered()))
        return report

    def prune(self, now: datetime, keep: timedelta) -> int:
        """Forget what was routed more than ``keep`` ago, but never a sent time still
        inside a suppression window."""
        longest = max(self.policy.suppress_for.values(), default=timedelta(0))
        return self.store.prune_alerts(now - max(keep, longest))

    def backlog(self) -> tuple[int, int]:
        """(alerts waiting to be routed, deliveries not yet taken by every sink)."""
        return self.store.undelivered()


_monotonic = time.monotonic


def send_bound_s(sink: AlertSink) -> float:
    """The longest one send to ``sink`` should take (its ``max_send_s``; 0 for a sink
    that does not say, e.g. one that only logs)."""
    bound = getattr(sink, "max_send_s", 0.0)
    return float(bound) if isinstance(bound, int | float) else 0.0
"""How long a delivery run has taken (a name of its own, so tests can stand in for it)."""
