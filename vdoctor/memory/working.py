"""L1 working memory: the model's context for one vehicle, held to a token budget.

Layout of the context (seed 000 §8.2, seed 003):

    [rolling summary of older rounds]   compressed, lossy except for key facts
    [newest rounds, verbatim]           at most ``KEEP_ROUNDS``
    [key facts]                         never compressed, always last

When the context passes ``COMPRESS_AT`` of the window, the oldest half of the
verbatim rounds is folded into the rolling summary. A stage end (the ReAct
run moves from investigation to a conclusion) also folds the rounds, and the
whole session is summarised when it concludes (see ``summary.py``).
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from vdoctor.tokens import DEFAULT_COUNTER, TokenCounter

# Working-context budget in tokens (DESIGN.md §4).
DEFAULT_BUDGET_TOKENS = 4000
# The newest rounds stay verbatim: the model reasons best over exact recent text.
KEEP_ROUNDS = 6
# Compress before the window is full, so the next round still fits.
COMPRESS_AT = 0.70
# Key facts are never dropped, but a pathological session must not own the
# state: beyond this many the oldest readings give way (codes, decisions,
# exclusions and ids are kept first).
MAX_KEY_FACTS = 200
# The rolling summary is itself bounded; its oldest lines give way first.
MAX_SUMMARY_LINES = 40

# re.ASCII throughout: CJK characters count as \w in Python, so a plain \b or
# (?<!\w) would miss 压差187mV, 报P0A7F or 证据signal://... in Chinese text.
_CODE_RE = re.compile(r"\b[PCBU][0-9A-F]{4}\b", re.ASCII)
# Evidence URIs use [A-Za-z0-9_-/@:.] only; a trailing full stop ends the sentence.
_URI_RE = re.compile(r"\b(?:dtc|signal|case)://[\w\-/@:.]*[\w\-/@:]", re.ASCII)
# A number with a unit, Chinese or English style: 压差187mV, 46.5℃, 3.2 s, 12 %.
_READING_RE = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s?(mV|V|A|kPa|rpm|km|ms|s|%|℃|°C|kΩ|Ω)(?![A-Za-z])", re.ASCII)
_SIGNAL_RE = re.compile(r"\b([a-z][a-z0-9_]*_(?:mv|c|pct|v|a|kpa|rpm|km|s))\s*[=:]\s*(-?\d+(?:\.\d+)?)", re.ASCII)
_EXCLUDED_RE = re.compile(
    r"([^.;。；\n]{0,80}(?:ruled out|excluded|not the cause|排除|已排除|不是原因)[^.;。；\n]{0,40})",
    re.IGNORECASE,
)
_EXCLUDED_WORDS = ("ruled out", "excluded", "not the cause", "排除", "不是原因")
_DECISION_RE = re.compile(r"([^\n]{0,120}\bconfidence\s*[=:]?\s*(0(?:\.\d+)?|1(?:\.0+)?))")
_ID_RE = re.compile(r"(?<![A-Za-z0-9_])(?:WO|TK|RO|工单)[-#: ]?\d{3,}(?![A-Za-z0-9_])")


class Round(BaseModel):
    """One alert's exchange: what arrived, and what the agent did and decided."""

    ts: str
    user: str
    assistant: str


class WorkingState(BaseModel):
    """The JSON-able snapshot of working memory kept in the L2 session state."""

    summary_lines: list[str] = []
    rounds: list[Round] = []
    key_facts: list[str] = []
    compressions: int = 0


def extract_key_facts(text: str, when: str = "") -> list[str]:
    """Pull the never-compressed facts out of a tool result or a model turn."""
    facts: list[str] = []
    for code in _CODE_RE.findall(text):
        facts.append(f"code {code}")
    for name, value in _SIGNAL_RE.findall(text):
        facts.append(f"reading {name}={value}" + (f" @{when}" if when else ""))
    for value, unit in _READING_RE.findall(text):
        facts.append(f"reading {value}{unit}" + (f" @{when}" if when else ""))
    for uri in _URI_RE.findall(text):
        facts.append(f"evidence {uri}")
    # The two context regexes scan up to 120 characters at every position:
    # run them only when their keyword is there (same result, ~10x cheaper).
    lowered = text.lower()
    if any(word in lowered for word in _EXCLUDED_WORDS):
        for match in _EXCLUDED_RE.findall(text):
            facts.append(f"excluded: {match.strip()}")
    for match, _conf in decision_matches(text):
        facts.append(f"decision: {match.strip()}")
    for ident in _ID_RE.findall(text):
        facts.append(f"id {ident}")
    return facts


