"""`vdoctor eval ab`: replay one file with long-term memory off and on, and report."""

from __future__ import annotations

from pathlib import Path

from jobs.replay import run_file
from vdoctor.evaluation.ab import ArmMetrics, evaluate, plot, render_markdown
from vdoctor.settings import Settings, with_overrides


def run_ab(alerts: Path, out: Path, settings: Settings, parallelism: int = 1) -> tuple[ArmMetrics, ArmMetrics]:
    """Run both arms, each on a fresh long-term memory, then write ab_report.md and ab_report.png."""
    for arm, enabled in (("off", False), ("on", True)):
        arm_dir = out / arm
        db = arm_dir / "memory.db"
        if db.exists():
            db.unlink()
        arm_settings = with_overrides(settings, memory_enabled=enabled, memory_url=f"sqlite:///{db.resolve()}")
        print(f"vdoctor eval ab: memory {arm} ...", flush=True)
        run_file(alerts, arm_dir, arm_settings, parallelism=parallelism)
    off, on = evaluate(alerts, out / "off", out / "on")
    plot(off, on, out / "ab_report.png")
    (out / "ab_report.md").write_text(render_markdown(alerts, off, on, "ab_report.png"), encoding="utf-8")
    return off, on
