"""docs/integrating-an-agent.md, executed: its files saved, its shell blocks run in order.

Blocks whose first line is ``; file: NAME`` or ``# file: NAME`` are written to a fresh
directory; the ``sh`` blocks then run there as one bash script (``capwatch`` and
``python`` from this environment), with free ports in place of 8085 and 9464. The
test checks what the page says the reader will see: the alert and the changed model.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO_ROOT
from tests.support._proc import free_port

DOC = REPO_ROOT / "docs" / "integrating-an-agent.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
FILE = re.compile(r"^(?:;|#) file: (\S+)\n")


def test_the_worked_example_runs_and_ends_in_the_alert_it_promises(tmp_path: Path) -> None:
    text = DOC.read_text()
    ports = {"8085": str(free_port()), "9464": str(free_port())}
    for old, new in ports.items():
        text = text.replace(old, new)
    script = ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
    files = []
    for language, body in BLOCK.findall(text):
        named = FILE.match(body)
        if named:
            (tmp_path / named.group(1)).write_text(body)
            files.append(named.group(1))
        elif language == "sh":
            script.append(body)
    assert {"delivery.pddl", "delivery-problem.pddl", "agent.py", "capwatch.yaml"} <= set(
        files)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"the walk-through hung:\n{out.decode()[-3000:]}") from None
    printed = out.decode()
    assert proc.returncode == 0, printed[-3000:]
    assert "capability_reduced drop(?p ?r) now requires (dock ?r)" in printed
    assert "(dock ?r)" in printed.split(":action drop", 1)[1]
    health = json.loads(printed[printed.index('{"status"'):].splitlines()[0])
    assert health["queries"] > 0  # the change was confirmed by asking the agent
    models = [json.loads(x) for x in (tmp_path / "capwatch-out" / "models.jsonl")
              .read_text().splitlines()]
    assert [(m["agent_id"], [(c["action"], c["atom"], c["location"], c["new"])
                             for c in m["changes"]]) for m in models] == [
        ("robot-7", [("drop", ["dock", "?r"], "pre", "+")])]
