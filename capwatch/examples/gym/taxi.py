"""Taxi (Gymnasium ``Taxi-v4``, deterministic) in the vocabulary of taxi.pddl.

Cells of the 5x5 map are objects ``r<row>c<col>``. A state lists where the taxi and the
passenger are, the destination, and the map's static facts (landmarks, and which moves no
wall blocks), because capwatch's states are closed world. A move off the edge of the map
has no counterpart in the model and is not reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from capwatch.client.vocabulary import Abstraction, Vocabulary
from capwatch.model.domain import GroundAction, GroundAtom

ENV_ID = "Taxi-v4"
ROWS = COLS = 5
ACTIONS = {0: "move-south", 1: "move-north", 2: "move-east", 3: "move-west",
           4: "pickup", 5: "dropoff"}
_DELTA = {0: (1, 0), 1: (-1, 0), 2: (0, 1), 3: (0, -1)}
_DIRECTION = {0: "south", 1: "north", 2: "east", 3: "west"}


def domain_path() -> Path:
    return Path(str(resources.files("capwatch.examples.gym") / "taxi.pddl"))


def problem_path() -> Path:
    return Path(str(resources.files("capwatch.examples.gym") / "taxi-problem.pddl"))


def cell(row: int, col: int) -> str:
    return f"r{row}c{col}"


def _walls(desc: Any) -> set[tuple[int, int]]:
    """(row, col) pairs with a wall between col and col + 1 (the map's '|' characters)."""
    walls = set()
    for r in range(ROWS):
        line = bytes(desc[r + 1]).decode()
        for c in range(COLS - 1):
            if line[2 * c + 2] == "|":
                walls.add((r, c))
    return walls


def static_atoms(env: Any) -> frozenset[GroundAtom]:
    """Landmarks and the moves no wall blocks, read from the environment's own map."""
    base = env.unwrapped
    walls = _walls(base.desc)
    atoms: set[GroundAtom] = {("landmark", cell(r, c)) for r, c in base.locs}
    for r in range(ROWS):
        for c in range(COLS):
            if r + 1 < ROWS:
                atoms.add(("south", cell(r, c), cell(r + 1, c)))
                atoms.add(("north", cell(r + 1, c), cell(r, c)))
            if c + 1 < COLS and (r, c) not in walls:
                atoms.add(("east", cell(r, c), cell(r, c + 1)))
                atoms.add(("west", cell(r, c + 1), cell(r, c)))
    return frozenset(atoms)


class TaxiAbstraction:
    """The hooks for one environment instance (its map gives the static facts)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.static = static_atoms(env)
        self.locs = [tuple(x) for x in env.unwrapped.locs]

    def atoms(self, obs: int) -> Iterator[GroundAtom]:
        row, col, passenger, dest = self.env.unwrapped.decode(int(obs))
        yield ("taxi-at", cell(row, col))
        if passenger == 4:
            yield ("in-taxi",)
        else:
            yield ("passenger-at", cell(*self.locs[passenger]))
        yield ("destination", cell(*self.locs[dest]))
        yield from self.static

    def action(self, obs: int, action: int) -> GroundAction | None:
        row, col, _, _ = self.env.unwrapped.decode(int(obs))
        a = int(action)
        if a in _DELTA:
            dr, dc = _DELTA[a]
            r2, c2 = row + dr, col + dc
            if not (0 <= r2 < ROWS and 0 <= c2 < COLS):
                return None  # off the map: no such cell in the model
            return (ACTIONS[a], cell(row, col), cell(r2, c2))
        return (ACTIONS[a], cell(row, col))

    def set_state(self, env: Any, atoms: frozenset[GroundAtom]) -> int:
        """Put ``env`` in the abstract state; returns the observation."""
        def only(predicate: str) -> tuple[int, int] | None:
            found = [a for a in atoms if a[0] == predicate]
            if len(found) > 1:
                raise ValueError(f"taxi cannot be in a state with {len(found)} {predicate}")
            if not found:
                return None
            return _cell_position(found[0][1])

        taxi, dest = only("taxi-at"), only("destination")
        if taxi is None or dest is None or dest not in self.locs:
            raise ValueError("a taxi state needs taxi-at and a landmark destination")
        if ("in-taxi",) in atoms:
            passenger = 4
        else:
            at = only("passenger-at")
            if at is None or at not in self.locs:
                raise ValueError("the passenger must be in the taxi or at a landmark")
            passenger = self.locs.index(at)
        s = int(env.unwrapped.encode(taxi[0], taxi[1], passenger, self.locs.index(dest)))
        env.unwrapped.s = s
        env.unwrapped.lastaction = None
        return s


def _cell_position(name: str) -> tuple[int, int]:
    if len(name) != 4 or name[0] != "r" or name[2] != "c" or not (
            name[1].isdigit() and name[3].isdigit()) or int(name[1]) >= ROWS \
            or int(name[3]) >= COLS:
        raise ValueError(f"{name!r} is not a cell of the map")
    return int(name[1]), int(name[3])


def abstraction(env: Any, vocabulary: Vocabulary | None = None) -> Abstraction[int, int]:
    hooks = TaxiAbstraction(env)
    vocab = vocabulary or Vocabulary.from_file(domain_path())
    return Abstraction(vocab, atoms=hooks.atoms, action=hooks.action, action_names=ACTIONS)


def problem_pddl(env: Any) -> str:
    """The problem file capwatch's daemon reads for this map (objects and static facts)."""
    cells = " ".join(cell(r, c) for r in range(ROWS) for c in range(COLS))
    locs = [tuple(x) for x in env.unwrapped.locs]
    init = sorted(static_atoms(env) | {("taxi-at", cell(2, 2)),
                                       ("passenger-at", cell(*locs[0])),
                                       ("destination", cell(*locs[1]))})
    facts = "\n    ".join("(" + " ".join(a) + ")" for a in init)
    return (f"; Generated by capwatch.examples.gym.taxi.problem_pddl from {ENV_ID}'s map.\n"
            f"(define (problem taxi-map)\n  (:domain taxi)\n  (:objects {cells} - cell)\n"
            f"  (:init\n    {facts})\n  (:goal (passenger-at {cell(*locs[1])})))\n")


def executed(obs: int, action: int, next_obs: int, info: dict[str, Any]) -> bool:
    """Every Taxi action that is executed changes the state (a wall or an illegal pickup
    or dropoff leaves it as it was), so an unchanged state means "not executed"."""
    return int(obs) != int(next_obs)
