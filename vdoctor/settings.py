"""Settings of the diagnosis job: one frozen model of typed sub-models, built at the edge (``jobs/``).

Precedence: command-line flags, then environment variables, then defaults.
Every environment variable name lives in this module (``FIELDS``), and
nothing reads the environment at import time. Secrets are ``SecretStr``: they
never print, log or serialise in clear; ``for_workers`` leaves the API key out
of what is shipped (pickled) to Flink workers, and a worker reads it in
``open()`` with ``with_secrets`` from its own environment or a key file; a
command that builds a model or an embedder itself reads the key file when it
builds one (``Settings.api_key``).
A store URL's password is part of a plain ``str`` (the stores need the URL
whole): ``repr()`` and ``str()`` mask it, while ``model_dump`` keeps it. A job
submitted to a cluster ships its URLs without their passwords as well
(``for_workers(withhold_passwords=True)``), and each worker reads them whole
from its environment (``worker_settings``).

Only the assembly root (``vdoctor.assembly``) turns settings into parts; the
parts' registries take the sub-model they need.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, ValidationInfo, field_validator

from vdoctor.embedders import DEFAULT_EMBEDDER, EmbedderName
from vdoctor.errors import ConfigError
from vdoctor.events import (
    DEFAULT_DTC_NUMBERS,
    DTC_NUMBERS_ENV,
    NAIVE_TS_ZONE_ENV,
    NUMBER_COMMA_ENV,
    SIGNAL_MAP_ENV,
    describe_validation_error,
    dtc_numbers,
    number_comma,
    time_zone,
)
from vdoctor.knowledge.stores import STORES as KNOWLEDGE_STORES
from vdoctor.limits import INJECTION_BUDGET_TOKENS, SESSION_TTL, WORKING_BUDGET_TOKENS
from vdoctor.malloc_trim import DEFAULT_INTERVAL_S as DEFAULT_MALLOC_TRIM_S
from vdoctor.models import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_S, ChatModelName
from vdoctor.signal_map import check_signal_map, read_signal_map
from vdoctor.stores import STORES, sqlite_file
from vdoctor.url_credentials import ENCODING_HINT, redact_url, split_url, without_password

DEFAULT_MEMORY_URL = "sqlite:///.vdoctor/memory.db"
DEFAULT_KNOWLEDGE_URL = "sqlite:///.vdoctor/knowledge.db"
# Model calls in flight per subtask: at 2 model calls of ~0.4 s per run that
# is ~80 runs/s per subtask, far beyond one at a time (~1.2 runs/s).
DEFAULT_CONCURRENCY = 64
# Extra runs by default: concurrency // 4. On the concurrency bench a run spends ~4% of its time
# outside the model (~10% for one that concludes a case), in bursts of runs that started together;
# a quarter more runs keeps every slot busy through them (README: Hosted models and concurrency).
EXTRA_RUNS_DIVISOR = 4
# A long-term-memory outage of a few minutes (a Doris FE failover, a MariaDB
# restart) is ridden out by retrying writes this long.
DEFAULT_STORE_RETRY_S = 300.0
# Upper bounds of the settings in seconds. Each is far beyond any use (an outage ridden out for a day,
# a model call of an hour, idle sessions kept a year, a trim a day) and keeps the value one the code
# can use: infinity, or 1e300, fails later inside the job (a TTL in whole milliseconds, a thread's wait).
MAX_STORE_RETRY_S = 24 * 3600.0
MAX_MODEL_TIMEOUT_S = 3600.0
MAX_STATE_TTL_S = 365 * 24 * 3600.0
DEFAULT_CASE_RETRY_S = 600.0
MAX_MALLOC_TRIM_S = 24 * 3600.0

# The words of the query-vector file setting that name no file, in any case.
QUERY_VECTOR_WORDS = ("auto", "off")

# The API key is read from this variable, or from the file the key-file setting names.
API_KEY_ENV = "OPENAI_API_KEY"


def _stripped_url(given: str) -> str:
    """A URL without the white space around it: a variable read from a secret file ends in a newline, which
    would end the sqlite file's name or the host's."""
    return given.strip()


class _Frozen(BaseModel):
    # A ValidationError shows each invalid value (``input_value='https://bob:pw@gw/v1'``), and a ConfigError
    # raised from one carries it to a traceback (a Flink worker's open() sends its traceback to the task's
    # failure, which no scrubber reads): a URL's password or the API key would show there in clear.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        # repr() and str() (and so a log line or a traceback's locals) show a URL field
        # (memory.url, knowledge_url, base_url) without its password; the value itself is untouched.
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if isinstance(value, str) and "://" in value else value


class MemorySettings(_Frozen):
    """Long-term memory, knowledge, and the budgets of the working context."""

    url: str = DEFAULT_MEMORY_URL
    knowledge_url: str = DEFAULT_KNOWLEDGE_URL
    # False runs the agent without long-term recall: the "memory off" arm of the A/B experiment.
    enabled: bool = True
    # How long a long-term-memory write is retried through an outage before the case is flagged.
    store_retry_s: float = Field(default=DEFAULT_STORE_RETRY_S, ge=0, le=MAX_STORE_RETRY_S, allow_inf_nan=False)
    working_budget_tokens: int = Field(default=WORKING_BUDGET_TOKENS, ge=500)
    injection_budget_tokens: int = Field(default=INJECTION_BUDGET_TOKENS, ge=0)
    # An extra code table (CSV) merged into the DTC knowledge pack.
    extra_dtc_csv: str | None = None
    # Which token counter enforces the budgets (vdoctor.tokens).
    token_counter: Literal["estimate", "tiktoken"] = "estimate"

    @field_validator("url", "knowledge_url", mode="before")
    @classmethod
    def _check_store_url(cls, given: object, info: ValidationInfo) -> object:
        """A URL of a backend this release has (checked as a command starts: a job's operator opened it and
        failed in its worker), and a sqlite one that names a file."""
        if not isinstance(given, str):
            return given
        url = _stripped_url(given)
        try:
            (STORES if info.field_name == "url" else KNOWLEDGE_STORES).for_url(url)
            sqlite_file(url)
        except ConfigError as e:
            raise ValueError(str(e)) from None
        return url


class EndpointSettings(_Frozen):
    """An OpenAI-compatible endpoint, shared by the chat models and the embedder."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    # A file holding the key (a mounted Kubernetes secret, say), read when a model or embedder is built (``key``).
    api_key_file: str | None = None

    @field_validator("base_url", mode="before")
    @classmethod
    def _check_base_url(cls, given: object) -> object:
        if not isinstance(given, str):
            return given
        url = _stripped_url(given)
        # A '/', '?' or '#' in the password ends the URL's authority for the HTTP client, which then fails
        # only when a model is built, quoting the password's first piece as the port (``Invalid port:
        # 'Hunter2'``), a fragment no scrubber knows. Refused here, showing only what follows the last '@'.
        split = split_url(url)
        if split is not None and split.ends_authority_early:
            raise ValueError(f"{split.shown}: the user or password holds a '/', '?' or '#'; {ENCODING_HINT}")
        return url

    def key(self) -> SecretStr | None:
        """The API key: ``api_key``, else what the key file holds; None without either.

        The file is read here, when a model or embedder is built (every command that builds one, and each
        worker's ``open()``), not when the settings are loaded: the client that submits a cluster job builds
        none, and need not see the file its workers mount.
        """
        if self.api_key is not None or not self.api_key_file:
            return self.api_key
        try:
            key = Path(self.api_key_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            reason = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
            raise ConfigError(f"cannot read the API key file {self.api_key_file}: {reason}") from None
        return SecretStr(key) if key else None


class ModelSettings(_Frozen):
    """Who diagnoses and who summarises, and the call limits of hosted models."""

    chat: ChatModelName = "offline"
    # Who writes summaries: the offline summarizer (default), or the hosted
    # summary model (usually cheaper than the chat model).
    summarizer: ChatModelName = "offline"
    chat_model: str = "gpt-4o-mini"
    summary_model: str = "gpt-4o-mini"
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=MAX_MODEL_TIMEOUT_S, allow_inf_nan=False)
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=1, le=10)


