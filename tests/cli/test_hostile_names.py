"""Every line the command line prints for a person escapes what the wire refuses (bidi
overrides, zero-width and other format characters, controls), as the tables have since
session 21, and a line break or carriage return inside a name or a message too: names
stored before the wire refused them (session 20), an operator's reason and an agent's error
message reach ``agents show``, ``alerts tail`` and ``alerts show``, which printed them raw
(a right-to-left override reordered the rest of the terminal line; a line feed in a summary
made one alert read as two in ``alerts tail``)."""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from capwatch.alerts.outbox import outbox_record
from capwatch.alerts.types import assessment_failed_alert
from capwatch.cli import main
from capwatch.console.terminal import line
from capwatch.contracts.wire_text import REFUSED
from capwatch.models_store import open_store, record_new_model
from tests.daemon.helpers import example

T0 = datetime(2026, 11, 28, 4, 0, tzinfo=UTC)
AGENT = "rover\u202e1-\u200bx"
"""Shown raw, ``rover`` then ``x-1`` right to left, and a zero-width space."""


def _raw(out: str) -> list[str]:
    """The characters of ``out`` a terminal would not show as they are."""
    return [c for c in out if c == "\r" or (c not in "\n" and (
        c == "\t" or unicodedata.category(c) in REFUSED))]


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    path = str(tmp_path / "models.db")
    store = open_store(path)
    try:
        base = example("rover.pddl")
        record_new_model(store, "rover-v1", None, base, T0)
        record_new_model(store, "rover-v1", AGENT, example("rover-sample-drift.pddl"),
                         T0 + timedelta(hours=1))
        alerts = [assessment_failed_alert(
            family="rover-v1", agent_id=AGENT, time=T0 + timedelta(hours=2 + i),
            reason="error", message=f"agent said: fine\nassessment_failed ok {i}\rX\u2028Y",
            evidence={"assessment_key": f"k{i}"}) for i in range(2)]
        store.add_alerts([outbox_record(a, f"k{i}") for i, a in enumerate(alerts)])
    finally:
        store.close()
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert _raw(err) == []
    return out


def test_agents_show_and_the_alert_lines_escape_hostile_names(
        store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    shown = line(AGENT)
    assert shown == "rover\\u202e1-\\u200bx"
    out = _run(capsys, "agents", "show", f"rover-v1/{AGENT}", "--store", store_path)
    assert _raw(out) == [] and out.startswith(f"rover-v1/{shown}\n")
    out = _run(capsys, "alerts", "tail", "-n", "5", "--store", store_path)
    assert _raw(out) == []
    tail = out.splitlines()
    assert len(tail) == 2, "one line an alert, whatever its summary holds"
    assert all(f"rover-v1/{shown}" in x and "fine\\u000aassessment_failed ok" in x
               for x in tail)
    out = _run(capsys, "alerts", "ls", "--store", store_path)
    assert _raw(out) == [] and len(out.splitlines()) == 3
    out = _run(capsys, "alerts", "show", "k1", "--store", store_path)
    assert _raw(out) == []
    assert out.startswith(f"assessment_failed [warning] rover-v1/{shown}  ")
    for argv in (["agents", "ls"], ["models", "list"], ["models", "history", f"rover-v1/{AGENT}"],
                 ["models", "show", f"rover-v1/{AGENT}"]):
        out = _run(capsys, *argv, "--store", store_path)
        assert _raw(out) == [] and shown in out, argv


def test_an_error_naming_a_hostile_name_is_escaped(
        store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agents", "show", "nosuch\u202e", "--store", store_path]) == 1
    _, err = capsys.readouterr()
    assert _raw(err) == [] and "nosuch\\u202e" in err
