"""The simulated fleet and the reference agent (simulated agent and its HTTP server).

They stand in for real agents in tests, benchmarks and the demo.
"""
