"""The symbolic model core: PDDL/PPDDL models, pal-tuples, grounding and consistency.

Pure Python; reads and writes text but touches no file, socket or clock itself.
"""

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

__all__ = [
    "AbstractModel", "Action", "AtomIndex", "Domain", "GroundAction", "GroundAtom",
    "GroundOperator", "Grounder", "Inconsistency", "LiftedAtom", "Location", "Mode",
    "ModelError", "Outcome", "PDDLError", "PaTuple", "PalTuple", "Parameter", "Predicate",
    "Problem", "TypeHierarchy", "Verdict", "check", "delta", "domain_from_json",
    "domain_to_json", "explain", "joint_explains", "pal_tuples", "parse_domain", "parse_plan",
    "parse_problem",
    "shared_ground_atoms", "summarise_changes", "write_domain", "write_plan", "write_problem",
]
