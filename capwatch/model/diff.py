"""What differs between two models: changed pal-tuples, probability shifts, and the human
lines that describe them. Pure functions over :class:`~capwatch.model.domain.Domain`;
the store records a version's changes with them and the alerts classify them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capwatch.model.domain import Action, Domain, LiftedAtom, Outcome
from capwatch.model.pal import AbstractModel, Location, Mode, PalTuple, summarise_changes

Change = tuple[PalTuple, Mode, Mode]
"""One pal-tuple whose mode differs: (pal-tuple, old mode, new mode)."""


def change_to_json(change: Change) -> dict[str, Any]:
    pal, old, new = change
    return {"action": pal.action, "atom": [pal.atom.predicate, *pal.atom.args],
            "location": pal.location.value, "old": old.value, "new": new.value}


def change_from_json(data: Mapping[str, Any]) -> Change:
    atom = [str(x) for x in data["atom"]]
    pal = PalTuple(str(data["action"]), LiftedAtom(atom[0], tuple(atom[1:])),
                   Location(data["location"]))
    return pal, Mode(data["old"]), Mode(data["new"])


def model_changes(old: Domain, new: Domain) -> list[Change]:
    """Pal-tuples whose modes differ between two models, as (pal, old mode, new mode).

    Unlike :meth:`AbstractModel.diff` this accepts models over different Γ (an action
    or predicate added or dropped): a pal-tuple one side lacks counts as absent there,
    which is what an operator means by "this action no longer makes X true".
    """
    return mode_changes(AbstractModel.from_domain(old).modes,
                        AbstractModel.from_domain(new).modes)


def mode_changes(a: Mapping[PalTuple, Mode], b: Mapping[PalTuple, Mode]) -> list[Change]:
    """:func:`model_changes` from the two models' modes (``AbstractModel.modes``), for a
    caller that compares many models with one and keeps that one's modes."""
    changes = [(p, a.get(p, Mode.ABSENT), b.get(p, Mode.ABSENT)) for p in {*a, *b}]
    return sorted((c for c in changes if c[1] is not c[2]), key=lambda c: c[0])


def _pre_modes(changes: Sequence[Change], new: Domain) -> dict[tuple[str, LiftedAtom], Mode]:
    """The new model's precondition mode of every pa-tuple an effect change touches."""
    wanted = {(c[0].action, c[0].atom) for c in changes if c[0].location is Location.EFF}
    modes = AbstractModel.from_domain(new).modes if wanted else {}
    return {(a, atom): modes.get(PalTuple(a, atom, Location.PRE), Mode.ABSENT)
            for a, atom in wanted}


def observable_changes(changes: Sequence[Change], new: Domain) -> list[Change]:
    """The changes a plan-outcome query can tell apart, in the new model's terms.

    An effect that restates what the new precondition already requires is no effect: when
    the action now requires ``p`` it can only run where ``p`` holds, so "no longer makes
    ``p`` true" changes nothing anyone can observe (and likewise for ``(not p)`` and "makes
    ``p`` false"). Announcing such a change would report a difference no agent behaviour
    can show; it stays in the version's pal-tuple record (Δ counts modes, not behaviour).
    """
    pre = _pre_modes(changes, new)

    def vacuous(change: Change) -> bool:
        pal, old, new_mode = change
        if pal.location is not Location.EFF:
            return False
        required = pre[(pal.action, pal.atom)]
        return required is not Mode.ABSENT and {old, new_mode} <= {required, Mode.ABSENT}

    return [c for c in changes if not vacuous(c)]


def is_reduction(change: Change) -> bool:
    """Does this change take something away from what the agent can achieve?

    A new or different precondition forbids the action where it used to run. On effects,
    losing an add no longer achieves what plans relied on, and a new delete destroys what
    was there before (data collected, a resource held): both reduce. Losing a delete, or a
    new add, only widens what the action leaves true. ``?`` (unknown) is never stored in a
    concrete model and counts as neither.
    """
    pal, old, new = change
    if Mode.UNKNOWN in (old, new):
        return False
    if pal.location is Location.PRE:
        return new is not Mode.ABSENT
    return old is Mode.POS or new is Mode.NEG


def probability_shifts(old: Domain, new: Domain) -> dict[str, tuple[list[float], list[float]]]:
    """Per action whose outcome probabilities moved while its effects kept their modes:
    (old probabilities, new probabilities), both in the old model's outcome order."""
    shifts = {}
    old_actions = old.action_map
    for action in new.actions:
        before = old_actions.get(action.name)
        if before is None:
            continue
        new_probs = {(o.add, o.delete): o.probability for o in action.outcomes}
        keys = [(o.add, o.delete) for o in before.outcomes]
        if set(keys) != new_probs.keys():
            continue
        old_list = [o.probability for o in before.outcomes]
        new_list = [new_probs[k] for k in keys]
        if old_list != new_list:
            shifts[action.name] = (old_list, new_list)
    return shifts


