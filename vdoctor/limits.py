"""Budgets of the design that more than one layer needs, each defined once.

Settings take them as defaults; the memory layers use them when no setting
is given. Everything else the design depends on lives beside the code it
governs, as a named constant with its reason.
"""

from __future__ import annotations

from datetime import timedelta

# L1 working context of one model call, in tokens (seed 000 §8.2; DESIGN.md §4).
WORKING_BUDGET_TOKENS = 4000
# Long-term memory injected when a session opens may add at most this many
# tokens to a prompt (seed 000 §8.5.4 acceptance).
INJECTION_BUDGET_TOKENS = 800
# A session with no alert for 48 h of event time is over (seed 000, 8.1: L2
# lifetime); Flink's state TTL defaults to the same span (in processing time).
SESSION_TTL = timedelta(hours=48)
