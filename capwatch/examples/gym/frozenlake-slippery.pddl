; Gymnasium's FrozenLake-v1 with is_slippery=True and its default success_rate of 1/3: the
; agent reaches the cell ahead, or slips to one of the two cells to its sides, each with
; probability 1/3 (gymnasium's frozen_lake.py). Same vocabulary and action signatures as
; frozenlake.pddl, the is_slippery=False model.
(define (domain frozenlake)
  (:requirements :strips :typing :probabilistic-effects)
  (:types cell)
  (:predicates
    (at ?c - cell)
    (walkable ?c - cell)
    (goal ?c - cell)
    (north ?a - cell ?b - cell)
    (south ?a - cell ?b - cell)
    (east ?a - cell ?b - cell)
    (west ?a - cell ?b - cell))
  (:action move-west
    :parameters (?from - cell ?to - cell ?side1 - cell ?side2 - cell)
    :precondition (and (at ?from) (walkable ?from) (west ?from ?to) (north ?from ?side1)
                       (south ?from ?side2))
    :effect (probabilistic
              0.333333 (and (not (at ?from)) (at ?to))
              0.333333 (and (not (at ?from)) (at ?side1))
              0.333334 (and (not (at ?from)) (at ?side2))))
  (:action move-south
    :parameters (?from - cell ?to - cell ?side1 - cell ?side2 - cell)
    :precondition (and (at ?from) (walkable ?from) (south ?from ?to) (west ?from ?side1)
                       (east ?from ?side2))
    :effect (probabilistic
              0.333333 (and (not (at ?from)) (at ?to))
              0.333333 (and (not (at ?from)) (at ?side1))
              0.333334 (and (not (at ?from)) (at ?side2))))
  (:action move-east
    :parameters (?from - cell ?to - cell ?side1 - cell ?side2 - cell)
    :precondition (and (at ?from) (walkable ?from) (east ?from ?to) (south ?from ?side1)
                       (north ?from ?side2))
    :effect (probabilistic
              0.333333 (and (not (at ?from)) (at ?to))
              0.333333 (and (not (at ?from)) (at ?side1))
              0.333334 (and (not (at ?from)) (at ?side2))))
  (:action move-north
    :parameters (?from - cell ?to - cell ?side1 - cell ?side2 - cell)
    :precondition (and (at ?from) (walkable ?from) (north ?from ?to) (east ?from ?side1)
                       (west ?from ?side2))
    :effect (probabilistic
              0.333333 (and (not (at ?from)) (at ?to))
              0.333333 (and (not (at ?from)) (at ?side1))
              0.333334 (and (not (at ?from)) (at ?side2)))))
