from __future__ import annotations

from capwatch.model.consistency import Verdict, check
from capwatch.model.domain import Action, Domain, LiftedAtom, Outcome, Parameter, Predicate
from capwatch.model.grounding import Grounder
from capwatch.monitor.attribution import Attribution, attribute, attribution_from_mask

X = Parameter("?x")
READY, HELD, BROKEN = (LiftedAtom(n, ("?x",)) for n in ("ready", "held", "broken"))
GRAB = Action(
    "grab", (X,), pre_pos=frozenset({READY}),
    outcomes=(
        Outcome(frozenset({HELD}), frozenset({READY}), 0.6),
        Outcome(probability=0.3),
        Outcome(frozenset({BROKEN}), frozenset(), 0.1),
    ),
)
DOMAIN = Domain("toy", tuple(Predicate(n, (X,)) for n in ("ready", "held", "broken")), (GRAB,))


def _setup() -> tuple[Grounder, int, int]:
    g = Grounder(DOMAIN)
    op_index = g.index
    ready = op_index.encode([("ready", "o")])
    broken_ready = op_index.encode([("ready", "o"), ("broken", "o")])
    return g, ready, broken_ready


def _outcome_index(pred: str | None) -> int:
    for i, o in enumerate(GRAB.outcomes):
        if pred is None and o.is_noop:
            return i
        if pred is not None and any(a.predicate == pred for a in o.add):
            return i
    raise AssertionError


def test_distinguishable_state_attributes_a_single_outcome() -> None:
    g, ready, _ = _setup()
    op = g.operator(("grab", "o"))
    held = g.index.encode([("held", "o")])
    a = attribute(op, ready, held)
    assert a is not None
    assert a.distinguishable
    assert a.outcome == _outcome_index("held")
    b = attribute(op, ready, ready)
    assert b is not None and b.outcome == _outcome_index(None)


def test_outcomes_that_coincide_in_the_state_form_one_group() -> None:
    g, _, broken_ready = _setup()
    op = g.operator(("grab", "o"))
    # (broken o) is already true: "break it" and "nothing happens" look the same.
    a = attribute(op, broken_ready, broken_ready)
    assert a is not None
    assert not a.distinguishable
    assert a.outcome is None
    assert set(a.explaining) == {_outcome_index(None), _outcome_index("broken")}
    assert sorted(i for block in a.partition for i in block) == [0, 1, 2]


def test_unmodelled_successor_and_inapplicable_action_are_not_attributed() -> None:
    g, ready, _ = _setup()
    op = g.operator(("grab", "o"))
    weird = g.index.encode([("held", "o"), ("broken", "o")])
    assert attribute(op, ready, weird) is None  # structural drift: not for the statistics
    nothing = g.index.encode([])
    assert attribute(op, nothing, nothing) is None  # not executed: no outcome was drawn


def test_from_consistency_mask_agrees_with_attribute() -> None:
    g, ready, broken_ready = _setup()
    op = g.operator(("grab", "o"))
    for state in (ready, broken_ready):
        for outcome in range(3):
            nxt = op.apply(state, outcome)
            verdict, mask = check(op, state, nxt)
            assert verdict is Verdict.APPLIED
            assert attribution_from_mask(op, state, mask) == attribute(op, state, nxt)
    assert attribution_from_mask(op, ready, 0) is None


def test_single() -> None:
    a = Attribution.single(3, 1)
    assert a.distinguishable and a.outcome == 1 and a.explaining == (1,)


def _partitions(items: list[int]) -> list[list[list[int]]]:
    if not items:
        return [[]]
    first, rest = items[0], items[1:]
    out = []
    for p in _partitions(rest):
        out.append([[first], *p])
        for i in range(len(p)):
            out.append([*p[:i], [first, *p[i]], *p[i + 1:]])
    return out


def test_counted_is_the_outcome_of_a_distinguishable_observation_else_ambiguous() -> None:
    # What the tables and the detector read instead of the two properties.
    for k in range(1, 5):
        for groups in _partitions(list(range(k))):
            partition = tuple(sorted(tuple(g) for g in groups))
            for block in range(len(partition)):
                a = Attribution(partition, block)
                expected = a.outcome if a.distinguishable else -1
                assert a.counted == (-1 if expected is None else expected)
                assert a == Attribution(partition, block) and "counted" not in repr(a)
