"""``capwatch models list|show|history|diff|export``: the versioned model registry.

A model version is named ``FAMILY[/AGENT][@VERSION]``: ``rover-v3`` is the family
baseline's newest version, ``rover-v3/rover-17@2`` version 2 of rover-17's own lineage.
``show AGENT-REF --at TIME`` answers "which model did this agent run at that time".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from capwatch.console.terminal import echo
from capwatch.models_store import (
    ModelRef,
    ModelStore,
    ModelVersion,
    StoreError,
    diff_versions,
    lineage_chain,
    open_store,
)
from capwatch.models_store.actions import action_store

STORE_ENV = "CAPWATCH_STORE__URL"
DEFAULT_STORE = "capwatch.db"


class _Fail(Exception):
    pass


def store_options(json_flag: bool = False) -> argparse.ArgumentParser:
    """The ``--store`` (and ``--json``) options every store command takes."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store", default=os.environ.get(STORE_ENV, DEFAULT_STORE),
        help=f"SQLite path (sqlite:///path) or postgresql:// DSN; default ${STORE_ENV} "
             f"or {DEFAULT_STORE}")
    if json_flag:
        common.add_argument("--json", action="store_true", help="machine-readable output")
    return common


def register(sub: Any) -> None:
    from capwatch.cli.actions_cmd import register_models
    from capwatch.cli.republish_cmd import register_republish

    common = store_options()
    with_json = store_options(json_flag=True)

    models = sub.add_parser("models", help="the versioned model registry")
    msub = models.add_subparsers(dest="models_command", required=True)

    p = msub.add_parser("list", parents=[with_json], help="lineages and their newest version")
    p.add_argument("--family")
    p.set_defaults(handler=_list)

    p = msub.add_parser("show", parents=[with_json], help="one model version")
    p.add_argument("ref", help="FAMILY[/AGENT][@VERSION]")
    p.add_argument("--at", help="ISO time: the model the agent ran then (needs /AGENT)")
    p.set_defaults(handler=_show)

    p = msub.add_parser("history", parents=[with_json], help="versions of one lineage")
    p.add_argument("ref", help="FAMILY[/AGENT]")
    p.add_argument("--ancestry", action="store_true",
                   help="follow parents across lineages back to the baseline")
    p.set_defaults(handler=_history)

    p = msub.add_parser("diff", parents=[with_json], help="pal-tuples that differ, and Δ")
    p.add_argument("a", help="FAMILY[/AGENT][@VERSION]")
    p.add_argument("b", help="FAMILY[/AGENT][@VERSION]")
    p.set_defaults(handler=_diff)

    p = msub.add_parser("export", parents=[common], help="write a model as PDDL or JSON")
    p.add_argument("ref", help="FAMILY[/AGENT][@VERSION]")
    p.add_argument("--format", choices=["pddl", "json"], default="pddl")
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.set_defaults(handler=_export)
    register_models(msub)
    register_republish(msub)


def parse_ref(text: str) -> tuple[str, str | None, int | None]:
    """``family[/agent][@version]`` → (family, agent or None, version or None)."""
    body, _, version = text.partition("@")
    family, _, agent = body.partition("/")
    if not family or (_ and not agent):
        raise _Fail(f"bad model reference {text!r}: use FAMILY[/AGENT][@VERSION]")
    n: int | None = None
    if version:
        try:
            n = int(version)
        except ValueError:
            raise _Fail(f"bad version {version!r} in {text!r}: a positive integer") from None
        if n < 1:
            raise _Fail(f"bad version {version!r} in {text!r}: a positive integer")
    return family, agent or None, n


@contextmanager
def _store(url: str) -> Iterator[ModelStore]:
    plain = url.removeprefix("sqlite://")
    if "://" not in plain and plain != ":memory:" and not Path(plain).exists():
        # Opening would create an empty store: for a read command that hides a typo.
        raise _Fail(f"no model store at {plain}")
    try:
        store = open_store(url)
    except (StoreError, ValueError, OSError) as e:
        raise _Fail(f"cannot open model store {url}: {e}") from None
    except Exception as e:  # psycopg's connection errors have no common stdlib base
        raise _Fail(f"cannot open model store {url}: {e}") from None
    try:
        yield store
    finally:
        store.close()


