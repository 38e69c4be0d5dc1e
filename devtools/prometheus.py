"""Reading a Prometheus text endpoint (the job's ``--metrics-port``): for tests and benchmarks."""

from __future__ import annotations

import http.client
import re
import urllib.request

# One sample line: name, optional {labels}, value (no timestamps: Flink's reporter writes none).
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')
# A scrape before the endpoint is up, or while it goes away (a reply cut short: http.client.IncompleteRead).
UNREACHABLE = (OSError, http.client.HTTPException)

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> Samples:
    """Every sample of an exposition, by metric name: [(labels, value)]."""
    samples: Samples = {}
    for line in text.splitlines():
        found = SAMPLE.match(line)
        if found:
            labels = dict(LABEL.findall(found.group(2) or ""))
            samples.setdefault(found.group(1), []).append((labels, float(found.group(3))))
    return samples


def scrape(port: int, timeout_s: float = 5.0) -> Samples:
    """Every sample the endpoint on this machine's ``port`` serves now; raises one of ``UNREACHABLE``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as resp:
        return parse(resp.read().decode())
