"""Tools for tests and benchmarks: input corpora, local stand-ins for remote services."""
