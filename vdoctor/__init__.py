"""vehicle-doctor: a streaming diagnosis agent with layered memory for vehicle fleets.

This package is the pure domain: events and records, the three memory layers,
the ReAct agent, model and embedder clients and the store backends. It never
imports pyflink; the Flink adapters live in ``operators/`` and the wiring in
``jobs/``.
"""

__version__ = "0.1.0"
