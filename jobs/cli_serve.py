"""``vdoctor serve``: the read-only memory inspector in the browser (the ``inspector`` package)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from jobs.job_settings import (
    DEFAULT_SERVE_HOST,
    DEFAULT_SERVE_PORT,
    MEMORY_FLAG_HELP,
    SERVE_TOKEN_ENV,
    domain_settings,
    memory_url_as_given,
    serve_settings,
)
from vdoctor import assembly
from vdoctor.errors import VDoctorError
from vdoctor.scrub import settings_secrets
from vdoctor.stores import open_store
from vdoctor.stores.audit import audit_reads


def _cmd_serve(args: argparse.Namespace) -> int:
    from inspector.outputs import JobOutputs
    from inspector.security import Scrubber, redact_url
    from inspector.server import serve
    from inspector.views import Inspector

    config = serve_settings(args)
    outputs = JobOutputs.checked(Path(config.diagnoses)) if config.diagnoses else None
    # Read-only, the query vector file too (by anyone who can reach the inspector).
    settings = assembly.reading_only(domain_settings(args))
    url = settings.memory.url
    # The model API key and the endpoint URL's password too (an openai embedder's recall has them, and the
    # HTTP client logs each request's URL at INFO), though nothing here is meant to print them.
    scrub = Scrubber([config.token.get_secret_value() if config.token else None, *settings_secrets(settings)])
    try:
        # ``existing``: the readers' check (``memory history`` and the rest): a file that is no long-term
        # memory is named as such, where the read-only open told the user to migrate it with a command
        # that refuses it.
        store = open_store(url, read_only=True, existing=True)
    except VDoctorError as e:
        raise type(e)(scrub(str(e))) from None
    try:
        inspector = Inspector(
            store=store,
            audit=audit_reads(store),
            recall=assembly.session_recall(settings, store),
            memory=redact_url(memory_url_as_given(args)),
            outputs=outputs,
        )
        serve(inspector, config.host, config.port, config.token, config.local, scrub)
    finally:
        store.close()
    return 0


def add_commands(sub: Any) -> None:
    """Add ``serve`` to the ``vdoctor`` parser's sub-commands."""
    serve = sub.add_parser(
        "serve",
        help="the read-only memory inspector in the browser: fleet, vehicle timelines, cases, recall explained",
    )
    serve.add_argument("--memory", help=MEMORY_FLAG_HELP)
    serve.add_argument(
        "--diagnoses", help="the job's output folder, or its diagnoses.jsonl (dead_letters.jsonl beside it)"
    )
    serve.add_argument("--host", default=DEFAULT_SERVE_HOST, help=f"address to bind (default {DEFAULT_SERVE_HOST})")
    serve.add_argument("--port", type=int, default=DEFAULT_SERVE_PORT, help=f"default {DEFAULT_SERVE_PORT}")
    serve.add_argument(
        "--token",
        help=f"required on any address but loopback (better: {SERVE_TOKEN_ENV}, which `ps` does not show); "
        "requests carry it as 'Authorization: Bearer <token>', or a browser opens any page once with ?token=<token>",
    )
    serve.set_defaults(func=_cmd_serve)
