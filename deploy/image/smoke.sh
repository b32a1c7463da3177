#!/bin/bash
# Smoke test of a built capwatch image, run as the chart runs it: non-root, read-only root
# file system, no capabilities, no privilege escalation, a writable /tmp only, no network.
# Usage: deploy/image/smoke.sh [IMAGE]
set -eu
# The runtime and limits build.sh chose for this host (see there).
CONF="$(cd "$(dirname "$0")/../.." && pwd)/build/image/containers.conf"
if [ -z "${CONTAINERS_CONF:-}" ] && [ -f "$CONF" ]; then
    export CONTAINERS_CONF="$CONF"
fi
IMAGE="${1:-localhost/capwatch:0.1.0}"
run() {
    podman run --rm --read-only --tmpfs /tmp:rw,size=256m --cap-drop ALL \
        --security-opt no-new-privileges --network none "$@"
}
EXAMPLES=/opt/capwatch/lib/python3.11/site-packages/capwatch/examples

echo "== user"
uid="$(run --entrypoint id "$IMAGE" -u)"
[ "$uid" = 10001 ] || { echo "runs as uid $uid, expected 10001" >&2; exit 1; }

echo "== the hot path runs compiled (capwatch/native.py)"
run --entrypoint python3 "$IMAGE" -W error::RuntimeWarning -c \
    "import sys, capwatch.native as n; print(n.describe()); sys.exit(not n.compiled())"

echo "== capwatch --help"
run "$IMAGE" --help >/dev/null

echo "== the otel extra (OTLP ingest) is installed"
run --entrypoint python3 "$IMAGE" -c "import opentelemetry.proto.trace.v1.trace_pb2"

echo "== capwatch run --check (demo configuration)"
run "$IMAGE" run --check --config "$EXAMPLES/demo.yaml"

echo "== Fast Downward (the driver, and capwatch's adapter) plans the rover example"
run -i --entrypoint python3 "$IMAGE" - <<'PY'
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from capwatch.adapters.io.fast_downward import FastDownwardPlanner, driver_path
from capwatch.assess.planner import PlanningTask
from capwatch.model.grounding import Grounder
from capwatch.model.pddl_reader import parse_plan, read_domain, read_problem
from capwatch.model.simulate import execute_plan

ex = Path(str(resources.files("capwatch") / "examples"))
with tempfile.TemporaryDirectory() as tmp:
    plan_file = Path(tmp) / "plan"
    run = subprocess.run([sys.executable, str(driver_path()), "--plan-file", str(plan_file),
                          str(ex / "rover.pddl"), str(ex / "rover-problem.pddl"),
                          "--search", "astar(lmcut())"], cwd=tmp, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    plan = [tuple(s) for s in parse_plan(plan_file.read_text())]
assert plan, "Fast Downward wrote an empty plan"
# The adapter capwatch uses: its goals are complete states, so plan to where that plan ends.
domain = read_domain(ex / "rover.pddl")
problem = read_problem(ex / "rover-problem.pddl")
n, end = execute_plan(Grounder(domain), problem.init, plan)
assert n == len(plan)
task = PlanningTask(domain, problem.objects_by_type(domain), problem.init, end)
again = FastDownwardPlanner(timeout=120).shortest_plan(task, len(plan))
assert again is not None and len(again) == len(plan), again
print(f"Fast Downward: {len(plan)}-step optimal plan, found again through capwatch's adapter")
PY

echo "== capwatch run: the daemon serves health, metrics and the token-guarded API"
run -i --entrypoint python3 "$IMAGE" - <<'PY'
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path

ex = Path(str(resources.files("capwatch") / "examples"))
Path("/tmp/in.jsonl").write_text("")
Path("/tmp/c.yaml").write_text(f"""
families: {{rover: {{domain: {ex / 'rover.pddl'}}}}}
source: {{kind: jsonl, path: /tmp/in.jsonl, follow: true}}
output: {{kind: jsonl, directory: /tmp/out}}
store: {{url: sqlite:////tmp/m.db}}
http: {{host: 127.0.0.1, port: 9464, read_auth: true}}
""")
env = {**os.environ, "CAPWATCH_HTTP__TOKEN": "smoke-token"}
daemon = subprocess.Popen(["capwatch", "run", "--config", "/tmp/c.yaml"], env=env)


def get(path, token=None):
    req = urllib.request.Request("http://127.0.0.1:9464" + path)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


deadline = time.monotonic() + 60
while get("/readyz")[0] != 200:
    assert daemon.poll() is None, f"the daemon exited with {daemon.returncode}"
    assert time.monotonic() < deadline, "not ready within 60 s"
    time.sleep(0.2)
status, metrics = get("/metrics")
assert status == 200 and "capwatch_build_info" in metrics and "process_cpu_seconds_total" in metrics
assert get("/api/v1/agents")[0] == 401
status, body = get("/api/v1/agents", "smoke-token")
assert status == 200 and json.loads(body)[0]["family"] == "rover", body
daemon.send_signal(signal.SIGTERM)
assert daemon.wait(30) == 0, daemon.returncode
print("daemon: ready, /metrics with process_*, /api/v1 behind the token, clean SIGTERM")
PY

echo "== capwatch demo"
out="$(run "$IMAGE" demo)"
echo "$out" | tail -n 4
echo "$out" | grep -q "Drifted agents recovered exactly" || { echo "demo printed no summary" >&2; exit 1; }
echo "smoke test passed: $IMAGE"
