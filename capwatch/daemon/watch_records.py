"""The records an agent watch takes and gives: its settings (from the configuration), a
piece of evidence (an inconsistent transition with its explanation), what one observed
transition showed (:class:`Finding`), and the record offsets a model version was learned
from. :mod:`capwatch.daemon.agent_watch` re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NoReturn

from capwatch.contracts.versions import ModelVersion
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.config import DaemonConfig
from capwatch.model.consistency import (
    Inconsistency,
    PaContradiction,
    Verdict,
    check_declared,
    explain,
)
from capwatch.model.domain import Domain
from capwatch.model.errors import ModelError
from capwatch.model.grounding import Grounder
from capwatch.monitor.drift import DriftAlarm
from capwatch.monitor.transition_monitor import MonitorLimits


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """The detection settings every watch follows (from the daemon's configuration)."""

    debounce_transitions: int = 3
    """Inconsistent transitions that make the evidence ripe at once."""
    debounce_s: float = 5.0
    """Seconds after the first buffered inconsistency that make it ripe anyway."""
    max_evidence: int = 256
    max_executed_evidence: int = 64
    monitor: MonitorLimits = field(default_factory=MonitorLimits)
    unexplained_backoff_s: float = 600.0
    unexplained_max_backoff_s: float = 6 * 3600.0

    @classmethod
    def from_config(cls, config: DaemonConfig) -> WatchSettings:
        det = config.detection
        return cls(det.debounce_transitions, det.debounce_s, det.max_evidence,
                   det.max_executed_evidence,
                   MonitorLimits(max_inconsistencies=det.max_evidence,
                                 max_state_atoms=config.limits.max_state_atoms),
                   det.unexplained_backoff_s, det.unexplained_max_backoff_s)


@dataclass(frozen=True, slots=True)
class Evidence:
    """A transition the model cannot explain, with the monitor's explanation (Table 2)."""

    transition: AgentTransition
    explanation: Inconsistency
    kind: str = field(init=False, compare=False, repr=False)
    """:func:`evidence_kind` of the explanation, made once: a buffered inconsistency's
    kind is read when it is buffered (the back-off), queued (the work item's kinds) and
    awaited (what the work assesses), ~10 us each time."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", evidence_kind(self.explanation))

    @property
    def offset(self) -> int:
        return self.transition.offset


def evidence_kind(e: Inconsistency) -> str:
    """What an inconsistency says, without its objects: the action schema, whether it ran,
    and which pa-tuple values it rules out or could block it. Two transitions of one kind
    are the same evidence to an assessment, which is what the back-off compares."""
    def pas(cs: tuple[PaContradiction, ...]) -> str:
        return ",".join(sorted(f"{c.pa}:{sorted(v.value for v in c.current)}"
                               for c in cs))

    return "|".join((e.action[0], str(e.executed), pas(e.contradicted),
                     pas(e.missing_precondition_candidates),
                     str(len(e.unexplained_atoms) > 0), str(len(e.entangled) > 0),
                     ",".join(e.violated_constraints)))


@dataclass(frozen=True, slots=True)
class Finding:
    """What one observed transition showed."""

    verdict: Verdict
    alarm: DriftAlarm | None = None
    """A drift alarm this transition raised (only while nothing is awaited)."""
    ripe: bool = False
    """The agent's evidence should be assessed now: queue a work item."""
    tested: bool = False
    """The execution updated a sequential drift test (a stochastic action's outcome)."""
    held: bool = False
    """Its drift alarm, or its inconsistency, was held back by a back-off: an assessment
    of the same behaviour ended without explaining it (``AgentWatch.settle``); nothing
    is buffered or queued for it."""


_NO_POSITIONS: Mapping[int, int] = MappingProxyType({})
"""Shared by every watch whose version was learned from no record (a family baseline)."""


def explained_positions(version: ModelVersion) -> Mapping[int, int]:
    """Partition → the highest record offset among the transitions ``version`` was learned
    from (canary findings, offset -1, come from no record and do not count)."""
    if not version.evidence.get("transitions"):
        return _NO_POSITIONS
    out: dict[int, int] = {}
    for t in version.evidence.get("transitions", ()) or ():
        try:
            p, o = int(t["partition"]), int(t["offset"])
        except (KeyError, TypeError, ValueError):
            continue
        if o >= 0:
            out[p] = max(out.get(p, o), o)
    return out


def still_inconsistent(domain: Domain, evidence: Sequence[Evidence]) -> list[Evidence]:
    """The evidence ``domain`` (a newly installed model) still cannot explain, each
    explained against it; what it explains is left out. A transition whose action the
    model no longer has stays as it was: nothing explains it."""
    grounder = Grounder(domain)
    encode = grounder.index.encode
    kept = []
    for e in evidence:
        t = e.transition
        try:
            op = grounder.operator(t.action)
        except ModelError:
            kept.append(e)
            continue
        if check_declared(op, encode(t.state), encode(t.next_state),
                          t.executed)[0] is Verdict.INCONSISTENT:
            kept.append(Evidence(t, explain(domain, t.action, t.state, t.next_state,
                                            t.executed)))
    return kept


# ------------------------------------------------------------------ a frozen watch's placeholders
# (capwatch.daemon.watch_freezing): here, not there, because that module is compiled and
# mypyc does not compile subclasses of dict and list.

def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError("a frozen watch's containers are read-only: thaw the watch first")


class _ReadOnlyDict(dict[Any, Any]):
    """An empty dict that refuses every write. A dict, not a mapping proxy cast to one:
    compiled modules (capwatch/native.py) check a value's declared type at run time."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse


class _ReadOnlyList(list[Any]):
    """An empty list that refuses every write (a list, as :class:`_ReadOnlyDict`)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = remove = pop = clear = sort = reverse = _refuse


FROZEN_TIMES: dict[str, float] = _ReadOnlyDict()
FROZEN_EVIDENCE: list[Evidence] = _ReadOnlyList()
FROZEN_ALARMS: dict[str, DriftAlarm] = _ReadOnlyDict()
FROZEN_BACKOFF: dict[str, tuple[float, int]] = _ReadOnlyDict()
"""What a frozen watch holds instead of its own empty containers: read-only (a write by
mistake fails loudly), and never written, because a watch thaws before it changes."""