def probability_changes(old: Domain, new: Domain) -> list[str]:
    """Lines for actions whose outcome probabilities moved (see :func:`probability_shifts`).

    Δ counts pal-tuples only, so effect-distribution drift has Δ = 0; without these
    lines a new version caused by it would carry no explanation.
    """
    lines = []
    for name, (before, after) in probability_shifts(old, new).items():
        pairs = ", ".join(f"{a:.3g}→{b:.3g}" for a, b in zip(before, after, strict=True))
        lines.append(f"{new.action(name).header()} outcome probabilities changed: {pairs}")
    return lines


def _outcome_text(outcome: Outcome) -> str:
    made = [*(f"{a} true" for a in sorted(outcome.add)),
            *(f"{a} false" for a in sorted(outcome.delete))]
    effect = f"makes {', '.join(made)}" if made else "no effect"
    return f"{outcome.probability:.3g} ({effect})"


def _outside_effects(action: Action, gamma: set[PalTuple]) -> list[tuple[list[LiftedAtom], ...]]:
    """Each outcome's effects on atoms outside the pal-tuples ``gamma``, sorted."""
    def outside(atoms: frozenset[LiftedAtom]) -> list[LiftedAtom]:
        return sorted(a for a in atoms if PalTuple(action.name, a, Location.EFF) not in gamma)
    return sorted((outside(o.add), outside(o.delete)) for o in action.outcomes)


def outcome_changes(old: Domain, new: Domain, changes: Sequence[Change]) -> list[str]:
    """Lines for actions whose outcomes changed where neither a pal-tuple of the action nor
    a shift of its known outcomes' probabilities says so (:func:`outcome_changes_by_action`)."""
    return list(outcome_changes_by_action(old, new, changes).values())


def outcome_changes_by_action(old: Domain, new: Domain,
                              changes: Sequence[Change]) -> dict[str, str]:
    """:func:`outcome_changes`' lines by action name.

    A deterministic action that now sometimes does nothing (a new, empty outcome) keeps
    every mode (Δ 0), and its old outcome's probability has no partner among the new
    ones, so :func:`probability_shifts` skips it: without these lines it was described
    nowhere. So was an effect outside the pal-tuples (over a constant) changed beside a
    mode of the same action: that action's line is printed too."""
    moved = {c[0].action for c in changes} | set(probability_shifts(old, new))
    old_actions = old.action_map
    gamma: set[PalTuple] | None = None
    lines: dict[str, str] = {}
    for action in new.actions:
        before = old_actions.get(action.name)
        if before is None:
            continue
        was = sorted(before.outcomes, key=Outcome.sort_key)
        now = sorted(action.outcomes, key=Outcome.sort_key)
        if was == now:
            continue
        if action.name in moved:
            # The modes or probabilities say what changed, unless an effect no pal-tuple
            # holds (an atom over a constant) changed beside them: described nowhere else.
            if gamma is None:
                gamma = set(AbstractModel.from_domain(new).modes) | set(
                    AbstractModel.from_domain(old).modes)
            if _outside_effects(before, gamma) == _outside_effects(action, gamma):
                continue
        lines[action.name] = (f"{action.header()} outcomes changed: "
                              f"{', '.join(map(_outcome_text, was))} → "
                              f"{', '.join(map(_outcome_text, now))}")
    return lines


def outside_changes(old: Domain, new: Domain) -> list[str]:
    """Lines for precondition changes no pal-tuple can hold: atoms over a constant or a
    repeated parameter, equality constraints (docs/models.md). Δ and the assessment do not
    see them; a diff of two files must still not call such models the same."""
    gamma = AbstractModel.from_domain(new).modes.keys() | AbstractModel.from_domain(
        old).modes.keys()
    old_actions = old.action_map
    lines = []
    for action in new.actions:
        before = old_actions.get(action.name)
        if before is None:
            continue

        def outside(atoms: frozenset[LiftedAtom], name: str = action.name) -> list[LiftedAtom]:
            return sorted(a for a in atoms if PalTuple(name, a, Location.PRE) not in gamma)

        parts = [*(f"now requires {a}" for a in outside(action.pre_pos - before.pre_pos)),
                 *(f"now requires (not {a})" for a in outside(action.pre_neg - before.pre_neg)),
                 *(f"no longer requires {a}" for a in outside(before.pre_pos - action.pre_pos)),
                 *(f"no longer requires (not {a})"
                   for a in outside(before.pre_neg - action.pre_neg))]
        if (action.equal, action.distinct) != (before.equal, before.distinct):
            parts.append("its equality constraints changed")
        if parts:
            lines.append(f"{action.header()} {'; '.join(parts)}, outside the pal-tuples "
                         "(not counted in Δ, not assessed)")
    return lines


def describe_changes(old: Domain, new: Domain, changes: Sequence[Change]) -> list[str]:
    """Human lines for a model change, in the model's own vocabulary: the same for two
    files (``capwatch model diff``), two stored versions (``capwatch models diff``, the
    API) and a version's summary (a family baseline seeded again from a changed file)."""
    new_actions = new.action_map
    known = observable_changes([c for c in changes if c[0].action in new_actions], new)
    lines = summarise_changes(known, new)
    gone = sorted({c[0].action for c in changes if c[0].action not in new_actions})
    lines += [f"{old.action(name).header()} removed from the model" for name in gone]
    return (lines + probability_changes(old, new) + outcome_changes(old, new, changes)
            + outside_changes(old, new))
