"""The memory A/B experiment (seed 000 §8.5.3): the same replay with memory off and on.

Metrics, each computed from one arm's diagnoses and the input events:
- repeat-visit consistency: of the concluded sessions that repeat a fault the
  vehicle had concluded before (a shared trouble code), the share whose root
  cause agrees with the earlier diagnosis;
- tool calls per session and LLM calls per session;
- misdiagnosis backtrack rate: rechecks that overturned a diagnosis
  (recheck_ok = false) over all rechecks of concluded sessions;
- tokens per event (prompt + completion) and injected memory tokens, p95.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class ArmMetrics:
    name: str
    events: int
    sessions: int
    concluded: int
    repeat_visits: int
    repeat_consistent: int
    tool_calls_per_session: float
    llm_calls_per_session: float
    backtrack_rate: float
    tokens_per_event: float
    injected_p95: float
    injected_max: int

    @property
    def consistency(self) -> float:
        return self.repeat_consistent / self.repeat_visits if self.repeat_visits else float("nan")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _rechecks(alerts: Path) -> list[dict[str, Any]]:
    out = []
    for line in alerts.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "recheck" and isinstance(event.get("recheck_ok"), bool):
            out.append(event)
    return out


def arm_metrics(name: str, diagnoses: list[dict[str, Any]], rechecks: list[dict[str, Any]]) -> ArmMetrics:
    sessions: dict[str, dict[str, int]] = {}
    for d in diagnoses:
        s = sessions.setdefault(str(d["session_id"]), {"tools": 0, "llm": 0})
        s["tools"] += int(d["tool_calls"])
        s["llm"] += int(d["llm_calls"])
    concluded = [d for d in diagnoses if d["phase"] == "CONCLUDED"]
    history: dict[str, list[tuple[set[str], str]]] = {}
    repeats = consistent = 0
    for d in concluded:
        codes = {e.removeprefix("dtc://") for e in d["evidence"] if str(e).startswith("dtc://")}
        earlier = history.setdefault(str(d["vin"]), [])
        match = next((cause for prev, cause in reversed(earlier) if prev & codes), None)
        if match is not None:
            repeats += 1
            consistent += int(match == d["root_cause"])
        earlier.append((codes, str(d["root_cause"])))
    concluded_ids = {str(d["session_id"]) for d in concluded}
    judged = [r for r in rechecks if r.get("session_id") in concluded_ids]
    overturned = sum(1 for r in judged if r["recheck_ok"] is False)
    tokens = [int(d["prompt_tokens"]) + int(d["completion_tokens"]) for d in diagnoses]
    injected = [int(d["memory"]["tokens"]) for d in diagnoses]
    n_sessions = max(1, len(sessions))
    return ArmMetrics(
        name=name,
        events=len(diagnoses),
        sessions=len(sessions),
        concluded=len(concluded),
        repeat_visits=repeats,
        repeat_consistent=consistent,
        tool_calls_per_session=sum(s["tools"] for s in sessions.values()) / n_sessions,
        llm_calls_per_session=sum(s["llm"] for s in sessions.values()) / n_sessions,
        backtrack_rate=overturned / len(judged) if judged else float("nan"),
        tokens_per_event=float(np.mean(tokens)) if tokens else 0.0,
        injected_p95=float(np.percentile(injected, 95)) if injected else 0.0,
        injected_max=max(injected, default=0),
    )


def evaluate(alerts: Path, off_dir: Path, on_dir: Path) -> tuple[ArmMetrics, ArmMetrics]:
    rechecks = _rechecks(alerts)
    off = arm_metrics("memory off", _read_jsonl(off_dir / "diagnoses.jsonl"), rechecks)
    on = arm_metrics("memory on", _read_jsonl(on_dir / "diagnoses.jsonl"), rechecks)
    return off, on


def _fmt(value: float, digits: int = 2) -> str:
    return "n/a" if value != value else f"{value:.{digits}f}"


def render_markdown(alerts: Path, off: ArmMetrics, on: ArmMetrics, chart: str) -> str:
    rows = [
        ("alerts diagnosed", str(off.events), str(on.events)),
        ("sessions (concluded)", f"{off.sessions} ({off.concluded})", f"{on.sessions} ({on.concluded})"),
        ("repeat visits of a known fault", str(off.repeat_visits), str(on.repeat_visits)),
        ("repeat-visit diagnosis consistency", _fmt(off.consistency, 3), _fmt(on.consistency, 3)),
        ("tool calls per session", _fmt(off.tool_calls_per_session), _fmt(on.tool_calls_per_session)),
        ("LLM calls per session", _fmt(off.llm_calls_per_session), _fmt(on.llm_calls_per_session)),
        ("misdiagnosis backtrack rate", _fmt(off.backtrack_rate, 3), _fmt(on.backtrack_rate, 3)),
        ("tokens per event", _fmt(off.tokens_per_event, 0), _fmt(on.tokens_per_event, 0)),
        (
            "injected memory tokens p95 (max)",
            f"{off.injected_p95:.0f} ({off.injected_max})",
            f"{on.injected_p95:.0f} ({on.injected_max})",
        ),
    ]
    lines = [
        "# Memory A/B experiment",
        "",
        f"Replay: `{alerts.name}`, the same file through the same job, long-term recall off and on.",
        "",
        "| metric | memory off | memory on |",
        "|---|---|---|",
        *[f"| {a} | {b} | {c} |" for a, b, c in rows],
        "",
        "Repeat-visit consistency counts concluded sessions that share a trouble code with an earlier",
        "concluded session of the same vehicle and agree on its root cause. The backtrack rate counts",
        "rechecks with recheck_ok = false over rechecks of concluded sessions; rechecks come from the",
        "replay file, so both arms see the same ones.",
        "",
        f"![A/B chart]({chart})",
        "",
    ]
    return "\n".join(lines)


def plot(off: ArmMetrics, on: ArmMetrics, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("tool calls / session", off.tool_calls_per_session, on.tool_calls_per_session),
        ("LLM calls / session", off.llm_calls_per_session, on.llm_calls_per_session),
        ("tokens / event", off.tokens_per_event, on.tokens_per_event),
        ("injected tokens p95", off.injected_p95, on.injected_p95),
        ("repeat consistency", off.consistency, on.consistency),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.0 * len(panels), 3.4))
    for ax, (title, a, b) in zip(axes, panels, strict=True):
        values = [0.0 if a != a else a, 0.0 if b != b else b]
        bars = ax.bar(["off", "on"], values, color=["#999999", "#2b7bba"])
        ax.set_title(title, fontsize=10)
        for bar, v in zip(bars, values, strict=True):
            ax.annotate(
                f"{v:.2f}" if v < 10 else f"{v:.0f}",
                (bar.get_x() + bar.get_width() / 2, v),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    fig.suptitle("vdoctor memory A/B: long-term recall off vs on")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
