"""Long tasks: full context against our working memory (seed 003's 23-step incident).

Part A, a scripted 23-step diagnosis: the conclusion drawn at step 4 (a
corroded harness connector) is voided at step 9, and step 17 must still know
it is void. Three contexts are fed the same steps:

- full:    every earlier step verbatim (what the seed 003 team started with);
- window:  the newest 6 steps verbatim, nothing else (plain truncation);
- working: our L1 working memory (4000-token budget, 6 verbatim rounds, 70%
           trigger, rolling summary, key facts last).

Part B, a 40-alert session of one vehicle through the real diagnosis engine
and offline model (``DiagnosisEngine``), full context against working memory.

Scoring (entity loss, seed 003): every number and entity that appears in
the task's tool results and answers (the observation and the answer of each
step; in part B the tool messages and final answers of each alert's run) is
extracted mechanically by ``vdoctor.evaluation.entities`` (every JSON scalar,
URI, ISO time, token holding a digit and snake_case name; it knows no
scenario and shares no code with the key-fact extractor that working memory
uses: see that module). At each step, every entity seen in an earlier step is
looked up in the context the model is given; the entity-loss rate is the
share of those (step, entity) pairs not found. Part B also runs a plain
window (the newest 6 rounds verbatim, nothing else). The chit-chat between
facts carries no numbers: it stands for text with nothing worth keeping.

    .venv/bin/python bench/long_task.py [--budget 4000] [--alerts 40] [--plot out/bench/long_task.png]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import vdoctor.diagnosis as diagnosis_module
from vdoctor.agent.prompt import SYSTEM_PROMPT
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.evaluation.entities import entities, present
from vdoctor.events import AlertEvent
from vdoctor.knowledge import load_pack
from vdoctor.lines import KeyFact
from vdoctor.memory.facts import extract_tool_facts
from vdoctor.memory.session import DedupState, SessionState
from vdoctor.memory.working import KEEP_ROUNDS, Round, WorkingMemory, WorkingState
from vdoctor.models.base import ChatModel, ChatResponse, Message, ToolSpec
from vdoctor.models.offline import OfflineModel
from vdoctor.stores import open_store
from vdoctor.tokens import EstimatingCounter, TokenCounter

VIN = "LSVAU2180N2183294"
T0 = datetime(2026, 11, 1, 8, 0, 0, tzinfo=UTC)
UNBOUNDED = 10**9


def _ts(step: int) -> str:
    return f"{T0 + timedelta(minutes=7 * step):%Y-%m-%dT%H:%M:%SZ}"


def _uri(signal: str, step: int) -> str:
    return f"signal://{VIN}/{signal}@{_ts(step)}"


# -- part A: the scripted 23-step task -------------------------------------------------

VOID_TEXT = "step-4 conclusion (harness connector corrosion) is void"
EXCLUDED_TEXT = "suspected the harness connector, ruled out"


def _history(signal: str, step: int, values: list[float]) -> str:
    readings = [
        {"value": v, "ts": _ts(step - len(values) + i), "uri": _uri(signal, step - len(values) + i)}
        for i, v in enumerate(values)
    ]
    return json.dumps({"signal": signal, "readings": readings})


_CHATTER = (
    "the pattern is consistent with what we saw before, and we should keep checking the remaining "
    "subsystems one by one before drawing any final conclusion",
    "the operator confirmed again that the vehicle is parked and that the readings are being collected "
    "as usual, so nothing changes the plan for now",
    "there is no sign of a thermal event and the owner has been told that the check is still running, "
    "which he acknowledged politely",
)


def _filler(step: int) -> str:
    # Long, low-value narrative of the kind a real model writes between facts; no numbers in it.
    return " ".join(f"Thinking it over: {_CHATTER[(step + i) % 3]}; {_CHATTER[(step + i + 1) % 3]}." for i in range(3))


def scripted_steps() -> list[Round]:
    """The 23 steps: each step's observation (alert, tool result, workshop note) and the agent's answer."""
    steps: list[Round] = []

    def add(step: int, user: str, assistant: str) -> None:
        steps.append(Round(ts=_ts(step), user=user, assistant=assistant))

    add(
        1,
        "电池包单体压差过大 P0A7F cell_voltage_diff_mv=187 pack_temp_c=41.5; 已开工单WO-20931",
        "Opening the diagnosis; looking up P0A7F first. " + _filler(1),
    )
    lookup = {"codes": [{"code": "P0A7F", "definition": "Hybrid/EV battery pack deterioration", "family": "battery",
                         "source": "pack"}], "unknown": []}  # fmt: skip
    add(2, json.dumps(lookup), "P0A7F is battery pack deterioration; reading the cell voltage history. " + _filler(2))
    add(
        3,
        _history("cell_voltage_diff_mv", 3, [62, 88, 121, 150, 187]),
        f"The spread grows from 62 to 187 mV; evidence {_uri('cell_voltage_diff_mv', 2)}. " + _filler(3),
    )
    add(
        4,
        "connector inspection photo: green residue on the harness connector X12",
        "Conclusion: harness connector corrosion causes the imbalance, confidence 0.6. " + _filler(4),
    )
    for step in range(5, 9):
        add(
            step,
            _history("pack_temp_c", step, [40.1, 40.8, 41.5, 46.5]),
            f"Pack temperature reached 46.5℃ at {_ts(step)}; no thermal event. " + _filler(step),
        )
    add(
        9,
        "harness continuity test: 0.2 Ω on all 96 sense lines, within spec; connector cleaned, spread unchanged",
        f"The {VOID_TEXT}: continuity is normal and cleaning changed nothing. "
        f"So we {EXCLUDED_TEXT}. Next: cell self-discharge. " + _filler(9),
    )
    for step in range(10, 23):
        add(
            step,
            _history("cell_voltage_diff_mv", step, [187, 190, 195, 201])
            if step % 2
            else f"self-discharge test {step}: cell 37 lost 3.2 s of balancing time per hour",
            "Cell 37 keeps drifting; self-discharge is likely. " + _filler(step),
        )
    add(
        23,
        "final check: cell 37 open-circuit voltage 3.21 V vs pack mean 3.29 V",
        "Conclusion: cell 37 self-discharge, confidence 0.85; replace module 4. " + _filler(23),
    )
    return steps


@dataclass
class Series:
    name: str
    context_tokens: list[int] = field(default_factory=list)
    # Tokens of each single model call (part B: an alert takes several calls).
    call_tokens: list[int] = field(default_factory=list)
    # Tokens of the L1 working context (what the 4000-token budget bounds).
    working_tokens: list[int] = field(default_factory=list)
    # Entity loss: (step, entity) pairs graded and lost, and the lost ones by step.
    graded: list[int] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)
    lost_names: list[str] = field(default_factory=list)
    # Of the lost pairs, reading addresses (signal://<vin>/<signal>@<ts>) whose vehicle, signal and time
    # all stand in the context: the system prompt gives the address's form, so the model can still cite them.
    composable: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.context_tokens)

    @property
    def loss(self) -> float:
        return sum(self.lost) / max(1, sum(self.graded))

    def grade(self, label: str, seen: set[str], context: str) -> None:
        """Score the context of one step against every entity of the steps before it."""
        lost = sorted(e for e in seen if not present(e, context))
        self.graded.append(len(seen))
        self.lost.append(len(lost))
        self.composable.append(sum(_composable(e, context) for e in lost))
        self.lost_names += [f"{label}: {e}" for e in lost]


_ADDRESS_RE = re.compile(r"^signal://([^/]+)/([^@]+)@(.+)$")


def _composable(entity: str, context: str) -> bool:
    """Whether ``entity`` is a reading's address whose vehicle, signal and time all stand in ``context``."""
    match = _ADDRESS_RE.match(entity)
    return match is not None and all(part in context for part in match.groups())


