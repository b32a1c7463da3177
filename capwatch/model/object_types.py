"""Whether a ground action names objects of its parameters' types, where their types are
known: declared by the family's problem (or the domain's constants).

A transition whose action names an object of another type (``sample_rock store1 rover1
waypoint1``, its rover and store swapped) is a producer's mistake, not a drift: a model's
types are fixed, so no assessment can learn it, and checked against the model it only
looked inconsistent (its preconditions over the swapped objects fail) and queued an
assessment that could not explain it. It is refused instead, naming the object, its
type and the parameter's. Objects the problem does not declare (agents with objects of
their own) are not checked: nothing says their type.
"""

from __future__ import annotations

from collections.abc import Iterable

from capwatch.model.domain import Domain, GroundAction, Parameter, type_members

CHECKED = 100_000
"""Ground actions :attr:`ObjectTypes.ok` holds before it starts afresh (a bound on memory
for fleets whose agents name objects of their own)."""


class ObjectTypes:
    """The declared type of each object given (a family's problem's objects and its
    domain's constants)."""

    __slots__ = ("ok", "types")

    def __init__(self, objects: Iterable[Parameter]) -> None:
        self.types: dict[str, str] = {o.name: o.type for o in objects}
        self.ok: set[GroundAction] = set()
        """Ground actions checked and found well typed (:meth:`problem` is then not
        called again for them)."""

    def problem(self, domain: Domain, action: GroundAction) -> str | None:
        """Why ``action`` is not well typed in ``domain``, or None (then remembered in
        :attr:`ok`). An unknown action or a wrong arity is left to the vocabulary check."""
        lifted = domain.action_map.get(action[0])
        if lifted is None or len(action) - 1 != lifted.arity:
            return None
        types = self.types
        for param, obj in zip(lifted.parameters, action[1:], strict=True):
            declared = types.get(obj)
            if declared is not None and not domain.types.is_subtype(declared, param.type):
                kinds = " or ".join(type_members(param.type))
                return (f"action {action[0]!r}: object {obj!r} is a {declared}, but its "
                        f"parameter {param.name} takes a {kinds} (the types of the family's "
                        f"model are fixed: the producer named the wrong object)")
        ok = self.ok
        if len(ok) >= CHECKED:
            ok.clear()
        ok.add(action)
        return None

