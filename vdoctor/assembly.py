"""The assembly root: settings in, the engine and every part of it out.

This is the only domain module that reads ``Settings``. Each part comes from
its role's closed registry (L3 stores, knowledge stores, chat models,
embedders, token counters), given the typed sub-model it needs; the jobs, the
operators and the CLI get their parts here and nowhere else.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import SecretStr

from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders import Embedder, EmbedderConfig, embedder_dim, open_embedder, query_file
from vdoctor.knowledge import KnowledgePack, load_pack
from vdoctor.knowledge.search import KnowledgeBase
from vdoctor.knowledge.stores import open_knowledge_store
from vdoctor.memory.recall import SessionRecall
from vdoctor.memory.summarizer import ModelSummarizer, OfflineSummarizer, Summarizer
from vdoctor.models import ChatModel, ChatModelConfig, open_chat_model
from vdoctor.models.gate import GatedChatModel, ModelGate
from vdoctor.settings import Settings
from vdoctor.stores import MemoryStore, open_store, sqlite_file
from vdoctor.stores.retry import RetryingStore
from vdoctor.tokens import TokenCounter, open_counter
from vdoctor.url_credentials import url_scheme


def token_counter(settings: Settings) -> TokenCounter:
    return open_counter(settings.memory.token_counter)


def _embedder_config(settings: Settings, api_key: SecretStr | None) -> EmbedderConfig:
    return EmbedderConfig(
        model=settings.embedding.model,
        base_url=settings.endpoint.base_url,
        api_key=api_key,
        # Replays that must be repeatable embed every text alone (EmbedderConfig.share_calls).
        share_calls=not settings.runtime.deterministic,
        child_process=settings.embedding.child_process,
        query_file=query_vector_file(settings),
    )


# Stores on a server, with no file of their own: their jobs keep the query vector file in the user's cache folder.
_SERVER_STORES = ("mysql", "doris")


def query_vector_file(settings: Settings) -> str | None:
    """Where the embedder shares query vectors (``EmbeddingSettings.query_vector_file``), or None."""
    chosen = settings.embedding.query_vector_file
    # A file an earlier run filled holds vectors embedded within batches (~1e-7 from a text alone).
    if settings.runtime.deterministic or chosen == "off":
        return None
    if chosen != "auto":
        return chosen
    db = sqlite_file(settings.memory.url)
    if db is not None:
        return db + query_file.SUFFIX
    if url_scheme(settings.memory.url) in _SERVER_STORES:
        return str(query_file.user_cache_file(os.environ))
    return None  # a store in memory, or Mem0: nothing of the job's kept on disk


def reading_only(settings: Settings) -> Settings:
    """``settings`` for a reader of long-term memory (``vdoctor serve``, ``vdoctor memory recall``): no query
    vector file, which a recall's query would be added to, beside the store (past its bound, the job's
    oldest rows gave way: an audit)."""
    return settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"query_vector_file": "off"})})


def embedder(settings: Settings) -> Embedder:
    """The configured embedder; a model with weights is loaded once per process and shared."""
    return open_embedder(settings.embedding.kind, _embedder_config(settings, settings.api_key()))


def embedder_dimension(settings: Settings) -> int:
    """The configured embedder's vector dimension, without loading it (``memory init`` sizes indexes by it)."""
    return embedder_dim(settings.embedding.kind, _embedder_config(settings, api_key=None))  # no call: no key


def _model_config(settings: Settings, model: str) -> ChatModelConfig:
    return ChatModelConfig(
        model=model,
        base_url=settings.endpoint.base_url,
        api_key=settings.api_key(),
        timeout_s=settings.model.timeout_s,
        max_attempts=settings.model.max_attempts,
    )


def chat_model(settings: Settings, counter: TokenCounter | None = None) -> ChatModel:
    """The model of the ReAct runs."""
    config = _model_config(settings, settings.model.chat_model)
    return open_chat_model(settings.model.chat, config, counter or token_counter(settings))


def summarizer(settings: Settings, counter: TokenCounter | None = None, gate: ModelGate | None = None) -> Summarizer:
    """Who writes summaries: the offline summarizer, or a (cheaper) summary model (DESIGN.md §4).

    ``gate``: the slots the summary model's calls share with the ReAct model's. A run summarises only
    after its ReAct calls, so its summary calls wait for a slot as a run's later calls do (``ModelGate``).
    """
    if settings.model.summarizer == "offline":
        return OfflineSummarizer()
    config = _model_config(settings, settings.model.summary_model)
    model = open_chat_model(settings.model.summarizer, config, counter or token_counter(settings))
    return ModelSummarizer(model if gate is None else GatedChatModel(model, gate, continuing=True))


def knowledge_pack(settings: Settings) -> KnowledgePack:
    extra = settings.memory.extra_dtc_csv
    return load_pack(extra_csv=Path(extra) if extra else None)


def long_term_store(settings: Settings, retrying: bool = True, existing: bool = False) -> MemoryStore:
    """The L3 store; the job's writes retry through outages (``RetryingStore``), a CLI's need not.
    ``existing``: as ``open_store``'s (a command that rewrites a store never creates one)."""
    store = open_store(settings.memory.url, existing=existing)
    return RetryingStore(store, deadline_s=settings.memory.store_retry_s) if retrying else store


def knowledge_base(settings: Settings, embedder_: Embedder | None = None) -> KnowledgeBase:
    return KnowledgeBase(open_knowledge_store(settings.memory.knowledge_url), embedder_ or embedder(settings))


def session_recall(settings: Settings, store: MemoryStore) -> SessionRecall:
    """What a session opening now would be given from long-term memory: the job's own recall."""
    return SessionRecall(
        store,
        embedder(settings),
        knowledge_pack(settings),
        settings.memory.injection_budget_tokens,
        token_counter(settings),
    )


def build_engine(settings: Settings) -> DiagnosisEngine:
    """The diagnosis engine with every part the settings name.

    Its model calls, the ReAct model's and a summary model's, share one gate of
    ``concurrency`` slots: the operator runs more runs than that (``extra_runs``),
    and the endpoint still sees at most ``concurrency`` calls (``vdoctor.models.gate``).
    """
    counter = token_counter(settings)
    embedder_ = embedder(settings)
    gate = ModelGate(settings.runtime.concurrency)
    return DiagnosisEngine(
        store=long_term_store(settings),
        model=GatedChatModel(chat_model(settings, counter), gate),
        embedder=embedder_,
        pack=knowledge_pack(settings),
        counter=counter,
        working_budget_tokens=settings.memory.working_budget_tokens,
        injection_budget_tokens=settings.memory.injection_budget_tokens,
        summarizer=summarizer(settings, counter, gate),
        knowledge=knowledge_base(settings, embedder_),
        memory_enabled=settings.memory.enabled,
    )
