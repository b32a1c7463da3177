; A shuttle that walks along roads or teleports anywhere; written for capwatch's tests
; (issue 11: reduced functionality that only optimal traces show).
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
    :precondition (and (at ?a))
    :effect (and (at ?b) (not (at ?a)) (not (charged)))))
