"""docs/daemon.md's configuration table names every setting of the daemon's configuration
model, with the defaults the model has: a setting added without its row, or a default
changed in one place only, fails here (ops18 found eleven settings undocumented and the
chart's values without a table)."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from capwatch.daemon.config import DaemonConfig
from tests.paths import REPO_ROOT

DAEMON_MD = (REPO_ROOT / "docs" / "daemon.md").read_text()


UNITS = {"": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30,
         "day": 86400, "days": 86400}


def _section(annotation: Any) -> type[BaseModel] | None:
    for c in (annotation, *typing.get_args(annotation)):
        for cc in (c, *typing.get_args(c)):
            if isinstance(cc, type) and issubclass(cc, BaseModel):
                return cc
    return None


def _fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, f in model.model_fields.items():
        sub = _section(f.annotation)
        if sub is not None:
            yield from _fields(sub, f"{prefix}{name}.")
        elif f.default_factory is None:
            yield prefix + name, f.default
        else:
            yield prefix + name, None


def _rows() -> dict[str, str]:
    """The configuration table's rows: the section's name → the row's text."""
    table = DAEMON_MD.split("| section | main fields (defaults) |", 1)[1].split("\n\n", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| (.*) \|$", table, re.M)}


def test_every_setting_is_named_in_its_sections_row() -> None:
    rows = _rows()
    missing = []
    for path, _ in _fields(DaemonConfig):
        section, *rest = path.split(".")
        row = rows.get(section)
        if row is None:
            missing.append(path)
            continue
        # A setting of a nested part (kafka.sasl, agents.tls, assessment.agent_retry...)
        # may be described below the table, where the row points.
        named = row if len(rest) < 2 else DAEMON_MD
        if rest and not re.search(rf"\b{rest[-1]}\b", named):
            missing.append(path)
    assert not missing, f"settings no row of docs/daemon.md's table names: {missing}"


def test_the_rows_defaults_are_the_models() -> None:
    """Each "`name` (number" in a row is that setting's default in the model."""
    defaults = dict(_fields(DaemonConfig))
    wrong = []
    checked = 0
    for section, row in _rows().items():
        for m in re.finditer(r"`(\w+)` \((-?[0-9][0-9,]*(?:\.[0-9]+)?)( [KMG]i?B| days?)?"
                             r"(?=[:;,) ])", row):
            name = m.group(1)
            said = float(m.group(2).replace(",", "")) * UNITS[(m.group(3) or "").strip()]
            paths = [p for p in defaults if p.startswith(f"{section}.") and
                     p.rsplit(".", 1)[-1] == name]
            if len(paths) != 1:
                continue
            value = defaults[paths[0]]
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue  # also PydanticUndefined: a required setting has no default
            checked += 1
            if float(value) != said:
                wrong.append(f"{paths[0]}: docs {m.group(2)}, model {value}")
    assert checked >= 30
    assert not wrong, wrong