def _resolve(store: ModelStore, text: str) -> ModelVersion:
    family, agent, n = parse_ref(text)
    v = store.get(ModelRef(family, agent, n)) if n else store.latest(family, agent)
    if v is None:
        raise _Fail(f"no model version {text}")
    return v


def _time(v: datetime) -> str:
    return v.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _run(args: argparse.Namespace, body: Any, *, failed: int = 1) -> int:
    """Run ``body`` on the store; its return value (None: 0) is the exit status."""
    try:
        with _store(args.store) as store:
            code = body(store)
    except (_Fail, StoreError) as e:
        echo(f"capwatch: {e}", file=sys.stderr)
        return failed
    return int(code or 0)


def _list(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        rows = store.lineages(args.family)
        if args.json:
            print(json.dumps([{"family": r.family, "agent_id": r.agent_id,
                               "version": r.latest_version, "updated_at": _time(r.updated_at),
                               "delta_to_baseline": r.delta_to_baseline} for r in rows]))
            return
        echo(f"{'FAMILY':<20} {'AGENT':<20} {'VERSION':>7} {'Δ BASE':>6}  UPDATED")
        for r in rows:
            echo(f"{r.family:<20} {r.agent_id or '(baseline)':<20} {r.latest_version:>7} "
                  f"{r.delta_to_baseline:>6}  {_time(r.updated_at)}")
    return _run(args, body)


def _describe(v: ModelVersion) -> list[str]:
    lines = [f"{v.ref}  created {_time(v.created_at)}",
             f"  parent: {v.parent or '-'}  Δ to parent: {v.delta_to_parent}  "
             f"Δ to baseline: {v.delta_to_baseline}"]
    lines += [f"  {s}" for s in v.summary]
    lines += [f"  {s}" for s in evidence_lines(v.evidence)]
    return lines


def evidence_lines(evidence: dict[str, Any]) -> list[str]:
    """The evidence in a few words; ``--json`` has all of it."""
    out = []
    if "operator_action" in evidence:
        what = ("restores " + str(ModelRef.from_json(evidence["restores"]))
                if "restores" in evidence else
                "promoted from " + str(ModelRef.from_json(evidence["promoted_from"]))
                if "promoted_from" in evidence else "operator action")
        out.append(f"written by {evidence.get('actor', '?')}: {what} "
                   f"({evidence.get('reason', '')})")
    if "queries" in evidence and "operator_action" not in evidence:
        estimates = (evidence.get("assessment") or {}).get("estimates") or {}
        samples = sum(int(e.get("samples", 0)) for e in estimates.values())
        method = (evidence.get("assessment") or {}).get("method")
        q = int(evidence["queries"])
        text = f"assessment: {q} {'query' if q == 1 else 'queries'}"
        if samples:
            text += f", {samples} samples of the agent's outcomes"
        if method:
            text += f" ({method})"
        n = len(evidence.get("transitions") or [])
        if n:
            text += f"; {n} inconsistent transitions as evidence"
        out.append(text)
    for name, d in sorted((evidence.get("drift") or {}).items()):
        stat, threshold = d.get("log_statistic"), d.get("log_threshold")
        test = (f"log-likelihood ratio {stat:.2f} over threshold {threshold:.2f}"
                if stat is not None and threshold is not None else
                f"chi-square {d.get('chi2', 0):.2f}")
        window = d.get("window") or ["?", "?"]
        out.append(f"drift of {name}: {d.get('detector', '')} test, {test}, "
                   f"p={d.get('p_value', float('nan')):.2g}, "
                   f"{d.get('n', '?')} executions (window {window[0]}–{window[1]})")
    other = sorted(set(evidence) - {"operator_action", "restores", "promoted_from", "actor",
                                    "reason", "queries", "assessment", "drift", "transitions",
                                    "assessment_key", "replica", "operator"})
    if other:
        out.append("also recorded: " + ", ".join(other) + " (see --json)")
    return out


def _show(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        if args.at:
            family, agent, n = parse_ref(args.ref)
            if agent is None or n is not None:
                raise _Fail("--at needs FAMILY/AGENT without @VERSION")
            try:
                at = datetime.fromisoformat(args.at)
            except ValueError:
                raise _Fail(f"bad time {args.at!r}: ISO 8601, e.g. 2026-11-25T21:00Z") from None
            if at.tzinfo is None:
                at = at.replace(tzinfo=UTC)
            found = store.model_at(agent, at, family)
            if found is None:
                raise _Fail(f"agent {agent} of {family} had no model at {_time(at)}")
            v = found
        else:
            v = _resolve(store, args.ref)
        if args.json:
            print(json.dumps(v.to_json(), sort_keys=True))
            return
        echo(*_describe(v))
        from capwatch.console.data import version_view
        from capwatch.console.text import outcome_table

        parent = store.get(v.parent) if v.parent is not None else None
        for name, rows in version_view(v, parent).probabilities.items():
            echo(f"  {name}: outcome probabilities (95% intervals)")
            echo(*(f"    {x}" for x in outcome_table(rows).split("\n")))
    return _run(args, body)


def _history(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        family, agent, n = parse_ref(args.ref)
        if n is not None and not args.ancestry:
            raise _Fail("history takes FAMILY[/AGENT]; @VERSION only with --ancestry")
        if args.ancestry:
            versions = lineage_chain(store, _resolve(store, args.ref).ref)
        else:
            versions = store.history(family, agent)
        if not versions:
            # A bare name is read as a family; an operator who typed an agent id (as
            # `agents show` takes it) should learn which lineage to ask for.
            owners = sorted({f for f, a in action_store(store).known_agents()
                             if a == family}) if agent is None else []
            hint = "".join(f"; agent {family} is in family {f}: try {f}/{family}"
                           for f in owners)
            raise _Fail(f"no versions of {args.ref}{hint}")
        if args.json:
            print(json.dumps([{k: val for k, val in v.to_json().items()
                               if k not in ("model", "pddl")} for v in versions]))
            return
        for v in versions:
            echo(*_describe(v))
    return _run(args, body)


def _diff(args: argparse.Namespace) -> int:
    """Exit status as ``capwatch model diff`` and diff(1): 0 the same, 1 different,
    2 trouble (no such store or version)."""
    def body(store: ModelStore) -> int:
        a, b = _resolve(store, args.a), _resolve(store, args.b)
        if not {x.name for x in a.domain().actions} & {x.name for x in b.domain().actions}:
            # Every pal-tuple would count as a change: a Δ of the union, not a difference
            # (two versions of one family may add or drop actions, and are compared).
            raise _Fail(f"{a.ref} and {b.ref} have no action in common; Δ is defined "
                        "over the same pal-tuples (compare versions of one family)")
        d = diff_versions(a, b)
        differ = 1 if d.delta or d.summary else 0
        if args.json:
            print(json.dumps(d.to_json(), sort_keys=True))
            return differ
        echo(f"Δ({d.a}, {d.b}) = {d.delta}")
        for pal, old, new in d.changes:
            echo(f"  {pal}: {old} → {new}")
        for line in d.summary:
            echo(f"  {line}")
        return differ
    return _run(args, body, failed=2)


def _export(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        v = _resolve(store, args.ref)
        if args.format == "pddl":
            text = v.pddl
        else:
            text = json.dumps(v.model_json, indent=2, sort_keys=True) + "\n"
        if args.output:
            try:
                Path(args.output).write_text(text, encoding="utf-8")
            except OSError as e:
                raise _Fail(f"cannot write {args.output}: {e.strerror}") from None
        else:
            sys.stdout.write(text)
    return _run(args, body)