def run_scripted(budget: int, counter: TokenCounter) -> tuple[list[Series], bool]:
    """The three contexts over the 23 steps; also whether step 17 sees the step-4 conclusion as void."""
    steps = scripted_steps()
    system_tokens = counter.count(SYSTEM_PROMPT)
    full, window, working = Series("full"), Series("window"), Series("working")
    wm = WorkingMemory(WorkingState(), budget_tokens=budget, counter=counter)
    done: list[Round] = []
    seen: set[str] = set()
    step17_void = False
    for n, round_ in enumerate(steps, start=1):
        current = f"## Step at {round_.ts}\n{round_.user}"
        contexts = [
            (full, "\n\n".join([*(f"{r.user}\n{r.assistant}" for r in done), current])),
            (window, "\n\n".join([*(f"{r.user}\n{r.assistant}" for r in done[-KEEP_ROUNDS:]), current])),
            (working, wm.render(current)),
        ]
        for series, text in contexts:
            series.context_tokens.append(system_tokens + counter.count(text))
            series.grade(f"step {n}", seen, text)
        if n == 17:
            # The seed 003 incident: step 17 must know the step-4 conclusion is void.
            step17_void = any(f.render() in contexts[2][1] and VOID_TEXT in f.text for f in wm.state.key_facts)
        done.append(round_)
        seen |= entities(round_.user) | entities(round_.assistant)
        # As the engine does: the observation is read structurally when it is a tool result.
        wm.add_round(round_, extract_tool_facts(round_.user, round_.ts))
    print(
        f"  working memory: {wm.state.threshold_folds} threshold folds, {wm.metrics.checked} summaries checked, "
        f"{wm.metrics.failed} failed fidelity",
        file=sys.stderr,
    )
    return [full, window, working], step17_void


