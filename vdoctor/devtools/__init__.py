"""Tools for tests and benchmarks: input corpora and local stand-ins for remote services (an OpenAI-compatible model server)."""
