"""Offline evaluations of the agent's memory, computed from job outputs."""
