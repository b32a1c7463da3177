"""``capwatch agents ls|show``, ``capwatch alerts ls|tail|show`` and ``capwatch report``.

Read from the models store, so they show every replica's agents and alerts. Tables for
people; ``--json`` for machines (one JSON document, or one object per line for
``alerts tail``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from capwatch.cli.models_cmd import _Fail, _run, store_options
from capwatch.console import data
from capwatch.console.terminal import echo
from capwatch.console.text import outcome_table, table, when
from capwatch.contracts.store import ModelStore, OutboxAlert
from capwatch.models_store.actions import action_store

SEVERITIES = {"critical": 0, "warning": 1, "info": 2}


def register(sub: Any) -> None:
    agents = sub.add_parser("agents", help="the fleet: every agent's state, model and alerts")
    asub = agents.add_subparsers(dest="agents_command", required=True)
    p = asub.add_parser("ls", parents=[store_options(json_flag=True)], help="list agents")
    p.add_argument("--family")
    p.add_argument("--state", choices=data.STATES)
    p.add_argument("--sort", choices=data.SORT_KEYS, default="family")
    p.add_argument("--desc", action="store_true", help="sort descending")
    p.set_defaults(handler=_agents_ls)
    p = asub.add_parser("show", parents=[store_options(json_flag=True)],
                        help="one agent: state, lineage, changes, actions, alerts")
    p.add_argument("agent_id", help="AGENT or FAMILY/AGENT (as the other commands print it)")
    p.add_argument("--family", help="needed only if two families have an agent of this name")
    p.set_defaults(handler=_agents_show)

    alerts = sub.add_parser("alerts", help="alert history from the store (every replica)")
    lsub = alerts.add_subparsers(dest="alerts_command", required=True)
    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--family")
    filters.add_argument("--agent")
    filters.add_argument("--type", help="alert type, e.g. capability_reduced")
    p = lsub.add_parser("ls", parents=[store_options(json_flag=True), filters],
                        help="alerts, newest first")
    p.add_argument("--limit", type=_positive, default=50)
    p.set_defaults(handler=_alerts_ls)
    p = lsub.add_parser("tail", parents=[store_options(json_flag=True), filters],
                        help="the newest alerts, oldest first; -f to follow")
    p.add_argument("-n", "--lines", type=_positive, default=10)
    p.add_argument("-f", "--follow", action="store_true", help="print new alerts as they come")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between polls (-f)")
    p.set_defaults(handler=_alerts_tail)
    p = lsub.add_parser("show", parents=[store_options(json_flag=True)],
                        help="one alert with its detail and evidence")
    p.add_argument("key", help="the alert's ID (from ls/tail) or its key (a unique prefix "
                               "of either will do)")
    p.set_defaults(handler=_alerts_show)

    p = sub.add_parser("report", parents=[store_options()],
                       help="write one self-contained HTML file about a family or an agent")
    p.add_argument("target", help="FAMILY or FAMILY/AGENT")
    p.add_argument("-o", "--output", required=True, help="the HTML file to write")
    p.set_defaults(handler=_report)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


# ------------------------------------------------------------------ agents


def _agents_ls(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        rows = data.fleet(store, args.family)
        page = data.select(rows, state=args.state, sort=args.sort, descending=args.desc,
                           per_page=len(rows) or 1)
        if args.json:
            print(json.dumps([r.to_json() for r in page.rows]))
            return
        echo(*table(["FAMILY", "AGENT", "STATE", "MODEL", "Δ BASE", "OPEN ALERTS",
                     "LAST EVENT", "CHANGE"],
                    [[r.family, r.agent_id, r.state, _model(r), str(r.delta_to_baseline),
                      str(r.open_alerts), f"{when(r.last_event)} {r.last_event_what}",
                      _change(r)] for r in page.rows], right=(4, 5)).split("\n"))
        counts = ", ".join(f"{n} {s}" for s, n in page.counts.items() if n)
        echo("", f"{page.total} of {len(rows)} agents shown; fleet: {counts or 'empty'}")
    return _run(args, body)


def _change(r: data.AgentRow) -> str:
    # The first line alone read as the whole change: a critical line after an
    # informational one was off the screen with nothing saying so (as on the fleet page).
    more = f" (+{r.more_changes} more)" if r.more_changes else ""
    return r.change[:100] + more


def _model(r: data.AgentRow) -> str:
    return f"{'own' if r.version.agent_id else 'baseline'}@{r.version.version}"


def _find_family(store: ModelStore, agent_id: str, family: str | None) -> str:
    if family:
        return family
    families = sorted({f for f, a in action_store(store).known_agents() if a == agent_id})
    if not families:
        raise _Fail(f"no agent {agent_id} in the store")
    if len(families) > 1:
        raise _Fail(f"{agent_id} is in several families ({', '.join(families)}): add --family")
    return families[0]


def _agents_show(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        # `agents ls`, `alerts ls` and `report` name agents FAMILY/AGENT; an agent id never
        # holds a '/' (wire pattern), so that form can be pasted back here unambiguously.
        named_family, slash, agent_id = args.agent_id.rpartition("/")
        if slash and args.family and args.family != named_family:
            raise _Fail(f"{args.agent_id} names family {named_family}, --family says "
                        f"{args.family}")
        family = _find_family(store, agent_id, named_family or args.family)
        if slash and (family, agent_id) not in set(action_store(store).known_agents()):
            raise _Fail(f"no agent {args.agent_id} in the store")
        row = next(iter(data.fleet(store, family, only=agent_id)), None)
        view = data.agent_view(store, family, agent_id, row)
        if args.json:
            print(json.dumps(_agent_json(view), sort_keys=True))
            return
        echo(*agent_text(view))
    return _run(args, body)


def _agent_json(view: data.AgentView) -> dict[str, Any]:
    return {
        "family": view.family, "agent_id": view.agent_id,
        "row": view.row.to_json() if view.row else None,
        "versions": [{
            "ref": v.version.ref.to_json(), "summary": v.summary, "queries": v.queries,
            "samples": v.samples,
            "review": v.review.to_json() if v.review else None,
            "probabilities": {name: [{"outcome": o.outcome, "model_p": o.model_p,
                                      "observed_p": o.observed_p, "low": o.observed_low,
                                      "high": o.observed_high, "n": o.observed_n,
                                      "new_p": o.new_p} for o in rows]
                              for name, rows in v.probabilities.items()},
        } for v in view.versions],
        "actions": [a.to_json() for a in view.actions],
        "timeline": [{"time": t.isoformat(), "kind": k, "text": x} for t, k, x in view.timeline],
    }


def agent_text(view: data.AgentView) -> list[str]:
    r = view.row
    lines = [f"{view.family}/{view.agent_id}"]
    if r is not None:
        held = (" (its own model's probabilities hold the baseline's within its intervals)"
                if r.as_baseline else "")
        lines.append(f"  state {r.state}{held}; runs {r.version}; Δ {r.delta_to_baseline} from the "
                     f"baseline; {r.open_alerts} open alerts; {r.transitions} transitions "
                     f"seen, {r.inconsistent} inconsistent")
    lines.append("")
    lines.append("Versions:")
    for v in view.versions:
        ver = v.version
        tag = ""
        if v.review is not None:
            tag = f"  [{v.review.kind}d by {v.review.actor}: {v.review.reason}]"
        lines.append(f"  {ver.ref}  {when(ver.created_at)}  Δ {ver.delta_to_parent} from "
                     f"parent{tag}")
        if v.action is not None:
            lines.append(f"      written by an operator: {v.action.describe()}")
        elif ver.agent_id is not None:
            effort = f"{v.queries} queries" + (f", {v.samples} samples" if v.samples else "")
            lines.append(f"      learned by assessment ({effort})")
        lines.extend(f"      {s}" for s in v.summary)
        for name, rows in v.probabilities.items():
            lines.append(f"      {name}: outcome probabilities")
            lines.extend(f"        {x}" for x in outcome_table(rows).splitlines())
    lines.append("")
    lines.append("Timeline:")
    for t, kind, text in view.timeline:
        lines.append(f"  {when(t)}  {kind:<7} {text}")
    return lines


# ------------------------------------------------------------------ alerts


def _alerts(store: ModelStore, args: argparse.Namespace, limit: int) -> list[OutboxAlert]:
    rows = action_store(store).alert_history(args.family, args.agent, limit=limit * 5
                                             if args.type else limit)
    if args.type:
        rows = [r for r in rows if r.alert_type == args.type][:limit]
    return rows


def _alert_line(a: OutboxAlert) -> list[str]:
    agent = a.alert.get("agent_id") or "*"
    return [when(a.created_at), str(a.alert.get("severity", "")), a.alert_type,
            f"{a.family}/{agent}", a.status, alert_id(a), str(a.alert.get("summary", ""))]


def alert_id(a: OutboxAlert) -> str:
    """A short handle for an alert (its outbox key is long: cause and model version)."""
    return hashlib.sha256(a.key.encode()).hexdigest()[:10]


_ALERT_HEADER = ["TIME", "SEVERITY", "TYPE", "AGENT", "STATUS", "ID", "SUMMARY"]


def _alerts_ls(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        rows = _alerts(store, args, args.limit)
        if args.json:
            print(json.dumps([_alert_json(a) for a in rows]))
            return
        echo(*table(_ALERT_HEADER, [_alert_line(a) for a in rows]).split("\n"))
    return _run(args, body)


def _alert_json(a: OutboxAlert) -> dict[str, Any]:
    return {"id": alert_id(a), "key": a.key, "status": a.status,
            "created_at": a.created_at.isoformat(), "family": a.family,
            "alert_type": a.alert_type, "dedup_key": a.dedup_key, "alert": a.alert}


def _alerts_tail(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        seen: set[str] = set()
        first = True
        while True:
            rows = [a for a in reversed(_alerts(store, args, args.lines)) if a.key not in seen]
            for a in rows:
                seen.add(a.key)
                if args.json:
                    print(json.dumps(_alert_json(a)), flush=True)
                else:
                    # One line an alert: a line feed in a summary is escaped with the rest.
                    echo("  ".join(_alert_line(a)), flush=True)
            if first and not rows and not args.json:
                echo("(no alerts yet)", file=sys.stderr)
            first = False
            if not args.follow:
                return
            time.sleep(max(0.1, args.interval))  # polling the store is the follow

    try:
        return _run(args, body)
    except KeyboardInterrupt:  # how -f ends
        return 0


def _alerts_show(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        matches = [a for a in action_store(store).alert_history(limit=data.ALERT_SCAN)
                   if a.key.startswith(args.key) or alert_id(a).startswith(args.key)]
        if not matches:
            raise _Fail(f"no alert {args.key!r} in the store")
        if len(matches) > 1:
            raise _Fail(f"{args.key!r} names {len(matches)} alerts; give more of the key")
        a = matches[0]
        if args.json:
            print(json.dumps(_alert_json(a), sort_keys=True))
            return
        body_ = a.alert
        echo(f"{a.alert_type} [{body_.get('severity', '')}] {a.family}/"
             f"{body_.get('agent_id') or '*'}  {when(a.created_at)}  ({a.status})",
             f"  {body_.get('summary', '')}", f"  key {a.key}", f"  dedup {a.dedup_key}")
        if body_.get("model_version") is not None:
            echo(f"  model version {body_['model_version']}")
        for name in ("detail", "evidence"):
            if body_.get(name):
                echo(f"  {name}:")
                # JSON escapes a line break inside a string, so its lines are the
                # document's own.
                text = json.dumps(body_[name], indent=2, sort_keys=True, ensure_ascii=False)
                echo(*(f"    {x}" for x in text.split("\n")))
    return _run(args, body)


# ------------------------------------------------------------------ report


def _report(args: argparse.Namespace) -> int:
    from capwatch.console.report import write_report

    def body(store: ModelStore) -> None:
        family, _, agent = args.target.partition("/")
        if not family:
            raise _Fail("report takes FAMILY or FAMILY/AGENT")
        try:
            path = write_report(store, family, agent or None, Path(args.output))
        except OSError as e:
            raise _Fail(f"cannot write {args.output}: {e.strerror or e}") from None
        echo(f"wrote {path}")
    return _run(args, body)
