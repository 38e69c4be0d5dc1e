"""A fleet file unlike the demo: many signals per alert, exclusions and voided conclusions in the texts.

The demo (``scripts/gen_demo.py``) sends 1-4 readings per alert. This
generator writes sessions of 2-5 alerts with 6-16 readings each (signals with
known units, signals whose suffix is no unit, negative and decimal values),
and alert texts that rule hypotheses out ("怀疑高压线束松动，已排除",
"suspected the harness connector, ruled out") or void an earlier conclusion
("初判冷却泵故障的结论已作废", "the earlier coolant pump conclusion is void").
Each session's last alert carries a pack code with the reading that confirms
it, so the offline model concludes it; a share of sessions never conclude.

Stdlib only, seeded. Used by ``summary_readings.py`` and ``fidelity_mutations.py``
(tuning nothing: seed 1 was used while writing the checks, other seeds are
held out).

    .venv/bin/python bench/wide_fleet.py --out out/bench/wide_fleet.jsonl [--vins 120] [--seed 2]
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACK = REPO_ROOT / "vdoctor" / "knowledge" / "dtc_pack.json"
VIN_CHARS = "0123456789ABCDEFGHJKLMNPRSTUVWXYZ"
START = datetime(2027, 3, 1, tzinfo=UTC)
# (name, low, high, decimals): context signals; units from the suffix, or none.
CONTEXT = [
    ("ambient_temp_c", -25, 38, 1),
    ("coolant_flow_lph", 300, 1400, 0),
    ("brake_pressure_bar", 0, 160, 1),
    ("wheel_speed_fl_kmh", 0, 130, 1),
    ("hv_bus_current_a", -180, 320, 1),
    ("cabin_humidity_pct", 20, 90, 0),
    ("tyre_pressure_fl_kpa", 190, 260, 0),
    ("steering_angle_deg", -420, 420, 1),
    ("dcdc_temp_c", 20, 85, 1),
    ("vibration_rms", 0, 3, 3),
    ("fan_duty_raw", 0, 255, 0),
    ("cell_temp_max_c", 15, 48, 1),
    ("insulation_res_kohm", 400, 4000, 0),
    ("motor_torque_nm", -250, 380, 0),
    ("charge_energy_kwh", 0, 75, 2),
    ("lv_battery_v", 11.2, 14.6, 2),
    ("gps_hdop", 0.5, 9, 1),
    ("odometer_km", 1000, 160000, 0),
]
PARTS = ["高压线束", "the harness connector X12", "冷却泵", "the DC/DC fuse", "BMS从板CSC3", "the coolant valve"]
EXCLUDE_ZH = "维修站反馈：怀疑{part}松动，已排除"
EXCLUDE_EN = "Workshop: suspected {part} looseness, ruled out"
VOID_ZH = "初判{part}故障的结论已作废"
VOID_EN = "The earlier {part} conclusion is void"
CHATTER = ["车主来电询问进度", "routine upload", "仪表偶发提示", "driver reports no change"]
UNRESOLVED_SHARE = 0.15
EXCLUDE_SHARE = 0.5
VOID_SHARE = 0.35


def _vin(rng: random.Random) -> str:
    return "L" + "".join(rng.choice(VIN_CHARS) for _ in range(16))


def _value(rng: random.Random, lo: float, hi: float, decimals: int) -> float | int:
    v = round(rng.uniform(lo, hi), decimals)
    return int(v) if decimals == 0 else v


def _signal_codes() -> list[dict[str, object]]:
    codes = json.loads(PACK.read_text(encoding="utf-8"))["codes"]
    return [c for c in codes if c.get("confirm", {}).get("signal")]


def _confirming(rng: random.Random, rule: dict[str, object]) -> tuple[float, float]:
    """A reading that meets the rule and one that does not yet."""
    t = float(rule["threshold"])  # type: ignore[arg-type]
    span = max(abs(t) * 0.5, 1.0)
    hit = (
        round(t + rng.uniform(0.05, 1.0) * span, 2) if rule["op"] == ">=" else round(t - rng.uniform(0.05, 1) * span, 2)
    )
    miss = (
        round(t - rng.uniform(0.2, 1.0) * span, 2) if rule["op"] == ">=" else round(t + rng.uniform(0.2, 1) * span, 2)
    )
    return hit, miss


def generate(vins: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    codes = _signal_codes()
    lines: list[dict[str, object]] = []
    n = 0
    for v in range(vins):
        vin = _vin(rng)
        series = rng.choice(["EV-W1", "EV-W2"])
        fault = rng.choice(codes)
        rule = fault["confirm"]
        assert isinstance(rule, dict)
        hit, miss = _confirming(rng, rule)
        t = START + timedelta(days=rng.uniform(0, 20), hours=v % 24)
        context = rng.sample(CONTEXT, rng.randint(5, 15))
        alerts = rng.randint(2, 5)
        unresolved = rng.random() < UNRESOLVED_SHARE
        texts = [rng.choice(CHATTER) for _ in range(alerts)]
        if rng.random() < EXCLUDE_SHARE:
            texts[rng.randrange(alerts)] = rng.choice([EXCLUDE_ZH, EXCLUDE_EN]).format(part=rng.choice(PARTS))
        if rng.random() < VOID_SHARE:
            texts[rng.randrange(1, alerts)] = rng.choice([VOID_ZH, VOID_EN]).format(part=rng.choice(PARTS))
        for a in range(alerts):
            last = a == alerts - 1
            signals: dict[str, float | int] = {
                name: _value(rng, lo, hi, d) for name, lo, hi, d in context if rng.random() < 0.85
            }
            signal = str(rule["signal"])
            if last and not unresolved:
                signals[signal] = hit
            elif rng.random() < 0.6:
                signals[signal] = miss
            n += 1
            lines.append(
                {
                    "type": "alert",
                    "event_id": f"w-{seed}-{n:06d}",
                    "vin": vin,
                    "series": series,
                    "ts": (t + timedelta(hours=3 * a, minutes=rng.randint(0, 59))).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "alert_text": texts[a],
                    "dtc_codes": [str(fault["code"])] if a == 0 or last or rng.random() < 0.5 else [],
                    "signals": signals,
                }
            )
    lines.sort(key=lambda e: str(e["ts"]))
    return lines


def write(lines: list[dict[str, object]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "bench" / "wide_fleet.jsonl")
    p.add_argument("--vins", type=int, default=120)
    p.add_argument("--seed", type=int, default=2)
    args = p.parse_args(argv)
    lines = generate(args.vins, args.seed)
    write(lines, args.out)
    print(f"wrote {len(lines)} alerts for {args.vins} vehicles to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
