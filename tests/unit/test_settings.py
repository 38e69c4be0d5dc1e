"""Settings: typed sections, flags over environment, and the API key kept off the wire."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from vdoctor.errors import ConfigError
from vdoctor.settings import (
    ENV_VARS,
    FIELDS,
    Settings,
    load_settings,
    with_overrides,
    with_secrets,
    worker_settings,
)

pytestmark = pytest.mark.unit

KEY = "sk-settings-test-5a5a5a5a"


def test_environment_fills_the_typed_sections_and_flags_win() -> None:
    env = {"VDOCTOR_MEMORY_URL": "sqlite:///env.db", "VDOCTOR_MODEL": "openai", "VDOCTOR_CONCURRENCY": "8"}
    settings = load_settings(env, memory_url="sqlite:///flag.db", concurrency=None)
    assert settings.memory.url == "sqlite:///flag.db"
    assert settings.model.chat == "openai" and settings.runtime.concurrency == 8
    assert settings.memory.working_budget_tokens == 4000 and settings.memory.injection_budget_tokens == 800


def test_every_environment_variable_lands_in_its_field() -> None:
    for name, (section, field, var) in FIELDS.items():
        assert ENV_VARS[name] == var
        assert field in type(getattr(Settings(), section)).model_fields, name


def test_a_bad_value_or_name_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="VDOCTOR_MODEL"):
        load_settings({"VDOCTOR_MODEL": "gpt-5"})
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        load_settings({}, colour="blue")
    with pytest.raises(ConfigError, match="VDOCTOR_WORKING_BUDGET_TOKENS"):
        load_settings({"VDOCTOR_WORKING_BUDGET_TOKENS": "10"})


def test_an_invalid_value_is_named_by_its_variable_and_by_the_flag_that_gave_it() -> None:
    import argparse

    from jobs.job_settings import domain_settings

    # Not the field's path inside the settings (runtime.concurrency), which no user can set.
    with pytest.raises(ConfigError, match=r"^invalid settings: VDOCTOR_CONCURRENCY: Input should be greater"):
        load_settings({"VDOCTOR_CONCURRENCY": "0"})
    flags = argparse.Namespace(concurrency=0, extra_runs=None)
    with pytest.raises(ConfigError, match=r"^invalid settings: --concurrency \(VDOCTOR_CONCURRENCY\): Input should"):
        domain_settings(flags, env={"VDOCTOR_CONCURRENCY": "8"})
    # A valid flag does not take the name of an invalid variable.
    with pytest.raises(ConfigError, match=r"^invalid settings: VDOCTOR_EXTRA_RUNS: Input should be greater"):
        domain_settings(argparse.Namespace(concurrency=4), env={"VDOCTOR_EXTRA_RUNS": "-1"})


@pytest.mark.parametrize(
    ("var", "value", "said"),
    [
        # Infinity (or a number past a float's range, read as infinity) used to pass and fail inside the job:
        # the session state's TTL in whole milliseconds, the trimmer thread's wait.
        ("VDOCTOR_STATE_TTL_S", "inf", "finite number"),
        ("VDOCTOR_STATE_TTL_S", "1e400", "finite number"),
        ("VDOCTOR_STATE_TTL_S", "31536001", "less than or equal to 31536000"),
        ("VDOCTOR_MALLOC_TRIM_S", "inf", "finite number"),
        ("VDOCTOR_MALLOC_TRIM_S", "1e300", "less than or equal to 86400"),
        ("VDOCTOR_STORE_RETRY_S", "inf", "finite number"),
        ("VDOCTOR_STORE_RETRY_S", "86401", "less than or equal to 86400"),
        ("VDOCTOR_MODEL_TIMEOUT_S", "inf", "finite number"),
        ("VDOCTOR_MODEL_TIMEOUT_S", "nan", "finite number"),
        ("VDOCTOR_MODEL_TIMEOUT_S", "3601", "less than or equal to 3600"),
    ],
)
def test_a_time_setting_that_is_not_finite_or_too_large_is_refused_by_name(var: str, value: str, said: str) -> None:
    with pytest.raises(ConfigError, match=rf"^invalid settings: {var}: Input should be .*{said}"):
        load_settings({var: value})


def test_the_largest_time_settings_are_taken() -> None:
    settings = load_settings(
        {
            "VDOCTOR_STATE_TTL_S": "31536000",
            "VDOCTOR_MALLOC_TRIM_S": "86400",
            "VDOCTOR_STORE_RETRY_S": "86400",
            "VDOCTOR_MODEL_TIMEOUT_S": "3600",
        }
    )
    assert settings.runtime.state_ttl_s == 365 * 24 * 3600 and settings.runtime.malloc_trim_s == 24 * 3600
    assert settings.memory.store_retry_s == 24 * 3600 and settings.model.timeout_s == 3600


def test_off_and_auto_are_read_in_any_case(tmp_path: Path) -> None:
    from vdoctor.assembly import query_vector_file

    memory = {"VDOCTOR_MEMORY_URL": f"sqlite:///{tmp_path / 'm.db'}"}
    # OFF made a file named OFF: only lowercase off turned the file off.
    for off in ("OFF", "Off", " off"):
        assert query_vector_file(load_settings({"VDOCTOR_QUERY_VECTOR_FILE": off, **memory})) is None
    auto = load_settings({"VDOCTOR_QUERY_VECTOR_FILE": "AUTO", **memory})
    assert query_vector_file(auto) == str(tmp_path / "m.db") + ".query-vectors"
    # A path keeps its case.
    assert load_settings({"VDOCTOR_QUERY_VECTOR_FILE": "./OFF"}).embedding.query_vector_file == "./OFF"


def test_log_levels_are_read_in_any_case() -> None:
    # debug was refused: only DEBUG was taken.
    assert load_settings({"VDOCTOR_LOG_LEVEL": "debug"}).runtime.log_level == "DEBUG"
    assert load_settings({"VDOCTOR_LOG_LEVEL": "Warning"}).runtime.log_level == "WARNING"
    with pytest.raises(ConfigError, match="^invalid settings: VDOCTOR_LOG_LEVEL: Input should be 'DEBUG'"):
        load_settings({"VDOCTOR_LOG_LEVEL": "verbose"})


def test_the_zone_of_naive_event_times_is_checked_when_set() -> None:
    assert load_settings({}).runtime.naive_ts_zone is None
    assert load_settings({"VDOCTOR_NAIVE_TS_ZONE": "Asia/Shanghai"}).runtime.naive_ts_zone == "Asia/Shanghai"
    assert load_settings({}, naive_ts_zone="+08:00").runtime.naive_ts_zone == "+08:00"
    with pytest.raises(ConfigError, match="VDOCTOR_NAIVE_TS_ZONE.*'Beijing' is no time zone"):
        load_settings({"VDOCTOR_NAIVE_TS_ZONE": "Beijing"})


def test_how_the_fleets_numbers_use_a_comma_is_checked_when_set() -> None:
    assert load_settings({}).runtime.number_comma is None
    assert load_settings({"VDOCTOR_NUMBER_COMMA": " Decimal"}).runtime.number_comma == "decimal"
    assert load_settings({}, number_comma="thousands").runtime.number_comma == "thousands"
    with pytest.raises(ConfigError, match="VDOCTOR_NUMBER_COMMA.*must be decimal .* or thousands"):
        load_settings({"VDOCTOR_NUMBER_COMMA": "comma"})


def test_how_the_fleet_sends_codes_as_numbers_is_checked() -> None:
    assert load_settings({}).runtime.dtc_numbers == "uds"
    assert load_settings({"VDOCTOR_DTC_NUMBERS": " OBD"}).runtime.dtc_numbers == "obd"
    assert load_settings({}, dtc_numbers="uds").runtime.dtc_numbers == "uds"
    with pytest.raises(ConfigError, match="VDOCTOR_DTC_NUMBERS.*must be uds .* or obd"):
        load_settings({"VDOCTOR_DTC_NUMBERS": "j1939"})


def test_overrides_are_validated_and_keep_the_key() -> None:
    settings = load_settings({"OPENAI_API_KEY": KEY})
    changed = with_overrides(settings, memory_enabled=False, memory_url="sqlite:///x.db")
    assert changed.memory.enabled is False and changed.memory.url == "sqlite:///x.db"
    assert changed.endpoint.api_key is not None and changed.endpoint.api_key.get_secret_value() == KEY
    with pytest.raises(ConfigError):
        with_overrides(settings, concurrency=0)


def test_what_is_shipped_to_workers_holds_no_key() -> None:
    settings = load_settings({"OPENAI_API_KEY": KEY, "VDOCTOR_MODEL": "openai"})
    shipped = settings.for_workers()
    assert KEY not in repr(shipped) and KEY not in pickle.dumps(shipped).decode("latin-1")
    assert KEY not in repr(settings) and KEY not in settings.model_dump_json()
    restored = Settings.model_validate(shipped)
    assert restored.endpoint.api_key is None and restored.model.chat == "openai"


def test_a_worker_reads_the_key_from_its_environment_or_a_key_file(tmp_path: Path) -> None:
    shipped = Settings.model_validate(load_settings({"OPENAI_API_KEY": KEY}).for_workers())
    from_env = with_secrets(shipped, {"OPENAI_API_KEY": KEY})
    assert from_env.endpoint.api_key is not None and from_env.endpoint.api_key.get_secret_value() == KEY
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n", encoding="utf-8")
    with_file = with_secrets(with_overrides(shipped, openai_api_key_file=str(key_file)), {})
    assert with_file.endpoint.api_key is not None and with_file.endpoint.api_key.get_secret_value() == KEY
    assert with_secrets(shipped, {}).endpoint.api_key is None  # none anywhere: the model says so when built
    with pytest.raises(ConfigError, match="cannot read the API key file") as err:
        with_secrets(with_overrides(shipped, openai_api_key_file=str(tmp_path / "missing")), {})
    assert KEY not in str(err.value)


def test_the_pickled_operator_carries_no_key() -> None:
    import cloudpickle  # what PyFlink pickles operators with

    from operators.diagnosis import DiagnosisFunction

    settings = load_settings({"OPENAI_API_KEY": KEY, "VDOCTOR_MODEL": "openai"})
    blob = cloudpickle.dumps(DiagnosisFunction(settings.for_workers()))
    assert KEY.encode() not in blob


def test_repr_and_str_mask_a_url_password_and_the_code_still_gets_it() -> None:
    url = "mysql://u:Pw0rdSECRET@db.example:3306/vd"
    settings = load_settings(
        {"VDOCTOR_MEMORY_URL": url, "OPENAI_BASE_URL": "https://proxy:Pr0xySECRET@llm.example/v1"},
        knowledge_url="memory://k:Kn0wSECRET@fe:9030/kb",
    )
    for shown in (repr(settings), str(settings), repr(settings.memory), str(settings.endpoint)):
        assert "SECRET" not in shown
    assert "url='mysql://u:***@db.example:3306/vd'" in repr(settings)
    assert "base_url='https://proxy:***@llm.example/v1'" in str(settings)
    # The value the stores open, and the one shipped to workers, are the URL as given.
    assert settings.memory.url == url and settings.for_workers()["memory"]["url"] == url
    assert with_overrides(settings, concurrency=2).memory.url == url


# -- a cluster job's URLs: passwords stay out of the JobGraph ---------------------------------------------

# (No knowledge backend takes a password yet; a knowledge URL is withheld from the workers whatever its scheme.)
SECRET_URLS = {
    "VDOCTOR_MEMORY_URL": "mysql://u:Pw0rdSECRET@db.example:3306/vd",
    "VDOCTOR_KNOWLEDGE_URL": "memory://k:Kn0wSECRET@fe:9030/kb",
    "OPENAI_BASE_URL": "https://proxy:Pr0xySECRET@llm.example/v1",
}


def test_a_cluster_jobs_pickled_operator_carries_no_url_password() -> None:
    import cloudpickle

    from operators.diagnosis import DiagnosisFunction

    settings = load_settings({**SECRET_URLS, "OPENAI_API_KEY": KEY, "VDOCTOR_MODEL": "openai"})
    blob = cloudpickle.dumps(DiagnosisFunction(settings.for_workers(withhold_passwords=True)))
    assert b"SECRET" not in blob and KEY.encode() not in blob
    assert b"mysql://u@db.example:3306/vd" in blob  # the URL goes, its user included
    # A local run's workers are in this process: its operator keeps the URLs whole.
    assert b"Pw0rdSECRET" in cloudpickle.dumps(DiagnosisFunction(settings.for_workers()))


def test_a_cluster_worker_reads_the_urls_whole_from_its_environment() -> None:
    settings = load_settings(SECRET_URLS)
    shipped = settings.for_workers(withhold_passwords=True)
    restored = worker_settings(shipped, {**SECRET_URLS, "OPENAI_API_KEY": KEY})
    assert restored.memory.url == SECRET_URLS["VDOCTOR_MEMORY_URL"]
    assert restored.memory.knowledge_url == SECRET_URLS["VDOCTOR_KNOWLEDGE_URL"]
    assert restored.endpoint.base_url == SECRET_URLS["OPENAI_BASE_URL"]
    assert restored.endpoint.api_key is not None and restored.endpoint.api_key.get_secret_value() == KEY
    # URLs without a password go as they are, and need nothing from the worker's environment.
    plain = load_settings({"VDOCTOR_MEMORY_URL": "mysql://u@db:3306/vd"}).for_workers(withhold_passwords=True)
    assert worker_settings(plain, {}).memory.url == "mysql://u@db:3306/vd"
    # A variable filled from a secret file ends in a newline, on the client and on the workers alike.
    lined = {k: v + "\n" for k, v in SECRET_URLS.items()}
    shipped = load_settings(lined).for_workers(withhold_passwords=True)
    assert worker_settings(shipped, lined).memory.url == SECRET_URLS["VDOCTOR_MEMORY_URL"]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("", "it is not set"),
        ("mysql://u@db.example:3306/vd", "it is mysql://u@db.example:3306/vd"),
        ("mysql://u:OtherSECRET@db2.example:3306/vd", "it is mysql://u:***@db2.example:3306/vd"),
    ],
)
def test_a_cluster_worker_without_the_url_in_its_environment_says_where_to_set_it(given: str, said: str) -> None:
    shipped = load_settings({"VDOCTOR_MEMORY_URL": SECRET_URLS["VDOCTOR_MEMORY_URL"]}).for_workers(True)
    with pytest.raises(ConfigError) as err:
        worker_settings(shipped, {"VDOCTOR_MEMORY_URL": given} if given else {})
    message = str(err.value)
    assert "VDOCTOR_MEMORY_URL in every TaskManager's environment" in message and said in message
    assert "SECRET" not in message


@pytest.mark.parametrize("password", ["Hunter2/Secret", "Hunter2?Secret", "Hunter2#Secret"])
def test_an_endpoint_password_that_ends_the_urls_authority_is_refused_without_showing_it(password: str) -> None:
    # The HTTP client would read "Hunter2" as the port and quote it when a model is built, in a worker.
    url = f"https://bob:{password}@gw.example/v1"
    with pytest.raises(ConfigError) as err:
        load_settings({"OPENAI_BASE_URL": url, "VDOCTOR_MODEL": "openai"})
    message = str(err.value)
    assert message.startswith("invalid settings: OPENAI_BASE_URL: https://gw.example/v1: the user or password")
    assert "%2F" in message and "\n" not in message
    # Nor does the ValidationError it is raised from, which a traceback shows.
    for shown in (message, str(err.value.__cause__)):
        assert "Hunter2" not in shown and "Secret" not in shown
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL") as err:
        load_settings({}, openai_base_url=url)
    assert "Hunter2" not in str(err.value) and "Secret" not in str(err.value.__cause__)
    # A worker given such a URL for a withheld password refuses it the same way.
    shipped = load_settings({"OPENAI_BASE_URL": "https://bob:good@gw.example/v1"}).for_workers(True)
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL") as err:
        worker_settings(shipped, {"OPENAI_BASE_URL": url})
    assert "Hunter2" not in str(err.value) and "Secret" not in str(err.value.__cause__)
    # Percent-encoded, the password is taken as it is.
    encoded = "https://bob:Hunter2%2FSecret@gw.example/v1"
    assert load_settings({"OPENAI_BASE_URL": encoded}).endpoint.base_url == encoded
