"""A trace's vocabulary check (Intake): each state checked once, the reason of a refused
trace still the first bad step's, as ``vocabulary_error`` step by step names it."""

from __future__ import annotations

import json
import random
from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.contracts import wire
from capwatch.contracts.wire import AgentTransition, vocabulary_error
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from tests.daemon.helpers import HALF, SAMPLE, SAMPLED, config, example

DROP = ["drop_sample", "rover1", "store1"]
DROPPED = [["at", "rover1", "waypoint1"], ["equipped_rock_analysis", "rover1"],
           ["battery_reserve", "rover1"]]
BAD_ATOMS = [["wet", "rover1"], ["at", "rover1"], ["at", "rover1", "waypoint1", "x"],
             ["battery_half"]]
BAD_ACTIONS = [["fly", "rover1"], ["drop_sample", "rover1"],
               ["sample_rock", "rover1", "store1"]]


def _daemon(tmp_path: Path, lines: list[str]) -> Pipeline:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    service = build_service(cfg, publisher=MemoryPublisher(), source=JsonlSource(str(path)))
    d = service.pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    return d


def _reference(raw: str) -> str | None:
    """The reason ``vocabulary_error`` gives step by step for the trace, on the schema
    decoder's transitions (None: every step in the rover model's vocabulary)."""
    steps = wire.decode(raw.encode())
    assert isinstance(steps, list)
    domain = example("rover.pddl")
    for t in steps:
        assert isinstance(t, AgentTransition)
        problem = vocabulary_error(domain, t)
        if problem is not None:
            return f"step {t.step}: {problem}"
    return None


def _trace(rng: random.Random, k: int) -> str:
    """A trace of 2-6 steps cycling sample / drop / refused, one thing made wrong in
    about two of three (an atom of any state, an action), fields in a random order."""
    n = rng.randint(2, 6)  # (a trace of one step is checked as a transition is)
    states = [HALF]
    actions = []
    for i in range(n):
        if i % 3 == 0:
            actions.append(SAMPLE)
            states.append(SAMPLED)
        elif i % 3 == 1:
            actions.append(DROP)
            states.append(DROPPED)
        else:
            actions.append(DROP)  # refused: its state repeated
            states.append(states[-1])
    states = [list(s) for s in states]
    what = rng.random()
    if what < 0.4:
        at = rng.randrange(len(states))
        states[at] = [*states[at][:rng.randrange(len(states[at]) + 1)], rng.choice(BAD_ATOMS),
                      *states[at][len(states[at]):]]
        rng.shuffle(states[at])
    elif what < 0.65:
        actions[rng.randrange(n)] = rng.choice(BAD_ACTIONS)
    fields = [("type", "trace"), ("agent_id", f"rover-{k}"), ("family", "rover-v1"),
              ("states", states), ("actions", actions), ("start_step", 10 * k)]
    rng.shuffle(fields)
    return json.dumps(dict(fields), indent=rng.choice([None, 2]))


def test_a_refused_trace_names_the_first_bad_step_as_the_step_by_step_check(
        tmp_path: Path) -> None:
    rng = random.Random(14)
    lines = [_trace(rng, k).replace("\n", " ") for k in range(300)]
    expected = [_reference(line) for line in lines]
    assert 60 < sum(e is None for e in expected) < 240  # both kinds, many of each
    d = _daemon(tmp_path, lines)
    reasons = {}
    for r in d.source.poll(1.0):
        before = len(d.publisher.inner.dead_letters)  # type: ignore[attr-defined]
        d.handle(r)
        letters = d.publisher.inner.dead_letters[before:]  # type: ignore[attr-defined]
        reasons[r.offset] = letters[0].reason if letters else None
    assert [reasons[i] for i in range(len(lines))] == expected
    held = {f"rover-{k}" for k, e in enumerate(expected) if e is None}
    assert {w.agent_id for w in d.registry if w.transitions} == held
    d.source.close()
    d.store.close()
