"""Flink adapters: thin functions from Flink state and timers to the vdoctor domain package."""
