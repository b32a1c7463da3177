"""Gymnasium environments connected to capwatch: models and abstractions (Taxi, FrozenLake).

Each module maps one environment's observations and actions to the vocabulary of its PDDL
model next to it, writes the matching problem file, and puts an environment into an
abstract state so that it can answer capwatch's queries.
"""
