; The hoist after a drift: move_down no longer adds (at ?hto) (written for issue 11).
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
    :precondition (and (at ?hfrom) (below ?hfrom ?hto) (not (= ?hfrom ?hto)))
    :effect (and (not (at ?hfrom)) (at ?hto))))