class EmbeddingSettings(_Frozen):
    """The embedder of long-term and knowledge memory."""

    # use-m3 (default) and e5-small: real multilingual models shipped in their packages, no network;
    # hashing: hashed n-grams for fast tests; openai: an OpenAI-compatible endpoint.
    kind: EmbedderName = DEFAULT_EMBEDDER
    model: str = "text-embedding-3-small"
    # A model with weights (use-m3, e5-small) runs in a child process of its own, off the GIL that
    # all of a TaskManager's runs share (``embedders/child.py``); false: in this process.
    child_process: bool = True
    # Where query vectors are shared with the machine's other processes and with later runs
    # (``embedders/query_file.py``): "auto" beside the embedded store's file (<db>.query-vectors), for a
    # MySQL or Doris store in the user's cache folder ($XDG_CACHE_HOME or ~/.cache, then
    # vdoctor/query-vectors), none for a store in memory or Mem0; "off", or a path. Deterministic replays
    # never use one.
    query_vector_file: str = Field(default="auto", min_length=1)

    @field_validator("query_vector_file", mode="before")
    @classmethod
    def _fold_query_vector_word(cls, given: object) -> object:
        # OFF or Auto as a user types them, not as a file of that name (./off names one).
        if isinstance(given, str) and given.strip().lower() in QUERY_VECTOR_WORDS:
            return given.strip().lower()
        return given


