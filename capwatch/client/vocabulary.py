"""The agent's vocabulary, read from its domain file, and the abstraction into it.

capwatch reasons about an agent in the PDDL vocabulary of its model: predicates and
actions with fixed arities. An agent works on its own raw states and actions (a numpy
observation, a discrete action index, a JSON document). :class:`Abstraction` is the
bridge the agent team writes: raw state → ground atoms, and (raw state, raw action) →
ground action. Everything it produces is checked against :class:`Vocabulary`, so a typo
in a predicate name or a forgotten argument fails in the agent, at once and by name,
instead of surfacing hours later as dead letters in capwatch.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from capwatch.contracts.wire_text import name_fault
from capwatch.model.domain import Domain, GroundAction, GroundAtom
from capwatch.model.pddl_reader import parse_domain

__all__ = ["Abstraction", "Vocabulary", "VocabularyError"]

_MAX_REMEMBERED = 100_000

RawState = TypeVar("RawState")
RawAction = TypeVar("RawAction")


class VocabularyError(ValueError):
    """An atom or action outside the domain's vocabulary (unknown name, wrong arity, bad
    characters). The message names the offending item and the domain."""


@dataclass(frozen=True)
class Vocabulary:
    """Predicate and action arities of one domain (``name → number of arguments``)."""

    domain: str
    predicates: Mapping[str, int]
    actions: Mapping[str, int]
    _valid: set[tuple[str, ...]] = field(default_factory=set, compare=False, repr=False)
    """Atoms already checked: an agent's states repeat most atoms (static facts) at every
    step, and checking each name again would cost more than the rest of emitting."""

    @classmethod
    def of(cls, domain: Domain) -> Vocabulary:
        # pddlgym-style action literals are not part of what an agent reports.
        d = domain.without_action_literals()
        return cls(d.name, {p.name: p.arity for p in d.predicates},
                   {a.name: a.arity for a in d.actions})

    @classmethod
    def from_file(cls, path: str | Path) -> Vocabulary:
        """Read a PDDL or PPDDL domain file (errors give ``file:line:col``)."""
        p = Path(path)
        return cls.of(parse_domain(p.read_text(encoding="utf-8"), str(p)))

    def check_atom(self, atom: GroundAtom, where: str = "state") -> None:
        if atom in self._valid:
            return
        if not atom:
            raise VocabularyError(f"{where}: empty atom")
        _check_names(atom, where)
        n = self.predicates.get(atom[0])
        if n is None:
            raise VocabularyError(f"{where}: unknown predicate {atom[0]!r} in domain"
                                  f" {self.domain!r} (known: {_listing(self.predicates)})")
        if len(atom) - 1 != n:
            raise VocabularyError(f"{where}: predicate {atom[0]!r} takes {n} argument(s),"
                                  f" found {len(atom) - 1} in {_show(atom)}")
        if len(self._valid) >= _MAX_REMEMBERED:
            self._valid.clear()
        self._valid.add(atom)

    def check_state(self, atoms: Iterable[GroundAtom], where: str = "state") -> None:
        for atom in atoms:
            self.check_atom(atom, where)

    def check_action(self, action: GroundAction, where: str = "action") -> None:
        if not action:
            raise VocabularyError(f"{where}: empty action")
        _check_names(action, where)
        n = self.actions.get(action[0])
        if n is None:
            raise VocabularyError(f"{where}: unknown action {action[0]!r} in domain"
                                  f" {self.domain!r} (known: {_listing(self.actions)})")
        if len(action) - 1 != n:
            raise VocabularyError(f"{where}: action {action[0]!r} takes {n} argument(s),"
                                  f" found {len(action) - 1} in {_show(action)}")

    def check_action_names(self, names: Iterable[str], where: str = "action mapping") -> None:
        """Every name must be an action of the domain; all unknown ones are listed."""
        unknown = sorted({n for n in names if n not in self.actions})
        if unknown:
            raise VocabularyError(f"{where}: unknown action(s) {', '.join(map(repr, unknown))}"
                                  f" in domain {self.domain!r} (known:"
                                  f" {_listing(self.actions)})")

    def check_predicate_names(self, names: Iterable[str], where: str = "abstraction") -> None:
        unknown = sorted({n for n in names if n not in self.predicates})
        if unknown:
            raise VocabularyError(f"{where}: unknown predicate(s)"
                                  f" {', '.join(map(repr, unknown))} in domain"
                                  f" {self.domain!r} (known: {_listing(self.predicates)})")


def _check_names(item: tuple[str, ...], where: str) -> None:
    """The wire's rule for names (``wire_text.name_fault``, which capwatch's decoders
    apply): a name the client let through was a dead letter in capwatch, hours later.
    Its own pattern let format characters through (a bidi override, a zero-width
    space), which the wire refuses since session 20."""
    for name in item:
        reason = name_fault(name) if isinstance(name, str) else "not a string"
        if reason is not None:
            raise VocabularyError(f"{where}: {name!r} in {item!r} is not a valid name:"
                                  f" {reason}")


def _show(item: tuple[str, ...]) -> str:
    return "(" + " ".join(item) + ")"


def _listing(names: Mapping[str, int]) -> str:
    return ", ".join(f"{n}/{a}" for n, a in sorted(names.items()))


class Abstraction(Generic[RawState, RawAction]):
    """The agent team's mapping from raw states and actions to the domain's vocabulary.

    ``atoms(raw_state)`` returns every ground atom true in the state (closed world: static
    facts included). ``action(raw_state, raw_action)`` returns the ground action, or None
    when the step has no counterpart in the model (it is then not reported).

    ``action_names``, when given, maps each raw action to the name of the model action it
    becomes; it is checked against the domain here, in the constructor, so that a
    misspelt or missing action fails at start-up. ``predicates`` likewise declares the
    predicates ``atoms`` may produce. :meth:`check_sample` runs the hooks on one raw
    state (e.g. the first observation) and checks what they produce.
    """

    def __init__(self, vocabulary: Vocabulary, *,
                 atoms: Callable[[RawState], Iterable[GroundAtom]],
                 action: Callable[[RawState, RawAction], GroundAction | None],
                 action_names: Mapping[RawAction, str] | None = None,
                 predicates: Collection[str] | None = None) -> None:
        self.vocabulary = vocabulary
        self._atoms = atoms
        self._action = action
        self.action_names = dict(action_names) if action_names is not None else None
        if self.action_names is not None:
            vocabulary.check_action_names(self.action_names.values())
        if predicates is not None:
            vocabulary.check_predicate_names(predicates)
        self.predicates = frozenset(predicates) if predicates is not None else None

    def state(self, raw: RawState) -> frozenset[GroundAtom]:
        """The abstract state, validated (VocabularyError names the bad atom)."""
        atoms = frozenset(tuple(a) for a in self._atoms(raw))
        self.vocabulary.check_state(atoms)
        if self.predicates is not None:
            extra = sorted({a[0] for a in atoms} - self.predicates)
            if extra:
                raise VocabularyError(f"state: predicate(s) {', '.join(map(repr, extra))}"
                                      " were not declared in the abstraction's predicates")
        return atoms

    def action(self, raw_state: RawState, raw_action: RawAction) -> GroundAction | None:
        """The ground action, validated, or None if the step has no model counterpart."""
        result = self._action(raw_state, raw_action)
        if result is None:
            return None
        ground = tuple(result)
        self.vocabulary.check_action(ground)
        if self.action_names is not None and isinstance(raw_action, Hashable):
            expected = self.action_names.get(raw_action)
            if expected is not None and expected != ground[0]:
                raise VocabularyError(f"action: raw action {raw_action!r} is mapped to"
                                      f" {expected!r} but the hook returned {ground[0]!r}")
        return ground

    def check_sample(self, raw_state: RawState,
                     raw_actions: Iterable[RawAction] = ()) -> None:
        """Run both hooks on a sample; raises VocabularyError on the first problem."""
        self.state(raw_state)
        for a in raw_actions:
            self.action(raw_state, a)
