"""Is the daemon itself working? Two judgements for the probes, beside the outages the
pipeline reports (a dependency down):

- **A stalled main loop** (``/livez``): no turn begun for ``health.stall_after_s``. A
  deadlock or a call that never returns leaves every thread but the main loop's alive:
  the HTTP server keeps answering, Kafka keeps the member (heartbeats run on the client's
  own thread) and its partitions are read by nobody. Restarting is the cure, so this is
  liveness, not readiness.
- **No partitions** (``/readyz``): a Kafka replica that has held no partition for
  ``health.unassigned_after_s``. Legitimate for a member of a stable group with more
  members than the topic has partitions (it stands by: ready, with a note, so that a
  rollout or a disruption budget does not wait on it); otherwise it was left out (not a
  member, a rebalance that does not end, an assignment that forgot it) and reads nothing
  while saying it is fine.

Both read only what the main loop and the probe thread wrote, so an HTTP thread asking
never blocks on the daemon.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from capwatch.contracts.ports import GroupView


class Health:
    def __init__(self, *, stall_after_s: float, unassigned_after_s: float,
                 group: str | None = None,
                 group_view: Callable[[], GroupView | None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_after_s = stall_after_s
        self.unassigned_after_s = unassigned_after_s
        self.group = group
        """The consumer group, for a source that is a group member; None: partitions are
        not judged (a file, the ingest spool, a simulation)."""
        self._group_view = group_view
        self._clock = clock
        self._turn_at: float | None = None
        """When the main loop last began a turn; None while it is not running."""
        self._unassigned_since: float | None = None
        self.member: str | None = None
        """This replica's member id in the group, as its source last said (main loop)."""

    # ------------------------------------------------------------------ the main loop's side

    def running(self, on: bool) -> None:
        """The main loop starts (its first turn) or ends (no stall while stopped)."""
        now = self._clock()
        self._turn_at = now if on else None
        if on and self._unassigned_since is None:
            self._unassigned_since = now

    def turn(self, member: str | None = None) -> None:
        self._turn_at = self._clock()
        self.member = member

    def holding(self, partitions: set[int]) -> None:
        """After a rebalance callback: the partitions held now."""
        if partitions:
            self._unassigned_since = None
        elif self._unassigned_since is None:
            self._unassigned_since = self._clock()

    # ------------------------------------------------------------------ the probes' side

    def stalled(self) -> str | None:
        at = self._turn_at
        if at is None:
            return None
        idle = self._clock() - at
        if idle <= self.stall_after_s:
            return None
        return (f"main loop stalled: no turn for {idle:.0f} s "
                f"(health.stall_after_s {self.stall_after_s:g})")

    def partitions(self) -> tuple[str | None, str | None]:
        """(the problem, or None; a note for a replica that stands by, or None)."""
        since = self._unassigned_since
        if self.group is None or since is None or self._turn_at is None:
            return None, None
        unassigned = self._clock() - since
        if unassigned <= self.unassigned_after_s:
            return None, None
        view = self._group_view() if self._group_view is not None else None
        member = self.member
        if view is not None and view.state == "Stable" and member in view.members \
                and view.partitions is not None and len(view.members) > view.partitions:
            return None, (f"standing by: the group {self.group} has {len(view.members)} "
                          f"members for {view.partitions} partitions")
        if view is None:
            how = f"the group {self.group} could not be described"
        else:
            parts = "?" if view.partitions is None else str(view.partitions)
            how = (f"the group {self.group} is {view.state} with {len(view.members)} "
                   f"members for {parts} partitions")
            if member not in view.members:
                how += ", this replica not among them" if member else \
                    ", this replica not a member"
        return (f"no partitions held for {unassigned:.0f} s "
                f"(health.unassigned_after_s {self.unassigned_after_s:g}): {how}"), None
