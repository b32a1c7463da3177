"""``capwatch demo``: the daemon end to end on an embedded simulated fleet, no servers.

Runs the configuration in capwatch/examples/demo.yaml with a fresh SQLite store in a
temporary directory, then prints what was detected next to what was injected.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from capwatch.console.terminal import echo
from capwatch.model.pal import delta


def register(sub: Any) -> None:
    demo = sub.add_parser(
        "demo", help="run capwatch on a simulated fleet (no external services)",
        description="Run the daemon end to end on an embedded simulated fleet (no servers):"
                    " capwatch/examples/demo.yaml with a fresh SQLite store in a temporary"
                    " directory, then print what was detected next to what was injected.")
    demo.add_argument("--rounds", type=positive_int, default=None,
                      help="transitions per agent (default: as in the demo configuration)")
    demo.add_argument("--config", help="another demo configuration (simulated source)")
    demo.add_argument("--verbose", action="store_true", help="log at info level")
    demo.add_argument("--store", metavar="PATH",
                      help="keep the demo's SQLite store here (a new file) instead of in a "
                           "temporary directory, to explore it afterwards with "
                           "`capwatch models|agents|alerts --store PATH`")
    demo.add_argument("--report", metavar="DIR",
                      help="write one self-contained HTML report per family into DIR")
    demo.add_argument("--serve", action="store_true",
                      help="after the run, keep the daemon and its web console up (the "
                           "assessment workers too, so actions take effect) until Ctrl-C")
    demo.add_argument("--port", type=int, default=8080,
                      help="port of the web console with --serve (0: any free port)")
    demo.add_argument("--token", default=None,
                      help="operator token for the console's actions with --serve (default "
                           "$CAPWATCH_HTTP__TOKEN, else a random one that is printed)")
    demo.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from capwatch.adapters.io.streams import LogPublisher, MemoryPublisher
    from capwatch.daemon.config import ConfigError, load_config
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    default = resources.files("capwatch") / "examples" / "demo.yaml"
    path = Path(args.config) if args.config else Path(str(default))
    try:
        config = load_config(path)
    except ConfigError as e:
        echo(f"capwatch demo: {e}", file=sys.stderr)
        return 2
    if config.source.kind != "simulated":
        echo("capwatch demo: the demo needs source.kind: simulated", file=sys.stderr)
        return 2
    if args.rounds is not None:
        config.source.simulated.rounds = args.rounds
    if args.store is not None and Path(args.store).exists():
        echo(f"capwatch demo: {args.store} exists; the demo writes a new store",
              file=sys.stderr)
        return 2
    configure_logging("info" if args.verbose else config.log.level, "console")
    with tempfile.TemporaryDirectory(prefix="capwatch-demo-") as tmp:
        store_path = Path(args.store).resolve() if args.store else Path(tmp) / "models.db"
        config.store.url = f"sqlite:///{store_path}"
        memory = MemoryPublisher()
        service = build_service(config, publisher=LogPublisher(memory))
        fleet = service.pipeline.agents.fleet  # type: ignore[attr-defined]
        t0 = time.monotonic()
        code = service.run(exit_when_idle=True, install_signals=False)
        elapsed = time.monotonic() - t0
        result = summary(config, fleet, memory, service.pipeline.processed,
                         service.pipeline.dead_letters, elapsed)
        echo(*result.text.split("\n"))
        if args.report:
            write_reports(config.store.url, list(config.source.simulated.families),
                          Path(args.report))
        code = code if code != 0 or result.ok else 1
        if args.serve:
            try:
                serve(config, fleet, Path(tmp), args.port, args.token)
            except OSError as e:
                echo(f"capwatch demo: cannot serve on port {args.port}: {e.strerror or e}; "
                      "choose another with --port", file=sys.stderr)
                return 2
        else:
            echo("", "To look around in a browser (find the drifted agents, approve a version, "
                  "roll one back): capwatch demo --serve (or make demo-serve)")
    return code


def write_reports(store_url: str, families: list[str], directory: Path) -> None:
    from capwatch.console.report import write_report
    from capwatch.models_store import open_store

    store = open_store(store_url)
    try:
        echo("")
        for family in families:
            path = write_report(store, family, None, directory / f"{family}.html")
            echo(f"Report for {family}: {path.resolve()}")
    finally:
        store.close()


def serve(config: Any, fleet: Any, tmp: Path, port: int, token: str | None) -> None:
    """The daemon again over the demo's store with nothing left to read: its web console
    shows the run, and its workers carry out what operators ask (the simulated agents
    answer the queries)."""
    import os
    import secrets

    from pydantic import SecretStr

    from capwatch.adapters.io.streams import JsonlSource, LogPublisher, MemoryPublisher
    from capwatch.daemon.service import FleetDirectory, build_service

    token = token or os.environ.get("CAPWATCH_HTTP__TOKEN") or secrets.token_urlsafe(18)
    idle = tmp / "no-more-transitions.jsonl"
    idle.touch()
    config.http.enabled = True
    config.http.port = port
    config.console.enabled = True
    config.http.token = SecretStr(token)
    config.http.token_file = None
    service = build_service(config, publisher=LogPublisher(MemoryPublisher()),
                            agents=FleetDirectory(fleet),
                            source=JsonlSource(str(idle), follow=True))
    assert service.api is not None
    echo("", f"The console: {service.api.url}/console/",
         f"Operator token (sign in to approve, reject, roll back, assess): {token}",
         "Ctrl-C stops it.", flush=True)
    service.run(install_signals=True)


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} rounds: at least 1 transition per agent")
    return n


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def effort(evidence: Mapping[str, Any]) -> str:
    """Queries asked and, for outcome re-estimation, how many times each was sampled.

    A probability estimate asks one one-step query many times; counting it as one query
    hides the cost, counting each sample as a query conflates it with DAAISy's queries.
    """
    queries = int(evidence.get("queries", 0))
    estimates = (evidence.get("assessment") or {}).get("estimates") or {}
    samples = sum(int(e.get("samples", 0)) for e in estimates.values())
    text = _plural(queries, "query", "queries")
    if samples:
        text += f" ({_plural(samples, 'sample', 'samples')} of the agent's outcomes)"
    return text


@dataclass
class DemoResult:
    text: str
    ok: bool
    """Every drift that took effect was recovered exactly and no other agent got a
    new version."""


def summary(config: Any, fleet: Any, memory: Any, processed: int, dead: int,
            elapsed: float) -> DemoResult:
    sim = config.source.simulated
    families = sim.families
    n_agents = sum(f.agents for f in families.values())
    lines = [
        "",
        f"capwatch demo: {n_agents} agents in {len(families)} families "
        f"({', '.join(families)}), {processed} transitions in {elapsed:.1f}s "
        f"({processed / max(elapsed, 1e-9):,.0f}/s), {dead} dead letters",
        "",
    ]
    from capwatch.model.serialize import domain_from_json

    latest: dict[str, Any] = {}
    for m in memory.models:
        latest[m.agent_id] = m
    targets: dict[str, list[Any]] = {}
    for d in sim.drifts:
        names = [d.agent_id] if d.agent_id else [a for a in fleet.agent_ids
                                                 if fleet.family_of(a) == d.family]
        for a in names:
            targets.setdefault(a, []).append(d)
    drifted = set(fleet.drifted_agents())
    not_reached = sorted(set(targets) - drifted)
    lines.append(f"Drift scheduled for {_plural(len(targets), 'agent', 'agents')}; "
                 f"took effect in {len(drifted)}:")
    exact = 0
    for agent_id in sorted(set(latest) | drifted):
        m = latest.get(agent_id)
        at = fleet.drift_step(agent_id)
        when = (f"drifted at step {at} of {fleet.steps(agent_id)}"
                if at is not None else "did not drift")
        if m is None:
            after = _plural(fleet.steps(agent_id) - (at or 0), "transition", "transitions")
            lines.append(f"  {agent_id}: {when}; no new model version "
                         f"(MISSED: {after} after the drift)")
            continue
        d = delta(domain_from_json(m.model.json_), fleet.true_model(agent_id))
        if agent_id not in drifted:
            tag = "FALSE ALARM (the agent did not drift)"
        elif d == 0:
            exact += 1
            tag = "matches the agent's true model"
        else:
            tag = f"Δ {d} from the agent's true model (INEXACT)"
        lines.append(f"  {agent_id}: {when}; model v{m.version}, Δ {m.delta} from its parent, "
                     f"{effort(m.evidence)}; {tag}")
        lines.extend(f"      {s}" for s in m.summary)
    for agent_id in not_reached:
        first = min(d.at_step for d in targets[agent_id])
        lines.append(f"  {agent_id}: drift scheduled at step {first} not reached "
                     f"(the run ends at {sim.rounds} transitions per agent)")
    lines.append("")
    lines.append(f"Alerts ({len(memory.alerts)}):")
    # Per agent, in the order they were raised: in delivery order an "awaiting assessment"
    # alert held back by family grouping came after the version that answered it.
    for a in sorted(memory.alerts, key=lambda a: (a.agent_id or "", a.time)):
        lines.append(f"  [{a.severity}] {a.alert_type}: {a.agent_id}: {a.summary}")
    false_alarms = sorted(set(latest) - drifted)
    lines.append("")
    lines.append(f"Drifted agents recovered exactly (pal-tuples): {exact}/{len(drifted)}; "
                 f"undrifted agents given a new version: {len(false_alarms)}")
    ok = exact == len(drifted) and not false_alarms
    if not ok:
        lines.append("capwatch demo: FAILED: not every drift that took effect was recovered "
                     "exactly, or an agent that did not drift got a new model")
    return DemoResult("\n".join(lines), ok)
