"""Contracts: the formats and interfaces that the adapters, the store, the alerts and
the daemon share (wire events, the agent query protocol, source and publisher ports).

They sit below all of those and above only the core (capwatch.model, .monitor, .assess).
"""
