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

For every step the benchmark lists the facts that step needs (codes, readings,
the ticket id, the excluded hypothesis, the void conclusion, evidence URIs)
and counts those missing from the context the model is given.

    .venv/bin/python bench/long_task.py [--budget 4000] [--alerts 40] [--plot out/bench/long_task.png]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from demo_replay import RecordingModel

from vdoctor.agent.prompt import SYSTEM_PROMPT
from vdoctor.diagnosis import DiagnosisEngine
from vdoctor.embedders.hashing import HashingEmbedder
from vdoctor.events import AlertEvent
from vdoctor.knowledge import load_pack
from vdoctor.memory.session import DedupState, SessionState
from vdoctor.memory.working import KEEP_ROUNDS, Round, WorkingMemory, WorkingState
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


def _filler(step: int) -> str:
    # Long, low-value narrative of the kind a real model writes between facts.
    return (
        f"Thinking about step {step}: the pattern is consistent with what we saw before, and we should keep "
        "checking the remaining subsystems one by one before drawing any final conclusion; the operator "
        "confirmed again that the vehicle is parked and that the readings are being collected as usual. "
    ) * 3


def scripted_steps() -> list[tuple[Round, list[str]]]:
    """23 (round, facts needed at that step) pairs."""
    steps: list[tuple[Round, list[str]]] = []
    base = ["P0A7F", "WO-20931"]

    def add(step: int, user: str, assistant: str, needs: list[str]) -> None:
        steps.append((Round(ts=_ts(step), user=user, assistant=assistant), needs))

    add(
        1,
        "电池包单体压差过大 P0A7F cell_voltage_diff_mv=187 pack_temp_c=41.5; 已开工单WO-20931",
        "Opening the diagnosis; looking up P0A7F first. " + _filler(1),
        [],
    )
    add(
        2,
        json.dumps(
            {
                "codes": [
                    {
                        "code": "P0A7F",
                        "definition": "Hybrid/EV battery pack deterioration",
                        "family": "battery",
                        "source": "pack",
                    }
                ],
                "unknown": [],
            }
        ),
        "P0A7F is battery pack deterioration; reading the cell voltage history. " + _filler(2),
        base,
    )
    add(
        3,
        _history("cell_voltage_diff_mv", 3, [62, 88, 121, 150, 187]),
        f"The spread grows from 62 to 187 mV; evidence {_uri('cell_voltage_diff_mv', 2)}. " + _filler(3),
        [*base, "cell_voltage_diff_mv=187"],
    )
    add(
        4,
        "connector inspection photo: green residue on the harness connector X12",
        "Conclusion: harness connector corrosion causes the imbalance, confidence 0.6. " + _filler(4),
        [*base, "cell_voltage_diff_mv=187"],
    )
    for step in range(5, 9):
        add(
            step,
            _history("pack_temp_c", step, [40.1, 40.8, 41.5, 46.5]),
            f"Pack temperature reached 46.5℃ at {_ts(step)}; no thermal event. " + _filler(step),
            [*base, "cell_voltage_diff_mv=187", "harness connector corrosion"],
        )
    add(
        9,
        "harness continuity test: 0.2 Ω on all 96 sense lines, within spec; connector cleaned, spread unchanged",
        f"The {VOID_TEXT}: continuity is normal and cleaning changed nothing. "
        f"So we {EXCLUDED_TEXT}. Next: cell self-discharge. " + _filler(9),
        [*base, "cell_voltage_diff_mv=187", "harness connector corrosion"],
    )
    for step in range(10, 23):
        needs = [*base, "cell_voltage_diff_mv=187", EXCLUDED_TEXT]
        if step == 17:
            # The seed 003 incident: step 17 must not rely on the voided step-4 conclusion.
            needs = [*needs, VOID_TEXT]
        if step >= 20:
            needs = [*needs, "46.5℃", _uri("cell_voltage_diff_mv", 2)]
        add(
            step,
            _history("cell_voltage_diff_mv", step, [187, 190, 195, 201])
            if step % 2
            else f"self-discharge test {step}: cell 37 lost 3.2 s of balancing time per hour",
            "Cell 37 keeps drifting; self-discharge is likely. " + _filler(step),
            needs,
        )
    add(
        23,
        "final check: cell 37 open-circuit voltage 3.21 V vs pack mean 3.29 V",
        "Conclusion: cell 37 self-discharge, confidence 0.85; replace module 4. " + _filler(23),
        [*base, "cell_voltage_diff_mv=187", EXCLUDED_TEXT, VOID_TEXT, "46.5℃", _uri("cell_voltage_diff_mv", 2)],
    )
    return steps


@dataclass
class Series:
    name: str
    context_tokens: list[int] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    missing_names: list[str] = field(default_factory=list)
    # Tokens of each single model call (part B: an alert takes several calls).
    call_tokens: list[int] = field(default_factory=list)
    # Tokens of the L1 working context (what the 4000-token budget bounds).
    working_tokens: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.context_tokens)


