; The hoist after two drifts (issue 11): move_down no longer adds (at ?hto), and the winch
; is broken: move_up never executes (its precondition cannot hold).
(define (domain hoist)
  (:requirements :typing :equality :negative-preconditions)
  (:types height)
  (:predicates (at ?h - height) (below ?a ?b - height) (visited ?h - height))
  (:action move_down
    :parameters (?hfrom ?hto - height)
    :precondition (and (at ?hfrom) (not (visited ?hto)))
    :effect (and (not (at ?hfrom)) (visited ?hto)))
  (:action move_up
    :parameters (?hfrom ?hto - height)
    :precondition (and (at ?hfrom) (not (at ?hfrom)) (below ?hfrom ?hto) (not (= ?hfrom ?hto)))
    :effect (and (not (at ?hfrom)) (at ?hto))))
