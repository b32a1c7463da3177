; A hoist moving between heights; written for capwatch's tests (repeated objects).
; move_down has no (not (= ?hfrom ?hto)): move_down(h1, h1) is a legal ground action that
; deletes (at h1) and adds it back (PDDL: delete, then add). move_up forbids it.
(define (domain hoist)
  (:requirements :typing :equality :negative-preconditions)
  (:types height)
  (:predicates (at ?h - height) (below ?a ?b - height) (visited ?h - height))
  (:action move_down
    :parameters (?hfrom ?hto - height)
    :precondition (and (at ?hfrom) (not (visited ?hto)))
    :effect (and (not (at ?hfrom)) (at ?hto) (visited ?hto)))
  (:action move_up
    :parameters (?hfrom ?hto - height)
    :precondition (and (at ?hfrom) (below ?hfrom ?hto) (not (= ?hfrom ?hto)))
    :effect (and (not (at ?hfrom)) (at ?hto))))
