"""Adapters to the outside world, by role: ``io`` (the clients the daemon uses), ``sim``
(the simulated fleet and reference agent) and ``sdk`` (agent-side code)."""
