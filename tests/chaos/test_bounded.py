"""The bounded chaos suite (part of ``make test``): the harness's own guarantees and the
hostile-input kinds capwatch already handles. Rows of issue 12 that still fail are in
reproductions/ (``make chaos``) until fixed; docs/reliability.md lists them."""

from __future__ import annotations

from pathlib import Path

from capwatch.model.pal import delta
from capwatch.model.pddl_reader import read_domain
from capwatch.model.serialize import domain_from_json
from tests.chaos.harness import EXAMPLES, FleetInput, Outcome
from tests.chaos.hostile import generate
from tests.chaos.scenarios import hostile_jsonl

FIXED_KINDS = [
    "random_bytes", "truncated", "not_utf8", "json_array", "json_scalar", "deep_nesting",
    "deep_in_field", "trailing_garbage", "two_objects", "nan", "negative_step",
    "unknown_field", "missing_field", "wrong_type", "wrong_version", "empty_atom",
    "name_with_space", "name_with_paren", "control_char", "too_many_args", "too_many_atoms",
    "long_name", "unknown_family", "unknown_action", "unknown_predicate", "wrong_arity",
    "trace_lengths", "lone_surrogate", "valid", "valid_unicode_episode", "valid_trace",
]
"""Hostile kinds whose handling is right today; the rest are reproductions."""


def test_an_uninterrupted_run_learns_each_drift_once_and_exactly(
        drift_fleet: FleetInput, drift_reference: Outcome) -> None:
    ref = drift_reference
    assert ref.exits == [0] and ref.tracebacks == 0
    assert ref.committed == len(drift_fleet.lines)
    assert sorted(ref.versions) == [(a, 1) for a in sorted(drift_fleet.drifted)]
    assert set(ref.published) == set(ref.versions)
    truth = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    for key, model in ref.versions.items():
        assert delta(domain_from_json(model), truth) == 0, key
    assert ref.alerts, "a drift raised no alert"
    assert not ref.dead_letters


def test_hostile_messages_are_dead_lettered_and_valid_ones_processed(
        valid_events: tuple[list[bytes], dict[str, dict[str, str]]], tmp_path: Path) -> None:
    valid, families = valid_events
    messages = list(generate(valid, 3000, seed=12, kinds=FIXED_KINDS))
    report = hostile_jsonl(messages, tmp_path / "hostile", families)
    assert report.exit_code == 0 and report.tracebacks == 0
    assert report.committed == report.sent, "records were left unread"
    assert report.wrong == {}, report.by_kind
    assert report.internal_errors == 0
    # Not vacuous: both fates occurred.
    assert 0 < sum(v["dead"] for v in report.by_kind.values()) < report.sent
