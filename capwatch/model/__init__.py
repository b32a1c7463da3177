"""The symbolic model core: PDDL/PPDDL models, pal-tuples, grounding and consistency.

Pure Python; reads and writes text but touches no file, socket or clock itself.

The names below are imported at first use (PEP 562): importing one module of the package
(``capwatch.model.diff``, say, as the daemon's configuration does through the alert
policy) ran this file first, and with it grounding and NumPy (~0.3 s of CPU before the
daemon's probes answered; docs/performance.md, "Start-up").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capwatch.lazy import lazy_getattr

if TYPE_CHECKING:
    from capwatch.model.consistency import (
        Inconsistency,
        Verdict,
        check,
        explain,
        joint_explains,
        shared_ground_atoms,
    )
    from capwatch.model.domain import (
        Action,
        Domain,
        GroundAction,
        GroundAtom,
        LiftedAtom,
        Outcome,
        Parameter,
        Predicate,
        Problem,
        TypeHierarchy,
    )
    from capwatch.model.errors import ModelError, PDDLError
    from capwatch.model.grounding import AtomIndex, Grounder, GroundOperator
    from capwatch.model.pal import (
        AbstractModel,
        Location,
        Mode,
        PalTuple,
        PaTuple,
        delta,
        pal_tuples,
        summarise_changes,
    )
    from capwatch.model.pddl_reader import parse_domain, parse_plan, parse_problem
    from capwatch.model.pddl_writer import write_domain, write_plan, write_problem
    from capwatch.model.serialize import domain_from_json, domain_to_json

_WHERE = {
    "consistency": ("Inconsistency", "Verdict", "check", "explain", "joint_explains",
                    "shared_ground_atoms"),
    "domain": ("Action", "Domain", "GroundAction", "GroundAtom", "LiftedAtom", "Outcome",
               "Parameter", "Predicate", "Problem", "TypeHierarchy"),
    "errors": ("ModelError", "PDDLError"),
    "grounding": ("AtomIndex", "Grounder", "GroundOperator"),
    "pal": ("AbstractModel", "Location", "Mode", "PalTuple", "PaTuple", "delta", "pal_tuples",
            "summarise_changes"),
    "pddl_reader": ("parse_domain", "parse_plan", "parse_problem"),
    "pddl_writer": ("write_domain", "write_plan", "write_problem"),
    "serialize": ("domain_from_json", "domain_to_json"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = [
    "AbstractModel", "Action", "AtomIndex", "Domain", "GroundAction", "GroundAtom",
    "GroundOperator", "Grounder", "Inconsistency", "LiftedAtom", "Location", "Mode",
    "ModelError", "Outcome", "PDDLError", "PaTuple", "PalTuple", "Parameter", "Predicate",
    "Problem", "TypeHierarchy", "Verdict", "check", "delta", "domain_from_json",
    "domain_to_json", "explain", "joint_explains", "pal_tuples", "parse_domain", "parse_plan",
    "parse_problem",
    "shared_ground_atoms", "summarise_changes", "write_domain", "write_plan", "write_problem",
]

__getattr__ = lazy_getattr(__name__, _MODULE_OF, globals())
