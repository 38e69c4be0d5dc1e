"""The README's screenshots of the memory inspector, taken from the demo's store.

Run after `bash scripts/demo.sh` (which leaves the store and the job's output in out/demo):

    .venv/bin/python scripts/inspector_screenshots.py [--demo out/demo] [--out docs]

It starts `vdoctor serve` over the demo's store, opens the timeline of the
vehicle with the most archived versions and the recall explainer of the
session that was given the most memory (as of the time it opened), in
Debian's Chromium, and saves docs/inspector-timeline.png and
docs/inspector-recall.png (the top of each page).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtools.browser import REPO_ROOT, busiest_opening, chromium, inspector, richest_vehicle  # noqa: E402
from vdoctor.stores import open_store  # noqa: E402

# The top of a page, at the browser's viewport width.
CLIP_HEIGHT = {"timeline": 1000, "recall": 1250}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", default="out/demo", help="the demo's output folder (relative to the repository)")
    parser.add_argument("--out", default="docs")
    args = parser.parse_args(argv)
    demo = Path(args.demo)
    memory = f"sqlite:///{demo.as_posix()}/memory.db"
    store = open_store(f"sqlite:///{REPO_ROOT / demo / 'memory.db'}", read_only=True)
    try:
        vin = richest_vehicle(store)
    finally:
        store.close()
    alert, _ = busiest_opening(REPO_ROOT / demo / "diagnoses.jsonl", REPO_ROOT / "data" / "demo" / "alerts.jsonl")
    query = urllib.parse.urlencode(
        {"symptom": alert["alert_text"], "codes": " ".join(alert["dtc_codes"]), "at": alert["ts"]}
    )
    pages = {"timeline": f"/vehicles/{vin}", "recall": f"/vehicles/{alert['vin']}/recall?{query}"}
    out = REPO_ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, inspector(memory, Path(tmp) / "serve.log", diagnoses=str(demo)) as s:
        with chromium() as browser:
            page = browser.new_page()
            for name, path in pages.items():
                answer = page.goto(s.url + path)
                if answer is None or answer.status != 200:
                    raise SystemExit(f"{path}: {answer and answer.status}")
                target = out / f"inspector-{name}.png"
                clip = {"x": 0, "y": 0, "width": 1440, "height": CLIP_HEIGHT[name]}
                page.screenshot(path=str(target), full_page=True, clip=clip)  # type: ignore[arg-type]
                print(f"{target.relative_to(REPO_ROOT)}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
