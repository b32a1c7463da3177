"""JSON form of a domain: what model events and the models store carry beside the PDDL text.

Plain dicts and lists only, with a stable order, so the same model always serialises
to the same bytes (model events are compared and deduplicated by content).
"""

from __future__ import annotations

from typing import Any

from capwatch.model.domain import (
    Action,
    Domain,
    LiftedAtom,
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


def domain_to_json(domain: Domain) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "name": domain.name,
        "requirements": list(domain.requirements),
        "types": dict(sorted(domain.types.parents.items())),
        "constants": _params(domain.constants),
        "predicates": [{"name": p.name, "parameters": _params(p.parameters)}
                       for p in domain.predicates],
        "actions": [
            {
                "name": a.name,
                "parameters": _params(a.parameters),
                "precondition": {"pos": _atoms(a.pre_pos), "neg": _atoms(a.pre_neg)},
                "outcomes": [
                    {"probability": o.probability, "add": _atoms(o.add),
                     "delete": _atoms(o.delete)}
                    for o in a.outcomes
                ],
            }
            for a in domain.actions
        ],
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
            ))
        return Domain(
            name=str(data["name"]),
            predicates=tuple(Predicate(str(p["name"]), _p(p["parameters"], f"predicate {p}"))
                             for p in data["predicates"]),
            actions=tuple(actions),
            types=TypeHierarchy({str(k): str(v) for k, v in data.get("types", {}).items()}),
            constants=_p(data.get("constants", []), "constants"),
            requirements=tuple(str(r) for r in data.get("requirements", [])),
        )
    except KeyError as e:
        raise ModelError(f"model JSON is missing field {e.args[0]!r}") from None
    except (TypeError, AttributeError) as e:
        raise ModelError(f"model JSON is malformed: {e}") from None
