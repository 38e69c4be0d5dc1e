"""Tools for tests and benchmarks: input corpora and local stand-ins for remote services.

model_server is a local OpenAI-compatible chat server; bad_corpus a hostile input corpus.
"""
