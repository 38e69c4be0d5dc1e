"""`vdoctor eval ab`: replay one file with long-term memory off and on, and report."""

from __future__ import annotations

import argparse
from pathlib import Path

from jobs.job_settings import domain_settings, replay_settings
from jobs.replay import run_file
from vdoctor.evaluation.ab import ArmMetrics, evaluate, plot, render_markdown


def run_ab(args: argparse.Namespace) -> tuple[ArmMetrics, ArmMetrics]:
    """Run both arms of ``--alerts``, each on a fresh long-term memory; write ab_report.md and .png to ``--out``."""
    out = Path(args.out)
    for arm, enabled in (("off", False), ("on", True)):
        arm_dir = out / arm
        db = arm_dir / "memory.db"
        if db.exists():
            db.unlink()
        settings = domain_settings(args, memory_enabled=enabled, memory_url=f"sqlite:///{db.resolve()}")
        print(f"vdoctor eval ab: memory {arm} ...", flush=True)
        run_file(replay_settings(args, out=arm_dir), settings)
    alerts = Path(args.alerts)
    off, on = evaluate(alerts, out / "off", out / "on")
    plot(off, on, out / "ab_report.png")
    (out / "ab_report.md").write_text(render_markdown(alerts, off, on, "ab_report.png"), encoding="utf-8")
    return off, on
