; capwatch/examples/rover.pddl after a drift (issue 11): navigate now needs a full battery.
; An agent that tops up before it drives never shows it: canaries must.
(define (domain rover)
  (:requirements :strips :typing)
  (:types rover store waypoint)
  (:predicates
    (at ?r - rover ?w - waypoint)
    (equipped_rock_analysis ?r - rover)
    (battery_full ?r - rover)
    (battery_half ?r - rover)
    (battery_reserve ?r - rover)
    (rock_sample_taken ?r - rover)
    (store_full ?r - rover ?s - store)
  )
  (:action navigate
    :parameters (?r - rover ?from - waypoint ?to - waypoint)
    :precondition (and (at ?r ?from) (battery_full ?r))
    :effect (and (at ?r ?to) (not (at ?r ?from))))
  (:action sample_rock
    :parameters (?r - rover ?s - store ?w - waypoint)
    :precondition (and (equipped_rock_analysis ?r) (battery_half ?r) (at ?r ?w))
    :effect (and (rock_sample_taken ?r) (store_full ?r ?s) (not (battery_half ?r))
                 (battery_reserve ?r)))
  (:action drop_sample
    :parameters (?r - rover ?s - store)
    :precondition (and (store_full ?r ?s))
    :effect (and (not (store_full ?r ?s)) (not (rock_sample_taken ?r))))
  (:action recharge
    :parameters (?r - rover)
    :precondition (and (battery_reserve ?r))
    :effect (and (battery_half ?r) (not (battery_reserve ?r))))
  (:action top_up
    :parameters (?r - rover)
    :precondition (and (battery_half ?r))
    :effect (and (battery_full ?r) (not (battery_half ?r))))
)
