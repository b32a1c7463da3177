"""SciPy's statistics are imported before the daemon consumes, not at the first record
that needs them (session 15: on the main loop at the first probabilistic action's drift
interval, 0.4-0.8 s soon after every start), nor when the daemon's modules are imported
(ops15: ~0.45 s before the probes could answer)."""

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
service = build_service(simulated(Path(sys.argv[1]), agents=1, rounds=1),
                        publisher=MemoryPublisher())
before = "scipy.stats" in sys.modules
service.pipeline.open()
print(json.dumps([before, "scipy.stats" in sys.modules]))
service.pipeline.store.close()
"""


def test_scipy_statistics_are_loaded_when_the_pipeline_opens(tmp_path: Path) -> None:
    # In a fresh interpreter: this one has imported everything already.
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path)], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == [False, True]
