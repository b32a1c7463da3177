"""The daemon never imports scipy.stats (~50 MB of every replica's RSS and ~0.45 s of CPU
at start): its quantiles and the Benjamini-Hochberg adjustment are scipy.special calls and
NumPy (capwatch/monitor/stats.py). Checked in a fresh interpreter, over a run that takes a
probability drift through the sequential test, its confirmation, the estimate and the
published version (every caller of the quantiles on the daemon's path)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO_ROOT

_SCRIPT = """
import json, sys
from pathlib import Path
from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.daemon.service import build_service
from tests.daemon.helpers import simulated
drifts = [{"agent_id": "courier-v1-000", "at_step": 20,
           "domain": str(Path("capwatch/examples/courier-pick-wear.pddl").resolve())}]
out = MemoryPublisher()
service = build_service(simulated(Path(sys.argv[1]), agents=1, rounds=500, drifts=drifts),
                        publisher=out)
assert service.run(exit_when_idle=True, install_signals=False) == 0
print(json.dumps({"alerts": sorted(a.alert_type for a in out.alerts),
                  "models": [m.agent_id for m in out.models],
                  "stats": "scipy.stats" in sys.modules}))
"""


def test_a_probability_drift_is_published_without_scipy_stats(tmp_path: Path) -> None:
    # In a fresh interpreter: this one has imported scipy.stats for other tests.
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout
    seen = json.loads(out.splitlines()[-1])
    assert seen["alerts"] == ["effect_distribution_drift"]
    assert seen["models"] == ["courier-v1-000"]
    assert seen["stats"] is False