class RuntimeSettings(_Frozen):
    """How the operator runs: model calls and vehicles in flight per subtask, log level."""

    # Model calls in flight per subtask (``vdoctor.models.gate``); 1 runs events inline, one at a time.
    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1, le=4096)
    # Runs in flight beyond ``concurrency``, doing their memory work (recall, the case's summary,
    # embedding and write) while the others hold every model slot. None: a quarter of ``concurrency``.
    extra_runs: int | None = Field(default=None, ge=0, le=4096)
    # Python log level inside the Flink operators (DEBUG also lets the HTTP
    # client libraries' per-request records through).
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # How long Flink keeps a vehicle's idle session state, in processing time
    # (its state TTL: it bounds the state's size). Sessions expire after 48 h
    # of event time whatever this says; a job down for longer than this comes
    # back without the sessions that were open (their next alert opens a new one).
    state_ttl_s: float = Field(default=SESSION_TTL.total_seconds(), ge=1, le=MAX_STATE_TTL_S, allow_inf_nan=False)
    # A concluded case whose write failed (the store, the embedder or the summary model down for longer than
    # their own retries) waits in its session for the vehicle's next alert, and is tried again this often
    # meanwhile (``DiagnosisEngine.retry_case``): each try keeps the session's state alive, so the operator tries at
    # most half ``state_ttl_s`` apart.
    case_retry_s: float = Field(default=DEFAULT_CASE_RETRY_S, ge=1, le=MAX_STATE_TTL_S, allow_inf_nan=False)
    # Runs in flight follow the order that makes results independent of the
    # concurrency (vdoctor.replay_order; at parallelism 1, README "Deterministic replays").
    deterministic: bool = False
    # Seconds between gives of glibc's free pages back to the system (``vdoctor.malloc_trim``); 0: never.
    malloc_trim_s: float = Field(default=DEFAULT_MALLOC_TRIM_S, ge=0, le=MAX_MALLOC_TRIM_S, allow_inf_nan=False)
    # The zone of event times written without one (``events.time_zone``: Asia/Shanghai, +08:00); None:
    # such an event is a dead letter that says so (``events.parse_event``).
    naive_ts_zone: str | None = None
    # How the fleet's numbers use a comma where a number could be read either way (``12,345``): decimal (then
    # points grouping digits in threes twice or more group thousands) or thousands; None: such a reading is set
    # aside, its dead letter naming both (``events.parse_event``).
    number_comma: str | None = None
    # How the fleet sends a trouble code as a number (``events.DTC_NUMBER_FORMS``): uds, three bytes (687899 is
    # P0A7F), or obd, two bytes, as OBD dongles send Mode 03's (768 is P0300).
    dtc_numbers: str = DEFAULT_DTC_NUMBERS
    # The fleet's signal map (``vdoctor.signal_map``): sent name -> the name it is read as. Given as the path
    # of its file (JSON or CSV), read here, where the job is built: the map itself goes to the workers.
    signal_names: dict[str, str] = Field(default_factory=dict)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, given: object) -> object:
        # debug as well as DEBUG, as a user types it.
        return given.strip().upper() if isinstance(given, str) else given

    @field_validator("naive_ts_zone")
    @classmethod
    def _check_zone(cls, name: str | None) -> str | None:
        if name is not None:
            time_zone(name)
        return name

    @field_validator("number_comma")
    @classmethod
    def _check_number_comma(cls, given: str | None) -> str | None:
        return number_comma(given) if given is not None else None

    @field_validator("dtc_numbers")
    @classmethod
    def _check_dtc_numbers(cls, given: str) -> str:
        return dtc_numbers(given)

    @field_validator("signal_names", mode="before")
    @classmethod
    def _read_signal_map(cls, given: object) -> object:
        if isinstance(given, str | Path):
            return read_signal_map(given)
        if isinstance(given, Mapping):
            return check_signal_map(given)
        return given

    def runs_in_flight(self) -> int:
        """Worker threads of the operator's run pool: ``concurrency`` plus the extra runs."""
        if self.concurrency == 1:
            return 1  # inline: no pool
        extra = self.concurrency // EXTRA_RUNS_DIVISOR if self.extra_runs is None else self.extra_runs
        return self.concurrency + extra


