from __future__ import annotations

import pytest

from capwatch.monitor.attribution import Attribution
from capwatch.monitor.tables import OutcomeWindow


def test_sliding_window_ages_out_old_behaviour() -> None:
    w = OutcomeWindow(2, size=10)
    for _ in range(10):
        w.add(0)
    assert w.counts().tolist() == [10, 0]
    for _ in range(4):
        w.add(1)
    # The four oldest zeros have left the window.
    assert w.counts().tolist() == [6, 4]
    assert w.span() == (4, 14)
    for _ in range(10):
        w.add(1)
    assert w.counts().tolist() == [0, 10]


def test_tumbling_window_tests_completed_blocks_only() -> None:
    w = OutcomeWindow(2, size=5, kind="tumbling")
    for x in (0, 0, 1, 0):
        w.add(x)
    assert w.counts().tolist() == [0, 0]
    w.add(1)
    assert w.counts().tolist() == [3, 2]
    assert w.span() == (0, 5)
    for _ in range(4):
        w.add(1)
    assert w.counts().tolist() == [3, 2]  # the next block is not complete yet
    w.add(1)
    assert w.counts().tolist() == [0, 5]
    assert w.span() == (5, 10)


def test_counts_since_reads_the_retained_tail() -> None:
    w = OutcomeWindow(3, size=8)
    for x in (0, 1, 2, 0, 1, 2, 2, 2, 1, 0):
        w.add(x)
    counts, ambiguous, first = w.counts_since(6)
    assert counts.tolist() == [1, 1, 2]
    assert (ambiguous, first) == (0, 6)
    # Older than the buffer: clipped to what is retained.
    counts, _, first = w.counts_since(0)
    assert first == 2
    assert int(counts.sum()) == 8


def test_ambiguous_observations_are_tallied_apart() -> None:
    w = OutcomeWindow(3, size=4)
    w.add(Attribution(((0, 1), (2,)), 0))
    w.add(Attribution.single(3, 2))
    w.add(Attribution(((0,), (1,), (2,)), 1))
    assert w.counts().tolist() == [0, 1, 1]
    assert w.ambiguous() == 1
    for _ in range(4):
        w.add(0)
    assert w.ambiguous() == 0


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        OutcomeWindow(2, size=0)
    w = OutcomeWindow(2, size=3)
    with pytest.raises(ValueError):
        w.add(2)


def test_clear() -> None:
    w = OutcomeWindow(2, size=3)
    w.add(1)
    w.clear()
    assert w.seen == 0
    assert w.counts().tolist() == [0, 0]


@pytest.mark.parametrize("kind", ["sliding", "tumbling"])
def test_a_window_filling_up_answers_as_the_plain_record_of_its_executions(kind: str) -> None:
    import random

    rng = random.Random(7)
    size = 100
    w = OutcomeWindow(3, size=size, kind=kind)  # type: ignore[arg-type]
    seen: list[int] = []
    for n in range(1, 260):
        x = rng.choice([0, 1, 2, 2, -1])
        w.add(x)
        seen.append(x)
        tail = seen[-size:]
        if kind == "sliding":
            assert w.counts().tolist() == [tail.count(i) for i in range(3)]
            assert w.ambiguous() == tail.count(-1)
        start = max(0, n - rng.randrange(1, 2 * size))
        kept = seen[max(start, n - size):]
        counts, ambiguous, first = w.counts_since(start)
        assert (counts.tolist(), ambiguous, first) == \
            ([kept.count(i) for i in range(3)], kept.count(-1), max(start, n - size))
        state = w.export_state()
        assert state["values"] == tail
        again = OutcomeWindow(3, size=size, kind=kind)  # type: ignore[arg-type]
        again.load_state(state)
        assert again.export_state() == state
        assert again.counts().tolist() == w.counts().tolist()
    # A window holds room for what it has seen, not for its whole size.
    few = OutcomeWindow(2, size=1_000)
    for x in (0, 1, 1):
        few.add(x)
    assert few.export_state()["values"] == [0, 1, 1]
    assert few._buffer.nbytes < 100
