"""PDDL and PPDDL writer; output reads back to an equal model and is accepted by Fast Downward."""

from __future__ import annotations

from collections.abc import Iterable

from capwatch.model.domain import (
    ROOT_TYPE,
    Action,
    Domain,
    Function,
    GroundAtom,
    LiftedAtom,
    NumericEffect,
    Outcome,
    Parameter,
    Problem,
)


def _typed(params: Iterable[Parameter]) -> str:
    return " ".join(f"{p.name} - {p.type}" for p in params)


def _atom(atom: LiftedAtom) -> str:
    return str(atom)


def _conj(pos: Iterable[LiftedAtom], neg: Iterable[LiftedAtom]) -> list[str]:
    parts = [_atom(a) for a in sorted(pos)]
    parts += [f"(not {_atom(a)})" for a in sorted(neg)]
    return parts


def _and(parts: list[str]) -> str:
    return f"(and {' '.join(parts)})" if parts else "(and)"


def _format_probability(p: float) -> str:
    text = f"{p:.12g}"
    return text


def _number(v: float) -> str:
    """Integers as integers (costs usually are); anything else exactly (``repr``)."""
    return str(int(v)) if v.is_integer() else repr(v)


def _numeric(effects: Iterable[NumericEffect]) -> list[str]:
    return [f"({e.operation} {e.target} "
            f"{e.value if isinstance(e.value, LiftedAtom) else _number(e.value)})"
            for e in effects]


def precondition_text(action: Action) -> str:
    parts = _conj(action.pre_pos, action.pre_neg)
    parts += [f"(= {a} {b})" for a, b in sorted(action.equal)]
    parts += [f"(not (= {a} {b}))" for a, b in sorted(action.distinct)]
    return _and(parts)


def _function(f: Function) -> str:
    args = f" {_typed(f.parameters)}" if f.parameters else ""
    return f"({f.name}{args}) - {f.type}"


def effect_text(outcomes: tuple[Outcome, ...], numeric: Iterable[NumericEffect] = ()) -> str:
    """Common literals outside, the branches in one ``probabilistic`` block."""
    if len(outcomes) == 1:
        o = outcomes[0]
        return _and(_conj(o.add, o.delete) + _numeric(numeric))
    common_add = frozenset.intersection(*(o.add for o in outcomes))
    common_del = frozenset.intersection(*(o.delete for o in outcomes))
    branches: list[str] = []
    for o in outcomes:
        rest_add, rest_del = o.add - common_add, o.delete - common_del
        if not rest_add and not rest_del:
            continue  # the implicit "nothing more" branch: 1 - sum of the others
        branches.append(f"{_format_probability(o.probability)} {_and(_conj(rest_add, rest_del))}")
    parts = _conj(common_add, common_del) + _numeric(numeric)
    if branches:
        parts.append("(probabilistic " + " ".join(branches) + ")")
    return _and(parts)


def action_text(action: Action, indent: str = "  ") -> str:
    lines = [
        f"{indent}(:action {action.name}",
        f"{indent}  :parameters ({_typed(action.parameters)})",
        f"{indent}  :precondition {precondition_text(action)}",
        f"{indent}  :effect {effect_text(action.outcomes, action.numeric)}",
        f"{indent})",
    ]
    return "\n".join(lines)


def write_domain(domain: Domain) -> str:
    requirements = set(domain.requirements) | {":strips", ":typing"}
    if any(a.pre_neg for a in domain.actions):
        requirements.add(":negative-preconditions")
    if domain.is_probabilistic:
        requirements.add(":probabilistic-effects")
    if any(a.has_static_constraints for a in domain.actions):
        requirements.add(":equality")
    if domain.functions or any(a.numeric for a in domain.actions):
        requirements.add(":action-costs")
    lines = [
        f"(define (domain {domain.name})",
        f"  (:requirements {' '.join(sorted(requirements))})",
    ]
    type_lines = [
        f"{child} - {parent}" for child, parent in sorted(domain.types.parents.items())
        if child != ROOT_TYPE
    ]
    if type_lines:
        lines.append(f"  (:types {' '.join(type_lines)})")
    if domain.constants:
        lines.append(f"  (:constants {_typed(domain.constants)})")
    lines.append("  (:predicates")
    for p in domain.predicates:
        args = f" {_typed(p.parameters)}" if p.parameters else ""
        lines.append(f"    ({p.name}{args})")
    lines.append("  )")
    if domain.functions:
        lines.append(f"  (:functions {' '.join(_function(f) for f in domain.functions)})")
    for a in domain.actions:
        lines.append(action_text(a))
    lines.append(")")
    return "\n".join(lines) + "\n"


def _ground(atom: GroundAtom) -> str:
    return f"({' '.join(atom)})"


def write_problem(problem: Problem) -> str:
    goal = [_ground(a) for a in sorted(problem.goal_pos)]
    goal += [f"(not {_ground(a)})" for a in sorted(problem.goal_neg)]
    lines = [
        f"(define (problem {problem.name})",
        f"  (:domain {problem.domain_name})",
        f"  (:objects {_typed(problem.objects)})",
        "  (:init " + " ".join([*(_ground(a) for a in sorted(problem.init)),
                                *(f"(= {_ground(t)} {_number(v)})"
                                  for t, v in problem.numeric_init)]) + ")",
        f"  (:goal {_and(goal)})",
    ]
    if problem.metric:
        lines.append(f"  (:metric {problem.metric})")
    lines.append(")")
    return "\n".join(lines) + "\n"


def write_plan(plan: Iterable[tuple[str, ...]]) -> str:
    return "".join(f"({' '.join(step)})\n" for step in plan)