def run_scripted(budget: int, counter: TokenCounter) -> list[Series]:
    steps = scripted_steps()
    system_tokens = counter.count(SYSTEM_PROMPT)
    full, window, working = Series("full"), Series("window"), Series("working")
    wm = WorkingMemory(WorkingState(), budget_tokens=budget, counter=counter)
    done: list[Round] = []
    for round_, needs in steps:
        current = f"## Step at {round_.ts}\n{round_.user}"
        contexts = [
            (full, "\n\n".join([*(f"{r.user}\n{r.assistant}" for r in done), current])),
            (window, "\n\n".join([*(f"{r.user}\n{r.assistant}" for r in done[-KEEP_ROUNDS:]), current])),
            (working, wm.render(current)),
        ]
        for series, text in contexts:
            series.context_tokens.append(system_tokens + counter.count(text))
            lost = [n for n in needs if n not in text]
            series.missing.append(len(lost))
            series.missing_names += [f"step {len(series.missing)}: {n}" for n in lost]
        done.append(round_)
        wm.add_round(round_)
    print(
        f"  working memory: {wm.state.threshold_folds} threshold folds, {wm.metrics.checked} summaries checked, "
        f"{wm.metrics.failed} failed fidelity",
        file=sys.stderr,
    )
    return [full, window, working]


# -- part B: a 40-alert session through the engine ---------------------------------------


def session_alerts(n: int) -> list[tuple[AlertEvent, list[str]]]:
    """n alerts of one vehicle, 50 minutes apart; the last one confirms the fault."""
    out: list[tuple[AlertEvent, list[str]]] = []
    chatter = ["车主来电询问进度", "仪表偶发提示，已确认收到", "driver says all good today", "例行上报"]
    needs: list[str] = []
    for i in range(n):
        ts = T0 + timedelta(minutes=50 * i)
        diff = 187 if i == n - 1 else 40 + (i * 7) % 55
        text = chatter[i % len(chatter)]
        if i == 4:
            text = "维修站反馈：怀疑高压线束松动，已排除"
        if i == 11:
            text = "已开工单WO-88231，等待备件"
        alert = AlertEvent(
            type="alert",
            event_id=f"e-{i:04d}",
            vin=VIN,
            series="EV-A",
            ts=ts,
            alert_text=text,
            dtc_codes=["P0A7F"],
            signals={"cell_voltage_diff_mv": diff, "pack_temp_c": round(35 + i * 0.3, 1)},
        )
        out.append((alert, list(needs)))
        if i == 0:
            needs += ["P0A7F", f"cell_voltage_diff_mv={diff}"]
        if i == 4:
            needs.append("怀疑高压线束松动，已排除")
        if i == 11:
            needs.append("WO-88231")
    return out


def run_session(n: int, budget: int, keep_rounds: int, name: str, counter: TokenCounter) -> Series:
    model = RecordingModel(OfflineModel())
    engine = DiagnosisEngine(
        store=open_store("memory://"),
        model=model,
        embedder=HashingEmbedder(),
        pack=load_pack(),
        working_budget_tokens=budget,
        working_keep_rounds=keep_rounds,
    )
    series = Series(name)
    session: SessionState | None = None
    dedup = DedupState()
    for alert, needs in session_alerts(n):
        first_call = len(model.prompts)
        result = engine.on_event(session, dedup, alert, alert.model_dump_json())
        session, dedup = result.session, result.dedup
        diagnosis = result.diagnoses[0]
        series.context_tokens.append(diagnosis.prompt_tokens)
        for prompt in model.prompts[first_call:]:
            series.call_tokens.append(sum(counter.count(m.content) for m in prompt))
        context = model.prompts[first_call][-1].content
        series.working_tokens.append(counter.count(context))
        lost = [x for x in needs if x not in context]
        series.missing.append(len(lost))
        series.missing_names += [f"alert {len(series.missing)}: {x}" for x in lost]
    engine.close()
    return series


# -- report ------------------------------------------------------------------------------


def _table(title: str, rows: list[Series], budget: int) -> None:
    base = rows[0].total
    print(f"\n{title}")
    print(
        f"{'context':<10} {'prompt tokens':>14} {'vs full':>8} {'peak call':>10} {'peak L1':>8} "
        f"{'L1 within budget':>17} {'missing facts':>14}"
    )
    for s in rows:
        peak_call = max(s.call_tokens or s.context_tokens)
        peak_l1 = max(s.working_tokens or s.context_tokens)
        print(
            f"{s.name:<10} {s.total:>14} {100 * (s.total / base - 1):>+7.1f}% {peak_call:>10} {peak_l1:>8} "
            f"{'yes' if peak_l1 <= budget else 'no':>17} {sum(s.missing):>14}"
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
    scripted = run_scripted(args.budget, counter)
    print(f"part B: {args.alerts}-alert session through the engine", file=sys.stderr)
    session = [
        run_session(args.alerts, UNBOUNDED, UNBOUNDED, "full", counter),
        run_session(args.alerts, args.budget, KEEP_ROUNDS, "working", counter),
    ]
    _table("A. scripted 23-step task, one model call per step (system prompt + context)", scripted, args.budget)
    _table(
        f"B. {args.alerts}-alert session, DiagnosisEngine + offline model (all calls; L1 = the working "
        "context of the call)",
        session,
        args.budget,
    )
    for s in [*scripted, *session]:
        if s.missing_names:
            shown = ", ".join(s.missing_names[:6])
            more = f" (+{len(s.missing_names) - 6} more)" if len(s.missing_names) > 6 else ""
            print(f"  {s.name} missing: {shown}{more}")
    a_full, _, a_ours = scripted
    print(
        f"\nlong task: working memory uses {100 * (1 - a_ours.total / a_full.total):.0f}% fewer prompt tokens "
        f"than full context; step 17 sees the void step-4 conclusion: "
        f"{'yes' if a_ours.missing[16] == 0 else 'NO'}"
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
            ax.plot(range(1, len(ys) + 1), ys, marker=".", label=f"{s.name} (missing facts {sum(s.missing)})")
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
