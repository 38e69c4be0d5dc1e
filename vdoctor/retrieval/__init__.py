"""Retrieval: one pipeline for similar-case recall, knowledge search and the benchmarks.

Two channels find candidates: a lexical one (BM25 over ``tokens``: English
words, Chinese characters and character pairs) and a dense one (inner product
of normalised embeddings). ``hybrid`` fuses them by weighted, min-max scaled
scores over the union of both candidate lists; the callers add their own
rerank terms (trouble-code overlap for cases and knowledge chunks). The
candidate counts and weights are constants of ``hybrid``: the product and
``bench/`` import them from there, never keep copies.
"""