def decision_matches(text: str) -> list[tuple[str, str]]:
    """``_DECISION_RE.findall(text)``, scanning only the lines that can hold a match.

    A match starts at most 120 characters before "confidence" on the same
    line and runs past that line only through whitespace and the number, so
    each such line is searched within that window; the plain findall retries
    its 120-character prefix at every position of the text (~1 ms on a round).
    """
    out: list[tuple[str, str]] = []
    pos = 0
    while (hit := text.find("confidence", pos)) >= 0:
        start = max(pos, text.rfind("\n", 0, hit) + 1)
        line_end = text.find("\n", hit)
        line_end = len(text) if line_end < 0 else line_end
        end = line_end
        while end < len(text) and text[end].isspace():
            end += 1
        while end < len(text) and (text[end].isdigit() or text[end] == "."):
            end += 1
        pos = line_end
        for m in _DECISION_RE.finditer(text, start, end):
            out.append((m.group(1), m.group(2)))
            pos = max(pos, m.end())
    return out


def _fact_rank(fact: str) -> int:
    # Readings are the most numerous and the first to give way at the cap.
    return 1 if fact.startswith("reading ") else 0


class WorkingMemory:
    """Token-budgeted working context over a ``WorkingState`` snapshot."""

    def __init__(
        self,
        state: WorkingState,
        budget_tokens: int = DEFAULT_BUDGET_TOKENS,
        counter: TokenCounter = DEFAULT_COUNTER,
    ) -> None:
        self.state = state
        self.budget_tokens = budget_tokens
        self.counter = counter

    def add_facts(self, facts: list[str]) -> None:
        known = set(self.state.key_facts)
        for fact in facts:
            if fact not in known:
                self.state.key_facts.append(fact)
                known.add(fact)
        if len(self.state.key_facts) > MAX_KEY_FACTS:
            # Stable: keep every non-reading fact, then the newest readings.
            ranked = sorted(enumerate(self.state.key_facts), key=lambda p: (_fact_rank(p[1]), -p[0]))
            keep = {i for i, _ in ranked[:MAX_KEY_FACTS]}
            self.state.key_facts = [f for i, f in enumerate(self.state.key_facts) if i in keep]

    def add_round(self, round_: Round) -> None:
        self.state.rounds.append(round_)
        self.add_facts(extract_key_facts(round_.user, round_.ts))
        self.add_facts(extract_key_facts(round_.assistant, round_.ts))
        while len(self.state.rounds) > KEEP_ROUNDS or self.tokens() > COMPRESS_AT * self.budget_tokens:
            if not self.compress_oldest_half():
                break

    def compress_oldest_half(self) -> bool:
        """Fold the oldest half of the verbatim rounds into the rolling summary."""
        n = len(self.state.rounds)
        if n == 0:
            return False
        half = max(1, n // 2)
        self._fold(self.state.rounds[:half])
        self.state.rounds = self.state.rounds[half:]
        return True

    def end_stage(self) -> None:
        """A ReAct stage ended: fold every verbatim round into the summary."""
        if self.state.rounds:
            self._fold(self.state.rounds)
            self.state.rounds = []

    def _fold(self, rounds: list[Round]) -> None:
        for r in rounds:
            # One line per round; the facts it carried are already in key facts.
            gist = r.assistant.splitlines()[0] if r.assistant else ""
            self.state.summary_lines.append(f"{r.ts} | {r.user[:80]} | {gist[:120]}")
        del self.state.summary_lines[:-MAX_SUMMARY_LINES]
        self.state.compressions += 1

    def render(self, current: str = "") -> str:
        """The working context as text: summary, recent rounds, ``current``, key facts last."""
        parts = []
        if self.state.summary_lines:
            parts.append("## Earlier in this session (summary)\n" + "\n".join(self.state.summary_lines))
        for r in self.state.rounds:
            parts.append(f"## Alert at {r.ts}\n{r.user}\n## Agent\n{r.assistant}")
        if current:
            parts.append(current)
        if self.state.key_facts:
            parts.append("## Key facts (never compressed)\n" + "\n".join(self.state.key_facts))
        return "\n\n".join(parts)

    def tokens(self) -> int:
        return self.counter.count(self.render())
