"""A user's mistake (a wrong file, a bad count) is a one-line ``vdoctor: ...`` error and exit 2, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import cli
from vdoctor.errors import KnowledgeError
from vdoctor.knowledge import load_pack
from vdoctor.stores import open_store

pytestmark = pytest.mark.unit


def one_line_error(capsys: pytest.CaptureFixture[str], *said: str) -> None:
    """What the command wrote to stderr is one line, ``vdoctor: ...``, holding each of ``said``."""
    err = capsys.readouterr().err
    assert err.startswith("vdoctor: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for part in said:
        assert part in err, err


@pytest.fixture
def memory(tmp_path: Path) -> str:
    """The URL of an empty long-term store that exists."""
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    open_store(url).close()
    return url


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "No such file or directory"),
        ("folder", "Is a directory"),
        (b'{"vin": "LFVAU2180ND238173"}\n', "line 1: not a diagnosis of the job's output (diagnoses.jsonl): no field"),
        (b"vin,code\n", "line 1: not a diagnosis"),
        (b"\xff\xfe{}\n", "not UTF-8 text"),
    ],
    ids=["missing", "folder", "other-json", "not-json", "not-utf8"],
)
def test_memory_health_names_a_diagnoses_file_it_cannot_read(
    content: bytes | str | None, said: str, memory: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = tmp_path / "diagnoses.jsonl"
    if content == "folder":
        given.mkdir()
    elif isinstance(content, bytes):
        given.write_bytes(content)
    plot = tmp_path / "health.png"
    assert cli.main(["memory", "health", "--diagnoses", str(given), "--memory", memory, "--plot", str(plot)]) == 2
    one_line_error(capsys, str(given), said)
    assert not plot.exists()


def test_memory_health_refuses_a_sample_below_one(
    memory: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = tmp_path / "diagnoses.jsonl"
    given.write_text("", encoding="utf-8")
    assert cli.main(["memory", "health", "--diagnoses", str(given), "--sample", "-1", "--memory", memory]) == 2
    one_line_error(capsys, "--sample must be at least 1, got -1")


def test_memory_health_says_which_file_it_wrote_its_plot_to(
    memory: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = tmp_path / "diagnoses.jsonl"
    given.write_text("", encoding="utf-8")
    health = ["memory", "health", "--diagnoses", str(given), "--memory", memory, "--plot"]
    # A name without an extension: matplotlib writes adir.png, and the command said "plot .../adir".
    assert cli.main([*health, str(tmp_path / "adir")]) == 0
    assert (tmp_path / "adir.png").read_bytes().startswith(b"\x89PNG") and not (tmp_path / "adir").exists()
    assert capsys.readouterr().out.splitlines()[-1].split() == ["plot", str(tmp_path / "adir.png")]
    # A folder that exists: the default name inside it.
    (tmp_path / "plots").mkdir()
    assert cli.main([*health, str(tmp_path / "plots")]) == 0
    assert (tmp_path / "plots" / "memory_health.png").read_bytes().startswith(b"\x89PNG")
    assert capsys.readouterr().out.splitlines()[-1].split() == ["plot", str(tmp_path / "plots" / "memory_health.png")]


def test_memory_health_refuses_a_plot_under_a_file_in_one_line(
    memory: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = tmp_path / "diagnoses.jsonl"
    given.write_text("", encoding="utf-8")
    blocker = tmp_path / "blocker"
    blocker.write_text("", encoding="utf-8")
    plot = blocker / "health.png"
    assert cli.main(["memory", "health", "--diagnoses", str(given), "--memory", memory, "--plot", str(plot)]) == 2
    one_line_error(capsys, f"--plot {plot}: {blocker} is a file, not a folder")


# -- code tables (knowledge load --csv, VDOCTOR_EXTRA_DTC_CSV) ----------------------


def test_a_code_table_with_a_byte_order_mark_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Excel's "CSV UTF-8" starts the file with a byte-order mark, which made the first column '\ufeffcode'.
    table = tmp_path / "codes.csv"
    table.write_bytes("code,description\nB1A2F,车身控制模块供电电压过低\n".encode("utf-8-sig"))
    monkeypatch.setenv("VDOCTOR_EMBEDDER", "hashing")
    assert cli.main(["knowledge", "load", "--csv", str(table), "--knowledge", "memory://"]) == 0
    assert "1 chunks (version 1)" in capsys.readouterr().out
    pack = load_pack(extra_csv=table)
    assert pack.get("B1A2F") is not None


def test_a_code_table_that_is_not_utf8_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "codes.csv"
    table.write_bytes("code,description\nP0420,Katalysator Wirkungsgrad zu gering (Bank 1) – prüfen\n".encode("cp1252"))
    monkeypatch.setenv("VDOCTOR_EMBEDDER", "hashing")
    assert cli.main(["knowledge", "load", "--csv", str(table), "--knowledge", "memory://"]) == 2
    one_line_error(capsys, f"cannot read code table {table}: not UTF-8 text")
    with pytest.raises(KnowledgeError, match="not UTF-8 text"):
        load_pack(extra_csv=table)


# -- alerts files (replay, check-events) ---------------------------------------------

VIN = "LFVAU2180ND238173"
# A file the kernel lists as a regular file and refuses to read (EIO at offset 0).
UNREADABLE = Path("/proc/self/mem")


class Sent:
    """A Kafka producer that keeps what it is sent (the broker's side of ``vdoctor replay``)."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def send(self, topic: str, key: bytes | None, value: bytes) -> Sent:
        self.values.append(value)
        return self

    def get(self, timeout: float) -> None:
        return None

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


def test_replay_sends_a_line_with_bytes_that_are_not_utf8_as_run_reads_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs import kafka_replay

    alerts = tmp_path / "alerts.jsonl"
    alerts.write_bytes(b'{"vin": "' + VIN.encode() + b'", "symptom": "\xb5\xe7\xb3\xd8"}\n')  # GBK, not UTF-8
    sent = Sent()
    monkeypatch.setattr(kafka_replay, "_producer", lambda bootstrap: sent)
    assert cli.main(["replay", "--alerts", str(alerts), "--bootstrap", "127.0.0.1:9092", "--quiet"]) == 0
    assert "1 of 1 events produced to vdoctor.alerts (1 keyed by VIN" in capsys.readouterr().out
    # One U+FFFD per maximal invalid run: b5 (a lone continuation byte), e7 b3 (a three-byte start cut short
    # by d8), d8 (a two-byte start followed by '"').
    assert sent.values == [f'{{"vin": "{VIN}", "symptom": "\ufffd\ufffd\ufffd"}}'.encode()]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        # inf paced nothing while the replay said it ran at a rate; nan sent every line at once.
        (["--rate", "inf"], "--rate must be a finite number of events per second above 0, got inf"),
        (["--rate", "nan"], "--rate must be a finite number of events per second above 0, got nan"),
        (["--rate", "-1"], "--rate must be a finite number of events per second above 0, got -1"),
        # A name the broker refuses was only found out at the first send, after the producer had connected.
        (["--topic", "vdoctor alerts"], "--topic: topic names use letters, digits"),
        (["--topic", ".."], "--topic: topic names use letters, digits"),
        (["--topic", "a" * 250], "--topic: topic names use letters, digits"),
    ],
)
def test_replay_refuses_a_bad_rate_or_topic_before_it_sends_anything(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs import kafka_replay

    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text(f'{{"vin": "{VIN}", "symptom": "x"}}\n', encoding="utf-8")
    sent = Sent()
    monkeypatch.setattr(kafka_replay, "_producer", lambda bootstrap: sent)
    assert cli.main(["replay", "--alerts", str(alerts), "--bootstrap", "127.0.0.1:9092", "--quiet", *flags]) == 2
    one_line_error(capsys, message)
    assert sent.values == []


def test_replay_ends_a_line_where_the_job_does_not_inside_an_alert_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # U+2028, U+2029 and U+0085 are legal raw in a JSON string; str.splitlines ended a line at each, and the
    # event went out as two broken records. CRLF and a lone CR end a line, as the job's file source ends one.
    from jobs import kafka_replay

    texts = ["a\u2028b", "c\u2029d", "e\u0085f\x0bg\x1ch"]
    events = [json.dumps({"vin": VIN, "alert_text": t}, ensure_ascii=False) for t in texts]
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text(events[0] + "\r\n" + events[1] + "\r" + events[2] + "\n", encoding="utf-8", newline="")
    sent = Sent()
    monkeypatch.setattr(kafka_replay, "_producer", lambda bootstrap: sent)
    assert cli.main(["replay", "--alerts", str(alerts), "--bootstrap", "127.0.0.1:9092", "--quiet"]) == 0
    assert [json.loads(v)["alert_text"] for v in sent.values] == texts


def test_replay_keys_a_line_that_starts_with_a_byte_order_mark_by_its_vin() -> None:
    # A Windows file's first line went out without a key, on any partition, ahead of or behind its vehicle's others.
    from jobs.kafka_replay import vin_key

    assert vin_key(f'\ufeff{{"vin": "{VIN}"}}') == VIN.encode()


def test_replay_takes_a_legal_topic_and_a_finite_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs import kafka_replay

    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text(f'{{"vin": "{VIN}", "symptom": "x"}}\n', encoding="utf-8")
    sent = Sent()
    monkeypatch.setattr(kafka_replay, "_producer", lambda bootstrap: sent)
    argv = ["--topic", "fleet_A.alerts-v2", "--rate", "1000"]
    assert cli.main(["replay", "--alerts", str(alerts), "--bootstrap", "127.0.0.1:9092", "--quiet", *argv]) == 0
    assert "1 of 1 events produced to fleet_A.alerts-v2" in capsys.readouterr().out
    assert len(sent.values) == 1


@pytest.mark.skipif(not UNREADABLE.is_file(), reason="needs Linux's /proc")
@pytest.mark.parametrize("command", [["check-events"], ["replay", "--bootstrap", "127.0.0.1:9092"]])
def test_an_alerts_file_that_cannot_be_read_is_a_one_line_error(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*command, "--alerts", str(UNREADABLE)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot read {'the alerts file ' if command[0] == 'replay' else ''}" in err
    assert str(UNREADABLE) in err and "Input/output error" in err


@pytest.mark.parametrize(
    ("var", "flag", "value"),
    [
        ("VDOCTOR_NAIVE_TS_ZONE", "--naive-ts-zone", "Mars/Base"),
        ("VDOCTOR_NUMBER_COMMA", "--number-comma", "european"),
        ("VDOCTOR_DTC_NUMBERS", "--dtc-numbers", "hex"),
        ("VDOCTOR_SIGNAL_NAMES", "--signal-names", "/no/such/map.json"),
    ],
)
def test_check_events_names_a_bad_setting_by_its_variable_or_by_the_flag_that_gave_it(
    var: str, flag: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text("{}\n", encoding="utf-8")
    monkeypatch.setenv(var, value)
    assert cli.main(["check-events", "--alerts", str(alerts)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vdoctor check-events: {var}: ") and err.count("\n") == 1, err
    # The flag wins over the variable, and is named with it, as the other commands name it.
    assert cli.main(["check-events", "--alerts", str(alerts), flag, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vdoctor check-events: {flag} ({var}): ") and err.count("\n") == 1, err


# -- output folders (run, eval ab, package --out) ------------------------------------


@pytest.mark.parametrize("below", ["", "sub"], ids=["the-folder", "a-folder-above"])
@pytest.mark.parametrize("command", ["run", "eval ab", "package"])
def test_an_output_folder_that_is_a_file_is_a_one_line_error(
    command: str, below: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alerts = tmp_path / "alerts.jsonl"
    alerts.write_text("{}\n", encoding="utf-8")
    jar = tmp_path / "connector.jar"
    jar.write_bytes(b"PK")
    taken = tmp_path / "out"
    taken.write_text("a report someone keeps\n", encoding="utf-8")
    out = taken / below if below else taken
    given = ["--connector-jar", str(jar)] if command == "package" else ["--alerts", str(alerts)]
    assert cli.main([*command.split(), *given, "--out", str(out)]) == 2
    one_line_error(capsys, f"--out {out}: {taken} is a file, not a folder")
    assert taken.read_text(encoding="utf-8") == "a report someone keeps\n"


# -- counts (memory reembed, retokenize) ------------------------------------------


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["reembed", "--batch", "0"], "--batch must be at least 1, got 0"),
        (["reembed", "--limit", "-5"], "--limit must be at least 1, got -5"),
        (["retokenize", "--batch", "-1"], "--batch must be at least 1, got -1"),
    ],
)
def test_a_count_below_one_is_refused_before_the_store_is_touched(
    command: list[str], said: str, memory: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VDOCTOR_EMBEDDER", "hashing")
    assert cli.main(["memory", *command, "--memory", memory]) == 2
    one_line_error(capsys, said)


def _written_case(url: str, vin: str = "LFVAU2180ND238173") -> None:
    """One case of ``vin`` in the store, concluded 2026-11-01, as the engine writes it."""
    from datetime import UTC, datetime

    from tests.unit.test_engine import Harness, alert
    from vdoctor.diagnosis import DiagnosisEngine
    from vdoctor.embedders.hashing import HashingEmbedder
    from vdoctor.models.offline import OfflineModel

    store = open_store(url)
    try:
        h = Harness(DiagnosisEngine(store=store, model=OfflineModel(), embedder=HashingEmbedder(), pack=load_pack()))
        at = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
        h.diagnose(alert("e-1", at, signals={"cell_voltage_diff_mv": 187}, vin=vin))
    finally:
        store.close()


@pytest.mark.parametrize(
    "written", ["lfvau2180nd238173", " LFVAU2180ND238173 ", "ＬＦＶＡＵ２１８０ＮＤ２３８１７３", "LFVAU-2180N-D238173"]
)
def test_a_vin_is_read_as_the_job_reads_it(written: str, memory: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A VIN in lower case (or with a blank, or full-width) found no records, with exit 0, and `forget` set
    none invalid: a scrapped vehicle stayed recallable (found by an audit)."""
    _written_case(memory)
    assert cli.main(["memory", "history", "--vin", written, "--memory", memory]) == 0
    assert "LFVAU2180ND238173-20261101T080000" in capsys.readouterr().out
    assert cli.main(["memory", "forget", "--vin", written, "--change", "scrapped", "--memory", memory]) == 0
    assert capsys.readouterr().out.startswith("LFVAU2180ND238173: 1 records marked invalid")


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["history", "--vin", "LFVAU2180ND23817"], "--vin 'LFVAU2180ND23817' is not a VIN"),
        (["forget", "--vin", "xyz", "--change", "scrapped"], "--vin 'xyz' is not a VIN"),
        (["recall", "--vin", "LFVAU2180ND238173", "--symptom", "x", "--as-of", "0001-01-01T00:00:00+01:00"],
         "is not between 2000 and 2199"),
        (["recall", "--vin", "LFVAU2180ND238173", "--symptom", "x", "--as-of", "9999-12-31T23:30:00-01:00"],
         "is not between 2000 and 2199"),
        (["forget", "--vin", "LFVAU2180ND238173", "--change", "scrapped", "--at", "1970-01-01T00:00:00Z"],
         "is not between 2000 and 2199"),
        (["recall", "--vin", "LFVAU2180ND238173", "--symptom", "x", "--codes", "P0A7F", "battery"],
         "--codes 'battery' is not a trouble code"),
    ],
    ids=["short-vin", "not-a-vin", "year-0", "year-9999", "year-1970", "not-a-code"],
)  # fmt: skip
def test_a_vin_time_or_code_the_job_would_not_read_is_a_one_line_error(
    command: list[str], said: str, memory: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["memory", *command, "--memory", memory]) == 2
    one_line_error(capsys, said)


def test_recall_reads_codes_as_the_job_reads_an_alerts(
    memory: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--codes P0A7F-1B` (a gateway's form) was recalled with as written: the query held no definition of
    P0A7F, and another vehicle's cases ranked otherwise than for the job's session (found by an audit)."""
    from vdoctor.memory.recall import SessionRecall

    _written_case(memory)
    asked: list[list[str]] = []
    for_alert = SessionRecall.for_alert

    def recording(self: SessionRecall, vin: str, series: str, text: str, codes: list[str], *rest: object) -> object:
        asked.append(list(codes))
        return for_alert(self, vin, series, text, codes, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(SessionRecall, "for_alert", recording)
    answers = []
    for codes in (["P0A7F"], ["P0A7F-1B"], ["DTC P0A7F", "p0a7f", "SPN 1569 FMI 31"]):
        args = ["memory", "recall", "--vin", "LFVAU2180ND238173", "--symptom", "电池包单体压差过大", "--json"]
        assert cli.main([*args, "--codes", *codes, "--as-of", "2026-11-05T00:00:00Z", "--memory", memory]) == 0
        answers.append(json.loads(capsys.readouterr().out))
    assert asked == [["P0A7F"], ["P0A7F"], ["P0A7F", "SPN1569-FMI31"]]
    assert answers[0] == answers[1] and answers[0]["own"]


@pytest.mark.parametrize("plot", ["h.txt", "h.jpeg"])
def test_memory_health_names_a_plot_it_cannot_write_before_any_work(
    plot: str, memory: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plot named .txt printed the whole report, then failed with matplotlib's traceback (an audit)."""
    given = tmp_path / "diagnoses.jsonl"
    given.write_text("")
    args = ["memory", "health", "--diagnoses", str(given), "--plot", str(tmp_path / plot), "--memory", memory]
    assert cli.main(args) == 2
    one_line_error(capsys, "a plot is written as .png, .svg, .pdf")


def test_forget_run_again_with_an_earlier_time_moves_the_invalidation_back(
    memory: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`forget` run first without --at (now), then with the time of the change: 0 records, and the cases stayed
    recalled until now (found by an audit)."""
    _written_case(memory)
    forget = ["memory", "forget", "--vin", "LFVAU2180ND238173", "--change", "scrapped", "--memory", memory]
    assert cli.main(forget) == 0
    capsys.readouterr()
    assert cli.main([*forget, "--at", "2026-11-03T00:00:00Z"]) == 0
    assert capsys.readouterr().out.startswith("LFVAU2180ND238173: 1 records marked invalid")
    assert cli.main(["memory", "history", "--vin", "LFVAU2180ND238173", "--json", "--memory", memory]) == 0
    [record] = json.loads(capsys.readouterr().out)
    assert record["invalid_ts"] == "2026-11-03T00:00:00Z"


def test_knowledge_search_refuses_a_missing_file_and_says_when_nothing_matches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped path made an empty database there, and a search with no hits printed nothing, exit 0 (an
    audit)."""
    typo = tmp_path / "knowlege.db"
    assert cli.main(["knowledge", "search", "--query", "P0420", "--knowledge", f"sqlite:///{typo}"]) == 2
    one_line_error(capsys, f"no such file: {typo}", "vdoctor knowledge load")
    assert not typo.exists()
    monkeypatch.setenv("VDOCTOR_EMBEDDER", "hashing")
    assert cli.main(["knowledge", "search", "--query", "P0420 catalyst", "--knowledge", "memory://"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "no chunk matches (0 chunks in the knowledge base)" in captured.err


def test_run_kafka_tells_which_brokers_do_not_answer() -> None:
    """`run --kafka` at an address where no broker listens waited in silence (an audit): it now warns first."""
    import socket

    from jobs.cli_jobs import silent_brokers

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        live = f"127.0.0.1:{listening.getsockname()[1]}"
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{closed.getsockname()[1]}"  # (bound, not listening: refused)
            assert silent_brokers(f"{live},{dead}", timeout_s=1) == [dead]
            assert silent_brokers(live, timeout_s=1) == []
            assert silent_brokers("no-such-host.invalid:9092", timeout_s=1) == ["no-such-host.invalid:9092"]