class Settings(_Frozen):
    memory: MemorySettings = MemorySettings()
    model: ModelSettings = ModelSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    endpoint: EndpointSettings = EndpointSettings()
    runtime: RuntimeSettings = RuntimeSettings()

    def for_workers(self, withhold_passwords: bool = False) -> dict[str, Any]:
        """A plain dict to ship to Flink workers: everything but the API key (workers read it in open(),
        ``worker_settings``).

        ``withhold_passwords`` (a job submitted to a cluster, whose JobGraph the JobManager keeps in its
        blob and HA storage): the URLs of ``WITHHELD_URLS`` go without their passwords too, and each
        worker reads them whole from its own environment. A local run's workers are in this process.
        """
        data = self.model_dump(mode="json")
        data["endpoint"]["api_key"] = None
        if withhold_passwords:
            withheld = []
            for name in WITHHELD_URLS:
                section, field, _ = FIELDS[name]
                url = data[section][field]
                if url is not None and (bare := without_password(url)) != url:
                    data[section][field] = bare
                    withheld.append(name)
            if withheld:
                data[WITHHELD_KEY] = withheld
        return data

    def needs_api_key(self) -> bool:
        return "openai" in (self.model.chat, self.model.summarizer, self.embedding.kind)

    def api_key(self) -> SecretStr | None:
        """The key the models and the embedder call the endpoint with (``EndpointSettings.key``): the key
        file is read only when one of them is openai, so an offline run needs no readable key file."""
        return self.endpoint.key() if self.needs_api_key() else self.endpoint.api_key


