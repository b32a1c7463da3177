; The shuttle after a drift: teleport now needs (charged), which nothing makes true, so
; the optimal shuttle walks; every step it takes is consistent with the old model.
(define (domain shuttle)
  (:requirements :strips :typing)
  (:types place)
  (:predicates (at ?p - place) (road ?a - place ?b - place) (charged))
  (:action walk
    :parameters (?a - place ?b - place)
    :precondition (and (at ?a) (road ?a ?b))
    :effect (and (at ?b) (not (at ?a))))
  (:action teleport
    :parameters (?a - place ?b - place)
    :precondition (and (at ?a) (charged))
    :effect (and (at ?b) (not (at ?a)) (not (charged)))))
