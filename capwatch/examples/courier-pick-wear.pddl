; The courier after its gripper wore: pick now succeeds only half the time.
(define (domain courier)
  (:requirements :strips :typing :probabilistic-effects)
  (:types robot parcel room)
  (:predicates
    (at_robot ?r - robot ?x - room)
    (at ?p - parcel ?x - room)
    (carrying ?r - robot ?p - parcel)
    (free ?r - robot)
  )
  (:action move
    :parameters (?r - robot ?from - room ?to - room)
    :precondition (and (at_robot ?r ?from))
    :effect (and (at_robot ?r ?to) (not (at_robot ?r ?from))))
  (:action pick
    :parameters (?r - robot ?p - parcel ?x - room)
    :precondition (and (at_robot ?r ?x) (at ?p ?x) (free ?r))
    :effect (probabilistic
              0.5 (and (carrying ?r ?p) (not (at ?p ?x)) (not (free ?r)))))
  (:action drop
    :parameters (?r - robot ?p - parcel ?x - room)
    :precondition (and (at_robot ?r ?x) (carrying ?r ?p))
    :effect (and (at ?p ?x) (free ?r) (not (carrying ?r ?p))))
)
