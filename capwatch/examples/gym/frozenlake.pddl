; Gymnasium's FrozenLake-v1 with is_slippery=False, abstracted to the cells of its map.
; Same action signatures as frozenlake-slippery.pddl (the cell ahead, then the two cells to
; the sides the ice could push the agent to), so the two models describe the same steps:
; here the agent always reaches the cell ahead. capwatch/examples/gym/frozenlake.py maps
; observations and actions to this vocabulary. (walkable ?c): neither a hole nor the goal
; (the episode ends there and the agent no longer moves).
(define (domain frozenlake)
  (:requirements :strips :typing)
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
    :effect (and (not (at ?from)) (at ?to)))
  (:action move-south
    :parameters (?from - cell ?to - cell ?side1 - cell ?side2 - cell)
    :precondition (and (at ?from) (walkable ?from) (south ?from ?to) (west ?from ?side1)
                       (east ?from ?side2))
    :effect (and (not (at ?from)) (at ?to)))
  (:action move-east
    :parameters (?from - cell ?to - cell ?side1 - cell ?side2 - cell)
    :precondition (and (at ?from) (walkable ?from) (east ?from ?to) (south ?from ?side1)
                       (north ?from ?side2))
    :effect (and (not (at ?from)) (at ?to)))
  (:action move-north
    :parameters (?from - cell ?to - cell ?side1 - cell ?side2 - cell)
    :precondition (and (at ?from) (walkable ?from) (north ?from ?to) (east ?from ?side1)
                       (west ?from ?side2))
    :effect (and (not (at ?from)) (at ?to))))