# -- part B: a 40-alert session through the engine ---------------------------------------


def session_alerts(n: int) -> list[AlertEvent]:
    """n alerts of one vehicle, 50 minutes apart; the last one confirms the fault."""
    out: list[AlertEvent] = []
    chatter = ["车主来电询问进度", "仪表偶发提示，已确认收到", "driver says all good today", "例行上报"]
    for i in range(n):
        ts = T0 + timedelta(minutes=50 * i)
        diff = 187 if i == n - 1 else 40 + (i * 7) % 55
        text = chatter[i % len(chatter)]
        if i == 4:
            text = "维修站反馈：怀疑高压线束松动，已排除"
        if i == 11:
            text = "已开工单WO-88231，等待备件"
        out.append(
            AlertEvent(
                type="alert",
                event_id=f"e-{i:04d}",
                vin=VIN,
                series="EV-A",
                ts=ts,
                alert_text=text,
                dtc_codes=["P0A7F"],
                signals={"cell_voltage_diff_mv": diff, "pack_temp_c": round(35 + i * 0.3, 1)},
            )
        )
    return out


class ScoringModel:
    """Passes every call to the offline model and keeps what it was sent and what it answered."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner
        self.name = inner.name
        self.prompts: list[list[Message]] = []
        self.answers: list[str] = []

    def chat(self, messages: list[Message], tools: list[ToolSpec]) -> ChatResponse:
        self.prompts.append(list(messages))
        reply = self.inner.chat(messages, tools)
        if reply.content:
            self.answers.append(reply.content)
        return reply

    def close(self) -> None:
        self.inner.close()


class WindowMemory(WorkingMemory):
    """The plain window: the newest rounds verbatim and nothing else (no summary, no key facts)."""

    def add_facts(self, facts: list[KeyFact]) -> None:
        return

    def _fold(self, rounds: list[Round]) -> None:
        return  # folded rounds are dropped, not summarised

    def close_session(self, case_summary: str) -> None:
        self.state.rounds = []


def run_session(n: int, budget: int, keep_rounds: int, name: str, counter: TokenCounter) -> Series:
    model = ScoringModel(OfflineModel())
    engine = DiagnosisEngine(
        store=open_store("memory://"),
        model=model,
        embedder=HashingEmbedder(),
        pack=load_pack(),
        working_budget_tokens=budget,
        working_keep_rounds=keep_rounds,
    )
    real = diagnosis_module.WorkingMemory
    if name == "window":
        diagnosis_module.WorkingMemory = WindowMemory  # type: ignore[misc]
    series = Series(name)
    session: SessionState | None = None
    dedup = DedupState()
    seen: set[str] = set()
    try:
        for k, alert in enumerate(session_alerts(n), start=1):
            first_call, first_answer = len(model.prompts), len(model.answers)
            result = engine.on_event(session, dedup, alert, alert.model_dump_json())
            session, dedup = result.session, result.dedup
            series.context_tokens.append(result.diagnoses[0].prompt_tokens)
            for prompt in model.prompts[first_call:]:
                series.call_tokens.append(sum(counter.count(m.content) for m in prompt))
            first = model.prompts[first_call]
            series.working_tokens.append(counter.count(first[-1].content))
            series.grade(f"alert {k}", seen, "\n".join(m.content for m in first))
            tools = [m.content for m in model.prompts[-1] if m.role == "tool"]
            for text in [*tools, *model.answers[first_answer:]]:
                seen |= entities(text)
    finally:
        diagnosis_module.WorkingMemory = real  # type: ignore[misc]
        engine.close()
    return series


# -- report ------------------------------------------------------------------------------


def _table(title: str, rows: list[Series], budget: int) -> None:
    base = rows[0].total
    print(f"\n{title}")
    print(
        f"{'context':<10} {'prompt tokens':>14} {'vs full':>8} {'peak call':>10} {'peak L1':>8} "
        f"{'L1 within budget':>17} {'graded':>7} {'lost':>6} {'entity loss':>12} {'composable':>11}"
    )
    for s in rows:
        peak_call = max(s.call_tokens or s.context_tokens)
        peak_l1 = max(s.working_tokens or s.context_tokens)
        print(
            f"{s.name:<10} {s.total:>14} {100 * (s.total / base - 1):>+7.1f}% {peak_call:>10} {peak_l1:>8} "
            f"{'yes' if peak_l1 <= budget else 'no':>17} {sum(s.graded):>7} {sum(s.lost):>6} {100 * s.loss:>11.1f}%"
            f" {sum(s.composable):>11}"
        )


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, default=4000, help="working-memory budget in tokens")
    p.add_argument("--alerts", type=int, default=40, help="alerts in the part-B session")
    p.add_argument("--plot", type=Path, default=Path("out/bench/long_task.png"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    counter = EstimatingCounter()
    print("part A: scripted 23-step task", file=sys.stderr)
    scripted, step17_void = run_scripted(args.budget, counter)
    print(f"part B: {args.alerts}-alert session through the engine", file=sys.stderr)
    session = [
        run_session(args.alerts, UNBOUNDED, UNBOUNDED, "full", counter),
        run_session(args.alerts, UNBOUNDED, KEEP_ROUNDS, "window", counter),
        run_session(args.alerts, args.budget, KEEP_ROUNDS, "working", counter),
    ]
    _table("A. scripted 23-step task, one model call per step (system prompt + context)", scripted, args.budget)
    _table(
        f"B. {args.alerts}-alert session, DiagnosisEngine + offline model (all calls; L1 = the working "
        "context of the call)",
        session,
        args.budget,
    )
    print("graded: (step, entity) pairs, every entity of earlier steps' tool results and answers; lost: not in the "
          "step's context; composable: of the lost, reading addresses (signal://<vin>/<signal>@<ts>) whose "
          "vehicle, signal and time all stand in the context (the system prompt gives the address's form)")  # fmt: skip
    for s in [*scripted, *session]:
        if s.lost_names and s.name == "working":
            shown = ", ".join(s.lost_names[:8])
            more = f" (+{len(s.lost_names) - 8} more)" if len(s.lost_names) > 8 else ""
            print(f"  {s.name} lost: {shown}{more}")
    a_full, _, a_ours = scripted
    print(
        f"\nlong task: working memory loses {100 * a_ours.loss:.1f}% of entities (target <= 3%) with "
        f"{100 * a_ours.total / a_full.total:.0f}% of full context's prompt tokens (target <= 50%); "
        f"step 17 sees the step-4 conclusion as void: {'yes' if step17_void else 'NO'}"
    )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    panels = (
        (axes[0], scripted, "A. 23-step task: tokens of each step's call", "step", False),
        (axes[1], session, f"B. {args.alerts}-alert session: L1 working context per alert", "alert", True),
    )
    for ax, rows, title, unit, l1 in panels:
        for s in rows:
            ys = s.working_tokens if l1 else s.context_tokens
            ax.plot(range(1, len(ys) + 1), ys, marker=".", label=f"{s.name} (entity loss {100 * s.loss:.1f}%)")
        ax.axhline(args.budget, color="k", ls="--", lw=1, label=f"budget {args.budget}")
        ax.axhline(0.7 * args.budget, color="grey", ls=":", lw=1, label="70% trigger")
        ax.set_xlabel(unit)
        ax.set_ylabel("tokens (EstimatingCounter)")
        if l1:
            ax.set_yscale("log")
        ax.set_title(title)
        ax.legend(fontsize=8)
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=120, bbox_inches="tight")
    print(f"plot: {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
