; Gymnasium's Taxi (Taxi-v4, deterministic: is_rainy and fickle_passenger off), abstracted
; to the cells of its 5x5 map. capwatch/examples/gym/taxi.py maps observations and actions
; to this vocabulary; taxi-problem.pddl lists the cells and the map's static facts.
; (north ?a ?b): ?b is the cell north of ?a and no wall lies between them.
(define (domain taxi)
  (:requirements :strips :typing)
  (:types cell)
  (:predicates
    (taxi-at ?c - cell)
    (passenger-at ?c - cell)
    (in-taxi)
    (destination ?c - cell)
    (landmark ?c - cell)
    (north ?a - cell ?b - cell)
    (south ?a - cell ?b - cell)
    (east ?a - cell ?b - cell)
    (west ?a - cell ?b - cell))
  (:action move-south
    :parameters (?from - cell ?to - cell)
    :precondition (and (taxi-at ?from) (south ?from ?to))
    :effect (and (not (taxi-at ?from)) (taxi-at ?to)))
  (:action move-north
    :parameters (?from - cell ?to - cell)
    :precondition (and (taxi-at ?from) (north ?from ?to))
    :effect (and (not (taxi-at ?from)) (taxi-at ?to)))
  (:action move-east
    :parameters (?from - cell ?to - cell)
    :precondition (and (taxi-at ?from) (east ?from ?to))
    :effect (and (not (taxi-at ?from)) (taxi-at ?to)))
  (:action move-west
    :parameters (?from - cell ?to - cell)
    :precondition (and (taxi-at ?from) (west ?from ?to))
    :effect (and (not (taxi-at ?from)) (taxi-at ?to)))
  (:action pickup
    :parameters (?c - cell)
    :precondition (and (taxi-at ?c) (passenger-at ?c))
    :effect (and (in-taxi) (not (passenger-at ?c))))
  (:action dropoff
    :parameters (?c - cell)
    :precondition (and (taxi-at ?c) (in-taxi) (landmark ?c))
    :effect (and (passenger-at ?c) (not (in-taxi)))))
