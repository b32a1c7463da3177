"""The packages whose names are imported at first use (``capwatch.lazy``): importing the
package loads none of its modules, reading a name loads its module once, and a name the
package does not export is an AttributeError naming it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from capwatch.lazy import lazy_getattr

_PROBE = """
import json, sys
import {package} as p
before = sorted(m for m in sys.modules if m.startswith("{package}."))
value = getattr(p, "{name}")
after = sorted(m for m in sys.modules if m.startswith("{package}."))
try:
    p.no_such_name
    missing = None
except AttributeError as e:
    missing = str(e)
print(json.dumps([before, after, "{name}" in vars(p), value.__module__, missing]))
"""


@pytest.mark.parametrize(("package", "name", "module"), [
    ("capwatch.model", "Grounder", "capwatch.model.grounding"),
    ("capwatch.alerts", "AlertOutbox", "capwatch.alerts.outbox"),
])
def test_a_name_is_imported_at_first_use_and_kept(package: str, name: str,
                                                  module: str) -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(package=package, name=name)],
                         capture_output=True, text=True, check=True).stdout
    before, after, kept, defined_in, missing = json.loads(out.splitlines()[-1])
    assert module not in before
    assert module in after and defined_in == module
    assert kept  # the next lookup does not come back to __getattr__
    assert missing == f"module {package!r} has no attribute 'no_such_name'"


def test_lazy_getattr_reads_the_module_map_it_is_given() -> None:
    namespace: dict[str, object] = {}
    getattr_ = lazy_getattr("capwatch.model", {"PDDLError": "errors"}, namespace)
    from capwatch.model.errors import PDDLError
    assert getattr_("PDDLError") is PDDLError and namespace == {"PDDLError": PDDLError}
    with pytest.raises(AttributeError, match=r"'capwatch\.model' has no attribute 'Domain'"):
        getattr_("Domain")
