"""JSON form of a domain: what model events and the models store carry beside the PDDL text.

Plain dicts and lists only, with a stable order, so the same model always serialises
to the same bytes (model events are compared and deduplicated by content).
"""

from __future__ import annotations

from typing import Any

from capwatch.model.domain import (
    Action,
    Domain,
    Function,
    LiftedAtom,
    NumericEffect,
    Outcome,
    Parameter,
    Predicate,
    TypeHierarchy,
)
from capwatch.model.errors import ModelError

FORMAT_VERSION = 1


def _params(ps: tuple[Parameter, ...]) -> list[list[str]]:
    return [[p.name, p.type] for p in ps]


def _atoms(atoms: frozenset[LiftedAtom]) -> list[list[str]]:
    return [[a.predicate, *a.args] for a in sorted(atoms)]


def _term(atom: LiftedAtom) -> list[str]:
    return [atom.predicate, *atom.args]


def _action_to_json(a: Action) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": a.name,
        "parameters": _params(a.parameters),
        "precondition": {"pos": _atoms(a.pre_pos), "neg": _atoms(a.pre_neg)},
        "outcomes": [
            {"probability": o.probability, "add": _atoms(o.add), "delete": _atoms(o.delete)}
            for o in a.outcomes
        ],
    }
    # Written only when present, so models without them serialise to the same bytes
    # as before these fields existed (stored versions are compared by content).
    if a.equal:
        out["precondition"]["equal"] = [list(p) for p in sorted(a.equal)]
    if a.distinct:
        out["precondition"]["distinct"] = [list(p) for p in sorted(a.distinct)]
    if a.numeric:
        out["numeric"] = [
            {"operation": e.operation, "target": _term(e.target),
             "value": _term(e.value) if isinstance(e.value, LiftedAtom) else e.value}
            for e in a.numeric
        ]
    return out


def domain_to_json(domain: Domain) -> dict[str, Any]:
    data = _domain_to_json(domain)
    if domain.functions:
        data["functions"] = [{"name": f.name, "parameters": _params(f.parameters),
                              "type": f.type} for f in domain.functions]
    return data


def _domain_to_json(domain: Domain) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "name": domain.name,
        "requirements": list(domain.requirements),
        "types": dict(sorted(domain.types.parents.items())),
        "constants": _params(domain.constants),
        "predicates": [{"name": p.name, "parameters": _params(p.parameters)}
                       for p in domain.predicates],
        "actions": [_action_to_json(a) for a in domain.actions],
    }


def _p(raw: Any, where: str) -> tuple[Parameter, ...]:
    try:
        return tuple(Parameter(str(n), str(t)) for n, t in raw)
    except (TypeError, ValueError):
        raise ModelError(f"{where}: expected a list of [name, type] pairs") from None


def _a(raw: Any, where: str) -> frozenset[LiftedAtom]:
    if not isinstance(raw, list) or not all(isinstance(x, list) and x for x in raw):
        raise ModelError(f"{where}: expected a list of [predicate, arg, ...] lists")
    return frozenset(LiftedAtom(str(x[0]), tuple(str(y) for y in x[1:])) for x in raw)


def _pairs(raw: Any, where: str) -> frozenset[tuple[str, str]]:
    if not isinstance(raw, list) or not all(isinstance(x, list) and len(x) == 2 for x in raw):
        raise ModelError(f"{where}: expected a list of [name, name] pairs")
    return frozenset((str(x[0]), str(x[1])) for x in raw)


def _numeric_from_json(raw: Any, where: str) -> tuple[NumericEffect, ...]:
    if not isinstance(raw, list):
        raise ModelError(f"{where}: expected a list")
    effects = []
    for e in raw:
        target = _a([e["target"]], f"{where}.target")
        value = e["value"]
        if isinstance(value, list):
            (term,) = _a([value], f"{where}.value")
            effects.append(NumericEffect(next(iter(target)), term, str(e["operation"])))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            effects.append(NumericEffect(next(iter(target)), float(value),
                                         str(e["operation"])))
        else:
            raise ModelError(f"{where}.value: expected a number or a function term")
    return tuple(effects)


def domain_from_json(data: dict[str, Any]) -> Domain:
    """Inverse of :func:`domain_to_json`; errors name the offending field."""
    try:
        if data.get("format", FORMAT_VERSION) != FORMAT_VERSION:
            raise ModelError(f"unsupported model format {data.get('format')!r}")
        actions = []
        for i, a in enumerate(data["actions"]):
            where = f"actions[{i}]"
            outcomes = tuple(
                Outcome(_a(o["add"], f"{where}.outcomes.add"),
                        _a(o["delete"], f"{where}.outcomes.delete"), float(o["probability"]))
                for o in a["outcomes"]
            )
            actions.append(Action(
                str(a["name"]), _p(a["parameters"], f"{where}.parameters"),
                _a(a["precondition"]["pos"], f"{where}.precondition.pos"),
                _a(a["precondition"]["neg"], f"{where}.precondition.neg"), outcomes,
                _pairs(a["precondition"].get("equal", []), f"{where}.precondition.equal"),
                _pairs(a["precondition"].get("distinct", []),
                       f"{where}.precondition.distinct"),
                _numeric_from_json(a.get("numeric", []), f"{where}.numeric"),
            ))
        return Domain(
            name=str(data["name"]),
            predicates=tuple(Predicate(str(p["name"]), _p(p["parameters"], f"predicate {p}"))
                             for p in data["predicates"]),
            actions=tuple(actions),
            types=TypeHierarchy({str(k): str(v) for k, v in data.get("types", {}).items()}),
            constants=_p(data.get("constants", []), "constants"),
            requirements=tuple(str(r) for r in data.get("requirements", [])),
            functions=tuple(Function(str(f["name"]), _p(f["parameters"], f"function {f}"),
                                     str(f.get("type", "number")))
                            for f in data.get("functions", [])),
        )
    except KeyError as e:
        raise ModelError(f"model JSON is missing field {e.args[0]!r}") from None
    except (TypeError, AttributeError) as e:
        raise ModelError(f"model JSON is malformed: {e}") from None