# Flat name (a CLI flag's dest, or a load_settings keyword) -> (section, field, environment variable).
FIELDS: dict[str, tuple[str, str, str]] = {
    "memory_url": ("memory", "url", "VDOCTOR_MEMORY_URL"),
    "knowledge_url": ("memory", "knowledge_url", "VDOCTOR_KNOWLEDGE_URL"),
    "memory_enabled": ("memory", "enabled", "VDOCTOR_MEMORY_ENABLED"),
    "store_retry_s": ("memory", "store_retry_s", "VDOCTOR_STORE_RETRY_S"),
    "working_budget_tokens": ("memory", "working_budget_tokens", "VDOCTOR_WORKING_BUDGET_TOKENS"),
    "injection_budget_tokens": ("memory", "injection_budget_tokens", "VDOCTOR_INJECTION_BUDGET_TOKENS"),
    "extra_dtc_csv": ("memory", "extra_dtc_csv", "VDOCTOR_EXTRA_DTC_CSV"),
    "token_counter": ("memory", "token_counter", "VDOCTOR_TOKEN_COUNTER"),
    "model": ("model", "chat", "VDOCTOR_MODEL"),
    "summarizer": ("model", "summarizer", "VDOCTOR_SUMMARIZER"),
    "chat_model": ("model", "chat_model", "VDOCTOR_CHAT_MODEL"),
    "summary_model": ("model", "summary_model", "VDOCTOR_SUMMARY_MODEL"),
    "model_timeout_s": ("model", "timeout_s", "VDOCTOR_MODEL_TIMEOUT_S"),
    "model_max_attempts": ("model", "max_attempts", "VDOCTOR_MODEL_MAX_ATTEMPTS"),
    "embedder": ("embedding", "kind", "VDOCTOR_EMBEDDER"),
    "embed_model": ("embedding", "model", "VDOCTOR_EMBED_MODEL"),
    "embed_child_process": ("embedding", "child_process", "VDOCTOR_EMBED_CHILD_PROCESS"),
    "query_vector_file": ("embedding", "query_vector_file", "VDOCTOR_QUERY_VECTOR_FILE"),
    "openai_base_url": ("endpoint", "base_url", "OPENAI_BASE_URL"),
    "openai_api_key": ("endpoint", "api_key", API_KEY_ENV),
    "openai_api_key_file": ("endpoint", "api_key_file", "VDOCTOR_OPENAI_API_KEY_FILE"),
    "concurrency": ("runtime", "concurrency", "VDOCTOR_CONCURRENCY"),
    "extra_runs": ("runtime", "extra_runs", "VDOCTOR_EXTRA_RUNS"),
    "log_level": ("runtime", "log_level", "VDOCTOR_LOG_LEVEL"),
    "state_ttl_s": ("runtime", "state_ttl_s", "VDOCTOR_STATE_TTL_S"),
    "case_retry_s": ("runtime", "case_retry_s", "VDOCTOR_CASE_RETRY_S"),
    "deterministic": ("runtime", "deterministic", "VDOCTOR_DETERMINISTIC"),
    "malloc_trim_s": ("runtime", "malloc_trim_s", "VDOCTOR_MALLOC_TRIM_S"),
    "naive_ts_zone": ("runtime", "naive_ts_zone", NAIVE_TS_ZONE_ENV),
    "number_comma": ("runtime", "number_comma", NUMBER_COMMA_ENV),
    "dtc_numbers": ("runtime", "dtc_numbers", DTC_NUMBERS_ENV),
    "signal_names": ("runtime", "signal_names", SIGNAL_MAP_ENV),
}
# The environment variables, by flat name (for documentation and tests).
ENV_VARS: dict[str, str] = {name: var for name, (_, _, var) in FIELDS.items()}
# The URL settings (flat names) whose passwords a cluster job's workers read from their own environment.
WITHHELD_URLS = ("memory_url", "knowledge_url", "openai_base_url")
# The key of ``for_workers``'s dict naming the URLs shipped without their passwords.
WITHHELD_KEY = "withheld_passwords"


# (section, field) -> flat name: an invalid value is named as its user gave it.
_FLAT_NAMES = {(section, field): name for name, (section, field, _) in FIELDS.items()}


