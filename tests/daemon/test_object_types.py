"""An action naming an object of another type than its parameter's (declared by the
family's problem) is a dead letter with reason ``type``: a model's types are fixed, so no
assessment could learn it. It used to look like an inconsistency and queue one (rev12a)."""

from __future__ import annotations

import json
from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.model.object_types import ObjectTypes
from capwatch.model.pddl_reader import read_problem
from tests.daemon.helpers import EXAMPLES, HALF, SAMPLED, config, example, good_sample

SWAPPED = ["sample_rock", "store1", "rover1", "waypoint1"]
"""The rover and its store swapped: both declared (rover-problem.pddl), of other types."""


def _fed(tmp_path: Path, lines: list[str]) -> tuple[Pipeline, MemoryPublisher]:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 1, "debounce_s": 3600})
    out = MemoryPublisher()
    d = build_service(cfg, publisher=out, source=JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    while records := d.source.poll(0.1):
        d.handle_batch(records)
    return d, out


def _event(action: list[str], step: int, **extra: object) -> str:
    return json.dumps({"type": "transition", "agent_id": "rover-a", "family": "rover-v1",
                       "episode_id": "ep", "step": step, "state": HALF, "action": action,
                       "next_state": HALF, "executed": False, **extra})


def test_a_mistyped_action_is_a_dead_letter_not_an_inconsistency(tmp_path: Path) -> None:
    d, out = _fed(tmp_path, [good_sample(step=0), _event(SWAPPED, 1), good_sample(step=2)])
    try:
        (dead,) = out.dead_letters
        assert dead.offset == 1
        assert "object 'store1' is a store, but its parameter ?r takes a rover" in dead.reason
        watch = d.registry.get("rover-a")
        assert watch is not None and watch.evidence == [] and watch.inconsistent == 0
        assert d.store.queue_items() == []  # nothing for an assessment to learn
        assert d.metrics.registry.get_sample_value(
            "capwatch_dead_letters_total", {"reason": "type"}) == 1
        # Not lost: handled (its offset may be committed), as every dead letter is.
        assert d.checkpoints.commit_offsets() == {0: 3}
    finally:
        d.source.close()
        d.store.close()


def test_a_trace_with_a_mistyped_step_is_refused_whole(tmp_path: Path) -> None:
    trace = json.dumps({"type": "trace", "agent_id": "rover-a", "family": "rover-v1",
                        "episode_id": "ep", "start_step": 0,
                        "states": [HALF, SAMPLED, SAMPLED],
                        "actions": [["sample_rock", "rover1", "store1", "waypoint1"],
                                    ["drop_sample", "store1", "rover1"]]})
    d, out = _fed(tmp_path, [trace])
    try:
        (dead,) = out.dead_letters
        assert dead.reason.startswith("step 1: action 'drop_sample': object 'store1'")
        watch = d.registry.get("rover-a")
        assert watch is None or watch.transitions == 0
    finally:
        d.source.close()
        d.store.close()


def test_objects_the_problem_does_not_declare_are_not_checked() -> None:
    domain = example("rover.pddl")
    problem = read_problem(EXAMPLES / "rover-problem.pddl")
    types = ObjectTypes(problem.objects)
    assert types.problem(domain, ("sample_rock", "rover9", "store9", "waypoint9")) is None
    assert types.problem(domain, ("sample_rock", "rover1", "store1", "waypoint1")) is None
    assert ("sample_rock", "rover1", "store1", "waypoint1") in types.ok
    why = types.problem(domain, ("navigate", "rover1", "waypoint1", "store1"))
    assert why is not None and "parameter ?to takes a waypoint" in why
    assert ("navigate", "rover1", "waypoint1", "store1") not in types.ok