def _validate(values: dict[str, dict[str, Any]], given_as: Mapping[str, str] | None = None) -> Settings:
    """``Settings`` from nested values; an invalid value is a ``ConfigError`` naming its environment
    variable, and the flag that gave it (``given_as``: flat name -> flag) when one did."""
    try:
        return Settings.model_validate(values)
    except ValidationError as e:

        def named(loc: tuple[int | str, ...]) -> str | None:
            name = _FLAT_NAMES.get((str(loc[0]), str(loc[1]))) if len(loc) >= 2 else None
            if name is None:
                return None
            var = ENV_VARS[name]
            flag = (given_as or {}).get(name)
            return " ".join([f"{flag} ({var})" if flag else var, *(str(p) for p in loc[2:])])

        raise ConfigError(f"invalid settings: {describe_validation_error(e, named)}") from e


def _nest(flat: Mapping[str, Any], into: dict[str, dict[str, Any]]) -> None:
    for name, value in flat.items():
        if name not in FIELDS:
            raise ConfigError(f"unknown setting {name!r}; valid: {', '.join(FIELDS)}")
        section, field, _ = FIELDS[name]
        into.setdefault(section, {})[field] = value


def load_settings(env: Mapping[str, str], *, given_as: Mapping[str, str] | None = None, **flags: Any) -> Settings:
    """Build settings from flags (flat names of ``FIELDS``; ``None`` means unset), then the environment.

    ``given_as``: the command-line flag (``--concurrency``) of each flat name a flag gave, for the message
    of an invalid value; the others are named by their environment variable.
    """
    values: dict[str, dict[str, Any]] = {}
    _nest({name: env[var] for name, (_, _, var) in FIELDS.items() if env.get(var, "") != ""}, values)
    _nest({k: v for k, v in flags.items() if v is not None}, values)
    return _validate(values, given_as)


def with_overrides(settings: Settings, **flat: Any) -> Settings:
    """A copy of ``settings`` with some fields replaced (flat names of ``FIELDS``), validated again."""
    values = settings.model_dump()
    if settings.endpoint.api_key is not None:
        values["endpoint"]["api_key"] = settings.endpoint.api_key.get_secret_value()
    _nest(flat, values)
    return _validate(values)


def worker_settings(shipped: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    """The settings a worker runs with (its ``open()``): ``for_workers``'s dict with what it left out read
    from the worker's environment: each URL shipped without its password from the URL's variable, which
    must name the same URL, password included; then the API key (``with_secrets``)."""
    data = dict(shipped)
    withheld = data.pop(WITHHELD_KEY, [])
    settings = Settings.model_validate(data)
    restored: dict[str, str] = {}
    for name in withheld:
        section, field, var = FIELDS[name]
        bare = getattr(getattr(settings, section), field)
        # Stripped as the client's settings strip it (``_stripped_url``): a variable filled from a secret
        # file ends in a newline.
        given = _stripped_url(env.get(var, ""))
        if given == bare or without_password(given) != bare:
            found = f"it is {redact_url(given)}" if given else "it is not set"
            raise ConfigError(
                f"the password of the job's {var} ({redact_url(bare)}) is not shipped to a cluster's workers: "
                f"set {var} in every TaskManager's environment to that URL, password included ({found})"
            )
        restored[name] = given
    if restored:
        settings = with_overrides(settings, **restored)
    return with_secrets(settings, env)


def with_secrets(settings: Settings, env: Mapping[str, str]) -> Settings:
    """``settings`` with the API key read from ``env`` or from the key file (a worker's ``open()``).

    A key already present is kept. Without one, the variable is tried first,
    then the file; a model that needs a key and finds none fails with a
    ``ConfigError`` when it is built, naming both places.
    """
    if settings.endpoint.api_key is not None:
        return settings
    given = env.get(API_KEY_ENV, "")
    key = SecretStr(given) if given else settings.endpoint.key()
    if key is None:
        return settings
    endpoint = settings.endpoint.model_copy(update={"api_key": key})
    return settings.model_copy(update={"endpoint": endpoint})
