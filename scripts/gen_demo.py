"""Generate the deterministic demo alert stream for vehicle-doctor.

Writes ``data/demo/alerts.jsonl`` (alert, recheck and lifecycle events, one JSON
object per line, DESIGN.md §3.1) and ``expected.json`` beside it. The stream is
a fleet of VINs in a few series; each VIN has 1-3 workshop "visits" whose
alerts either confirm a fault at once, confirm it on a second alert, or never
confirm. Malformed lines and replayed duplicates are mixed in so that the job's
dead-letter and dedup paths are exercised.

``expected.json`` holds the generator's prediction of what the job must do,
worked out by replaying the valid, de-duplicated alerts through the session
rules below (not by trusting the visit plan; the two are cross-checked):

* a VIN's session opens at its first alert when it has no open session; the id
  is ``<vin>-<UTC ts of that alert as YYYYMMDDTHHMMSS>``;
* it concludes at the alert at which some pack code seen in the session has its
  confirm rule met (a signal rule by any alert of the session so far, a repeat
  rule by the number of alerts carrying the code);
* a session idle for 48 h (event time) expires; the next alert opens a new one.

Stdlib only. Usage: ``python scripts/gen_demo.py [--out FILE] [--vins N] [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

REPO_ROOT = Path(__file__).resolve().parent.parent
PACK_PATH = REPO_ROOT / "vdoctor" / "knowledge" / "dtc_pack.json"
DEFAULT_OUT = REPO_ROOT / "data" / "demo" / "alerts.jsonl"
DEFAULT_SEED = 20261101
DEFAULT_VINS = 240
# Fewer VINs leave too few lines to spread malformed and duplicate lines over.
MIN_VINS = 20

FLEET_START = datetime(2026, 9, 1, tzinfo=UTC)
FIRST_ALERT_HOURS = (6, 22)  # UTC hour window of a VIN's first alert
ODOMETER_START_KM = (3000.0, 90000.0)
DAILY_KM = (30.0, 120.0)
MODEL_YEARS = "NPRS"  # VIN position 10: 2022-2025
PLANT_CODES = "123ABCDE"  # VIN position 11
FIRST_VISIT_WINDOW_DAYS = 30  # first visits spread over September
VISIT_GAP_DAYS = (5.0, 40.0)  # between visits of one VIN: far beyond the TTL
VISIT_COUNT_WEIGHTS = {1: 0.45, 2: 0.4, 3: 0.15}  # ~1.7 visits per VIN
# Visit kinds; "two_step" is INVESTIGATING first, then CONCLUDED.
KIND_WEIGHTS = {"direct": 0.5, "two_step": 0.3, "unresolved": 0.2}
REPEAT_KIND_WEIGHTS = {"direct": 5, "two_step": 3}  # a repeated fault always has its code
TWO_STEP_GAP_H = (1.0, 6.0)
UNRESOLVED_GAP_H = (1.0, 20.0)
UNRESOLVED_CODE_PROB = 0.5  # else text only; the code is never one the pack knows
EARLY_READING_PROB = 0.5  # two-step: the first alert shows a sub-threshold reading, else none
CODE_AGAIN_PROB = 0.8  # two-step: the confirming alert repeats the code (it need not)
# Probability that a later visit repeats an earlier fault (higher when the
# previous recheck failed), so own-history recall has something to find.
REPEAT_FAULT_PROB = 0.3
REPEAT_AFTER_FAILED_RECHECK_PROB = 0.8
# Two-step variant where the evidence arrives before the code: tests that a
# signal rule looks at every alert of the session, not only the latest.
SIGNAL_FIRST_PROB = 0.15
EXTRA_NONPACK_CODE_PROB = 0.10  # manufacturer codes the pack does not know
SECONDARY_PACK_CODE_PROB = 0.06  # a second pack code whose evidence never comes
HOT_CODE_WEIGHT = 3  # series' common faults, so similar-case recall has peers
RECHECK_PROB = 0.7
RECHECK_OK_PROB = 0.85
RECHECK_DELAY_DAYS = (2.0, 5.0)
LIFECYCLE_SHARE = 0.03
LIFECYCLE_DELAY_DAYS = (3.0, 20.0)  # after the VIN's last event: leaves no session open
ZH_SHARE = 0.6  # alert texts and notes: ~60% Chinese, ~40% English
SUFFIX_PROB = 0.35
CONTEXT_SIGNALS_MAX = 3  # plus the evidence signal: 1-4 readings per alert
MALFORMED_COUNT = 8  # one per breakage kind in _malformed
DUPLICATE_COUNT = 5
DUPLICATE_MIN_LAG = 30  # lines between an alert and its replay
SESSION_TTL = timedelta(hours=48)  # DESIGN.md §3.1; judged on event ts
TTL_MARGIN = timedelta(hours=12)  # keep every alert gap this far from the TTL

# Rule evidence drawn this far (fraction) from the threshold toward the physical
# limit, and "not yet" readings this far from the normal edge toward it.
CONFIRM_REACH = (0.02, 0.3)
SUBTHRESHOLD_REACH = (0.35, 0.85)
UNIT_DISPLAY = {"mv": "mV", "c": "°C", "pct": "%", "v": "V", "a": "A", "kpa": "kPa", "rpm": "rpm", "km": "km", "s": "s"}
VIN_WEIGHTS = (8, 7, 6, 5, 4, 3, 2, 10, 0, 9, 8, 7, 6, 5, 4, 3, 2)
# ISO 3779 check-digit transliteration (I, O and Q are not VIN characters).
VIN_VALUES = dict(zip("0123456789ABCDEFGHJKLMNPRSTUVWXYZ", map(int, "012345678912345678123457923456789"), strict=True))


class SignalSpec(NamedTuple):
    lo: float  # healthy range
    hi: float
    phys_lo: float  # what the sensor can report
    phys_hi: float
    decimals: int
    zh: str
    en: str


SIGNALS: dict[str, SignalSpec] = {
    "cell_voltage_diff_mv": SignalSpec(4, 35, 0, 800, 0, "压差", "cell delta"),
    "soh_pct": SignalSpec(86, 99, 40, 100, 1, "SOH", "SOH"),
    "pack_voltage_v": SignalSpec(345, 395, 200, 420, 1, "总压", "pack voltage"),
    "dcdc_output_v": SignalSpec(13.6, 14.4, 9, 15, 2, "DC/DC输出", "DC/DC output"),
    "isolation_drop_pct": SignalSpec(0, 15, 0, 100, 1, "绝缘下降", "isolation drop"),
    "pack_temp_spread_c": SignalSpec(1, 6, 0, 40, 1, "温差", "temp spread"),
    "current_sensor_offset_a": SignalSpec(0, 1.5, 0, 30, 2, "电流零漂", "current offset"),
    "inverter_temp_c": SignalSpec(38, 70, -20, 130, 1, "控制器温度", "inverter temp"),
    "charger_input_v": SignalSpec(212, 236, 0, 264, 1, "充电输入电压", "charger input"),
    "hvil_loop_v": SignalSpec(0.3, 1.2, 0, 5, 2, "互锁回路电压", "HVIL loop"),
    "bus_residual_v": SignalSpec(0, 30, 0, 400, 1, "下电残压", "residual bus voltage"),
    "pack_voltage_ripple_v": SignalSpec(0.5, 3, 0, 40, 2, "总压波动", "voltage ripple"),
    "battery_coolant_delta_c": SignalSpec(0.5, 5, 0, 30, 1, "水温偏差", "coolant delta"),
    "pack_temp_c": SignalSpec(18, 42, -30, 70, 1, "电池温度", "pack temp"),
    "motor_temp_c": SignalSpec(45, 95, -30, 190, 1, "电机温度", "motor temp"),
    "resolver_speed_delta_rpm": SignalSpec(0, 40, 0, 3000, 0, "旋变转速偏差", "resolver delta"),
    "phase_current_delta_a": SignalSpec(1, 8, 0, 120, 1, "相电流偏差", "phase current delta"),
    "can_timeout_s": SignalSpec(0, 0.3, 0, 30, 2, "报文超时", "CAN timeout"),
    "wheel_speed_delta_rpm": SignalSpec(0, 15, 0, 900, 0, "轮速偏差", "wheel speed delta"),
    "battery_voltage_v": SignalSpec(12.3, 14.4, 8, 15, 2, "蓄电池电压", "battery voltage"),
    "misfire_rate_pct": SignalSpec(0, 0.5, 0, 25, 2, "失火率", "misfire rate"),
    "fuel_trim_pct": SignalSpec(-8, 8, -40, 40, 1, "长期燃油修正", "long-term fuel trim"),
    "o2_switch_ratio_pct": SignalSpec(5, 40, 0, 100, 1, "后氧切换比", "rear O2 switch ratio"),
    "coolant_temp_c": SignalSpec(86, 96, -40, 130, 1, "水温", "coolant temp"),
    "rail_pressure_kpa": SignalSpec(8000, 15000, 200, 20000, 0, "轨压", "rail pressure"),
    "boost_deficit_kpa": SignalSpec(0, 12, 0, 120, 1, "增压偏差", "boost deficit"),
    "crank_sync_loss_s": SignalSpec(0, 0.05, 0, 5, 2, "曲轴信号丢失", "crank signal loss"),
    "maf_deviation_pct": SignalSpec(0, 10, 0, 80, 1, "进气量偏差", "MAF deviation"),
    "evap_decay_kpa": SignalSpec(0.02, 0.15, 0, 2, 2, "压力衰减", "EVAP pressure decay"),
    "idle_rpm": SignalSpec(680, 820, 400, 1800, 0, "怠速", "idle speed"),
    "engine_rpm": SignalSpec(750, 2800, 0, 7000, 0, "发动机转速", "engine speed"),
    "soc_pct": SignalSpec(20, 95, 0, 100, 0, "SOC", "SOC"),
}
ODOMETER = "odometer_km"  # per-VIN, grows with time; not a pack signal
CONTEXT_SIGNALS = {
    "EV": ("soc_pct", "pack_temp_c", ODOMETER, "battery_voltage_v"),
    "ICE": ("coolant_temp_c", "engine_rpm", ODOMETER, "battery_voltage_v"),
}
POWERTRAIN_FAMILIES = {
    "EV": ("battery", "hv_isolation", "thermal", "motor", "charging", "network", "chassis", "body"),
    "ICE": ("engine", "fuel", "emission", "cooling", "network", "chassis", "body", "electrical"),
}
POWERTRAIN_ONLY = {"U0100": "ICE", "U0111": "EV"}  # network codes naming one powertrain's ECU


@dataclass(frozen=True)
class SeriesSpec:
    powertrain: str
    share: float
    wmis: tuple[str, ...]  # real-looking manufacturer prefixes
    vds: tuple[str, ...]
    hot: tuple[str, ...]


SERIES = {
    "EV-A": SeriesSpec("EV", 0.4, ("LRW", "LGX"), ("E1A7C", "E2B3D"), ("P0A7F", "P0AA6", "P0A80", "C0035")),
    "EV-B": SeriesSpec("EV", 0.3, ("LGW", "LNB"), ("B5E2K", "B5E4M"), ("P0C73", "P0A78", "P0D27", "U0121")),
    "ICE-C": SeriesSpec("ICE", 0.3, ("LSV", "LFV"), ("AU218", "AU2A4"), ("P0300", "P0171", "P0420", "P0128")),
}
NONPACK_CODES = {
    "EV": ("P1A9A", "P1B77", "U3000", "P1E00", "B2AAA"),
    "ICE": ("P1336", "P2187", "P0456", "B2205", "C1A00"),
}

# Alert texts: "CODE|zh;zh|en;en"; "~EV"/"~ICE" rows are vague texts for visits that never confirm.
_TEXT_TABLE = """
P0A7F|电池包单体压差过大;BMS报单体电压不一致|Cell voltage imbalance warning;Range dropped, cell imbalance
P0A80|仪表提示需更换动力电池;电池健康度低，续航大减|Replace HV battery message;Battery health low, range well down
P0AFA|动力电池总压过低，无法上高压;停放后高压电池亏电|HV battery voltage low, not READY;Pack voltage low after parking
P0A94|12V电瓶充电异常，DC/DC报警;仪表提示低压电源故障|DC/DC fault, 12 V not charging;Low-voltage supply warning
P0AA6|仪表提示绝缘故障;雨天后报绝缘故障，限功率|Isolation fault, power limited;HV insulation fault after car wash
P0A9C|电池温度传感器信号异常;电池包温度采集偏差大|Battery temp sensor implausible;Pack temperature reading out of range
P0AC0|电流采样异常，SOC跳变;电池电流传感器故障|SOC jumps, current sensor fault;HV current reading implausible
P0A1F|电池管理系统故障，请检修;BMS内部故障报警|Battery management system fault;BMS internal fault, service required
P0C73|电机控制器过热，水泵故障;冷却水泵不转，动力受限|Inverter overheating, pump fault;Reduced power, pump not running
P0D27|交流充电频繁中断，输入电压低;慢充时充电机报输入欠压|AC charging keeps stopping;OBC reports low input voltage
P0A0D|高压互锁故障，无法上电;高压系统故障，无法READY|HV interlock fault, no start;HV system fault, HVIL open
P0AA1|下电后高压未断开，接触器粘连;高压继电器粘连|Contactor stuck closed after power-off;HV relay welded warning
P0B24|动力电池电压波动大;行驶中总压跳变，功率受限|Pack voltage unstable under load;HV voltage fluctuating, power reduced
P0CA6|电池冷却液温度信号异常;电池热管理水温传感器故障|Battery coolant temp sensor fault;Battery coolant temp implausible
P0A7E|快充时电池温度过高，功率受限;电池过温报警|Battery over temperature on DC fast charge;High battery temp warning
P0A2F|驱动电机过温，动力受限;爬坡后电机温度报警|Drive motor over temperature;Motor temp warning after hill climb
P0A3F|电机旋变信号异常，车辆抖动;电机位置传感器故障|Motor position sensor fault, jerky;Resolver error, limp mode
P0A78|电机控制器故障，加速无力;逆变器故障，动力中断|Inverter fault, loss of propulsion;Motor controller fault, weak pull
U0111|与BMS通讯丢失;仪表多个故障灯亮，电池管理失联|Lost communication with BMS;Multiple warnings, BMS offline
P0300|发动机抖动，故障灯闪烁;怠速不稳，多缸失火|Check engine light flashing, rough idle;Engine misfire, shaking at idle
P0301|1缸失火，发动机抖动;冷车启动抖动，故障灯亮|Cylinder 1 misfire, engine shudder;Rough cold start, MIL on
P0171|混合气过稀，怠速不稳;油耗升高，燃油修正偏大|System too lean, hesitation;Check engine light on, lean condition
P0087|油轨压力过低，加速无力;启动困难，燃油压力低|Fuel rail pressure low, loss of power;Hard start, low fuel pressure
P0420|三元催化效率低，故障灯亮;尾气检测不合格|Catalyst efficiency below threshold;Emission light on, failed smog test
P0442|燃油蒸发系统小泄漏;加油后故障灯亮，疑似油箱盖|EVAP small leak detected;MIL on after refuel, fuel cap suspected
P0128|冷却液温度偏低，暖风不热;水温上不去，节温器疑似常开|Engine slow to warm up, heater cold;Coolant temp stays low
P0118|水温显示异常，风扇常转;冷却液温度传感器故障|Coolant gauge reads cold, fan always on;ECT sensor circuit high
P0217|发动机水温过高报警;水温表红区，发动机过热|Engine overheating warning;Coolant temperature in red zone
P0299|涡轮增压不足，加速无力;超车无力，增压压力低|Turbo underboost, lack of power;Weak acceleration, boost below target
P0335|行驶中突然熄火，曲轴信号丢失;发动机无法启动|Engine stalled while driving;Crank sensor signal lost, no start
P0101|空气流量计信号异常，加速顿挫;进气量不合理|MAF sensor fault, hesitation;Airflow reading implausible, MIL on
P0507|怠速偏高，开空调后更明显;热车后怠速居高不下|Idle speed too high;High idle after warm-up
P0562|系统电压低，仪表闪烁;发电机不发电，电瓶灯亮|System voltage low, battery light on;Dim lights, charging warning
U0100|与发动机控制单元通讯丢失;多灯齐亮，ECM失联|Lost communication with ECM;Multiple warnings, ECM offline
U0121|ABS通讯丢失，ABS灯亮;ESP和ABS故障灯同时点亮|Lost communication with ABS module;ABS and ESP lights on together
U0073|CAN总线关闭，多个模块报故障;整车通讯中断报警|CAN bus off, modules offline;Communication bus A off
U0140|与车身控制器通讯丢失;中控锁失灵，BCM失联|Lost communication with BCM;Central locking dead, BCM offline
C0035|ABS灯亮，左前轮速信号异常;左前轮速传感器故障|ABS light on, left front wheel speed fault;LF wheel speed erratic
C0040|ESP灯亮，右前轮速信号异常;右前轮速传感器故障|ESP light on, right front wheel speed fault;RF wheel speed lost
C0045|牵引力控制灯亮，左后轮速异常;左后轮速传感器故障|Traction control light on;Left rear wheel speed erratic
B1318|蓄电池电压低，启动困难;停放两天后小电瓶亏电|12 V battery voltage low;Battery flat after two days parked
~EV|偶发异响，仪表无故障码;车辆偶发限功率|Clunk from rear, no warning;Occasional power cut
~EV|空调制冷偶尔失效;充电中断，重试后正常|Warning chime, no message
~ICE|发动机偶发异响;油耗偏高，无故障码|Rough shift, no code stored;Fuel use higher than usual
~ICE|冷车启动时间偏长;换挡偶有顿挫|Whine at speed
"""


def _parse_texts(table: str) -> dict[str, tuple[list[str], list[str]]]:
    """Rows of one key add up: key -> (Chinese texts, English texts)."""
    texts: dict[str, tuple[list[str], list[str]]] = {}
    for line in table.strip().splitlines():
        key, zh, en = line.split("|")
        pools = texts.setdefault(key, ([], []))
        pools[0].extend(zh.split(";"))
        pools[1].extend(en.split(";"))
    return texts


TEXTS = _parse_texts(_TEXT_TABLE)
SUFFIXES = (
    ("（高速行驶中）", "（冷车启动后）", "（雨天行驶）", "（市区拥堵路段）", "（夜间停放后）"),
    (" - on highway", " - after cold start", " - in rain", " - in city traffic", " - after overnight parking"),
)
NOTES_SIGNAL = {
    True: (
        ("{l} {v}{u}，复检正常", "复检{l} {v}{u}，已恢复正常"),
        ("{l} {v} {u} on recheck, within spec", "Recheck passed: {l} {v} {u}"),
    ),
    False: (
        ("复检{l}仍为 {v}{u}，故障未排除", "{l} {v}{u}，需再次进站"),
        ("{l} still {v} {u}, fault persists", "Recheck failed: {l} {v} {u}"),
    ),
}
NOTES_REPEAT = {
    True: (("路试两次未再报{c}，复检正常",), ("No {c} after two drive cycles, recheck OK",)),
    False: (("路试中{c}再次出现",), ("{c} returned during road test",)),
}


class PackError(Exception):
    """The pack and the SIGNALS table disagree, or the visit plan broke a session rule."""


@dataclass(frozen=True)
class Rule:
    signal: str | None  # None: a repeat rule
    op: str
    threshold: float
    repeat: int

    def met(self, value: float) -> bool:
        return value >= self.threshold if self.op == ">=" else value <= self.threshold


@dataclass
class Alert:
    vin: str
    series: str
    ts: datetime
    text: str
    codes: list[str]
    signals: dict[str, float | int]
    event_id: str = ""


@dataclass
class Vehicle:
    vin: str
    series: str
    odo_km: float
    daily_km: float
    coded: list[str] = field(default_factory=list)  # pack codes of its concluded visits
    last_event: datetime = FLEET_START

    @property
    def powertrain(self) -> str:
        return SERIES[self.series].powertrain


def _ts(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def session_id_for(vin: str, opened: datetime) -> str:
    return f"{vin}-{opened:%Y%m%dT%H%M%S}"


def load_rules(path: Path) -> dict[str, tuple[str, Rule]]:
    """Code -> (family, confirm rule), checked against the SIGNALS table."""
    rules: dict[str, tuple[str, Rule]] = {}
    for item in json.loads(path.read_text("utf-8"))["codes"]:
        c = item["confirm"]
        rule = Rule(c.get("signal"), c.get("op", ">="), float(c.get("threshold", 0)), int(c.get("repeat", 0)))
        if rule.signal is not None:
            spec = SIGNALS.get(rule.signal)
            if spec is None:
                raise PackError(f"{item['code']}: signal {rule.signal} has no entry in SIGNALS")
            # Healthy readings must never confirm, or context readings would.
            if rule.met(spec.lo) or rule.met(spec.hi):
                raise PackError(f"{item['code']}: healthy {rule.signal} meets {rule.op}{rule.threshold}")
        rules[item["code"]] = (item["family"], rule)
    return rules


def _round(name: str, value: float) -> float | int:
    decimals = SIGNALS[name].decimals
    return int(round(value)) if decimals == 0 else round(value, decimals)


def _normal(rng: random.Random, name: str) -> float | int:
    return _round(name, rng.uniform(SIGNALS[name].lo, SIGNALS[name].hi))


def _evidence(rng: random.Random, rule: Rule, confirming: bool) -> float | int:
    """A reading of the rule's signal that meets it, or one between healthy and the threshold."""
    name = str(rule.signal)
    spec = SIGNALS[name]
    up = rule.op == ">="
    for _ in range(50):  # rounding can land on the wrong side of the threshold: draw again
        if confirming:
            limit = spec.phys_hi if up else spec.phys_lo
            value = rule.threshold + rng.uniform(*CONFIRM_REACH) * (limit - rule.threshold)
        else:
            edge = spec.hi if up else spec.lo
            value = edge + rng.uniform(*SUBTHRESHOLD_REACH) * (rule.threshold - edge)
        rounded = _round(name, value)
        if rule.met(rounded) == confirming:
            return rounded
    raise PackError(f"cannot draw a {'confirming' if confirming else 'sub-threshold'} {name}")


class Fleet:
    """Builds the events of one fleet from one seeded random stream."""

    def __init__(self, rng: random.Random, rules: dict[str, tuple[str, Rule]]) -> None:
        self.rng = rng
        self.rules = rules
        self.alerts: list[Alert] = []
        self.rechecks: list[dict[str, Any]] = []
        self.intended: dict[str, bool] = {}  # session id -> concludes, as planned

    def codes_for(self, series: str) -> tuple[list[str], list[int]]:
        spec = SERIES[series]
        codes = [
            c
            for c, (family, _) in self.rules.items()
            if family in POWERTRAIN_FAMILIES[spec.powertrain]
            and POWERTRAIN_ONLY.get(c, spec.powertrain) == spec.powertrain
        ]
        return codes, [HOT_CODE_WEIGHT if c in spec.hot else 1 for c in codes]

    def make_vin(self, series: str, taken: set[str]) -> str:
        """WMI + VDS + check digit (ISO 3779 / North American scheme) + year + plant + serial."""
        spec, rng = SERIES[series], self.rng
        while True:
            body = (
                rng.choice(spec.wmis)
                + rng.choice(spec.vds)
                + "0"  # check digit, computed below
                + rng.choice(MODEL_YEARS)
                + rng.choice(PLANT_CODES)
                + f"{rng.randint(0, 999999):06d}"
            )
            total = sum(VIN_VALUES[ch] * w for ch, w in zip(body, VIN_WEIGHTS, strict=True))
            vin = body[:8] + ("X" if total % 11 == 10 else str(total % 11)) + body[9:]
            if vin not in taken:
                taken.add(vin)
                return vin

    def text(self, code: str | None, powertrain: str) -> str:
        lang = 0 if self.rng.random() < ZH_SHARE else 1
        text = self.rng.choice(TEXTS[code if code in TEXTS else "~" + powertrain][lang])
        if self.rng.random() < SUFFIX_PROB:
            text += self.rng.choice(SUFFIXES[lang])
        return text

    def alert(
        self, car: Vehicle, ts: datetime, topic: str | None, codes: list[str], signals: dict[str, float | int]
    ) -> Alert:
        """An alert about ``topic`` (text only), with healthy context readings added."""
        names = [n for n in CONTEXT_SIGNALS[car.powertrain] if n not in signals]
        lo = 0 if signals else 1  # every alert carries 1-4 readings
        hi = max(lo, min(CONTEXT_SIGNALS_MAX, 4 - len(signals), len(names)))
        for name in self.rng.sample(names, self.rng.randint(lo, hi)):
            if name == ODOMETER:
                signals[name] = int(car.odo_km + car.daily_km * (ts - FLEET_START).total_seconds() / 86400)
            else:
                signals[name] = _normal(self.rng, name)
        a = Alert(car.vin, car.series, ts, self.text(topic, car.powertrain), codes, signals)
        self.alerts.append(a)
        return a

    def visit(self, car: Vehicle, start: datetime, kind: str, code: str | None) -> tuple[list[Alert], bool]:
        """The alerts of one visit, and whether its session concludes."""
        rng = self.rng
        if kind == "unresolved" or code is None:
            out, ts = [], start
            for _ in range(rng.randint(1, 2)):
                codes = [rng.choice(NONPACK_CODES[car.powertrain])] if rng.random() < UNRESOLVED_CODE_PROB else []
                out.append(self.alert(car, ts, None, codes, {}))
                ts += timedelta(hours=rng.uniform(*UNRESOLVED_GAP_H))
            return out, False
        rule = self.rules[code][1]
        sig = rule.signal
        later = start + timedelta(hours=rng.uniform(*TWO_STEP_GAP_H))
        if sig is None:  # repeat rule: always two-step, one alert cannot show a code twice
            out = [self.alert(car, start, code, [code], {}), self.alert(car, later, code, [code], {})]
        elif kind == "direct":
            out = [self.alert(car, start, code, [code], {sig: _evidence(rng, rule, True)})]
        elif rng.random() < SIGNAL_FIRST_PROB:
            out = [
                self.alert(car, start, code, [], {sig: _evidence(rng, rule, True)}),
                self.alert(car, later, code, [code], {}),
            ]
        else:
            early = {sig: _evidence(rng, rule, False)} if rng.random() < EARLY_READING_PROB else {}
            again = [code] if rng.random() < CODE_AGAIN_PROB else []
            out = [
                self.alert(car, start, code, [code], early),
                self.alert(car, later, code, again, {sig: _evidence(rng, rule, True)}),
            ]
        self.decorate(car, out, code)
        return out, True

    def decorate(self, car: Vehicle, alerts: list[Alert], code: str) -> None:
        """Sometimes add a code that cannot conclude: unknown to the pack, or with no evidence."""
        rng = self.rng
        target = rng.choice([a for a in alerts if a.codes] or alerts)
        if rng.random() < EXTRA_NONPACK_CODE_PROB:
            target.codes.append(rng.choice(NONPACK_CODES[car.powertrain]))
        if rng.random() < SECONDARY_PACK_CODE_PROB:
            seen = {name for a in alerts for name in a.signals} | {None}
            options = [c for c in self.codes_for(car.series)[0] if c != code and self.rules[c][1].signal not in seen]
            if options:
                target.codes.append(rng.choice(options))

    def history(self, car: Vehicle) -> None:
        """1-3 visits of one vehicle, with rechecks after some concluded ones."""
        rng = self.rng
        codes, weights = self.codes_for(car.series)
        n_visits = rng.choices(list(VISIT_COUNT_WEIGHTS), weights=list(VISIT_COUNT_WEIGHTS.values()))[0]
        start = FLEET_START + timedelta(
            days=rng.randint(0, FIRST_VISIT_WINDOW_DAYS - 1),
            seconds=rng.randint(FIRST_ALERT_HOURS[0] * 3600, FIRST_ALERT_HOURS[1] * 3600),
        )
        last_ok: bool | None = None
        for i in range(n_visits):
            repeat_p = REPEAT_AFTER_FAILED_RECHECK_PROB if last_ok is False else REPEAT_FAULT_PROB
            code: str | None
            if car.coded and rng.random() < repeat_p:
                code, kind = (
                    car.coded[-1],
                    rng.choices(list(REPEAT_KIND_WEIGHTS), weights=list(REPEAT_KIND_WEIGHTS.values()))[0],
                )
            else:
                kind = rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0]
                code = None if kind == "unresolved" else rng.choices(codes, weights=weights)[0]
            alerts, concludes = self.visit(car, start, kind, code)
            sid = session_id_for(car.vin, alerts[0].ts)
            self.intended[sid] = concludes
            car.last_event, last_ok = alerts[-1].ts, None
            if concludes and code is not None:
                car.coded.append(code)
                if rng.random() < RECHECK_PROB:
                    last_ok = rng.random() < RECHECK_OK_PROB
                    car.last_event += timedelta(days=rng.uniform(*RECHECK_DELAY_DAYS))
                    self.rechecks.append(
                        {
                            "type": "recheck",
                            "event_id": "",
                            "vin": car.vin,
                            "session_id": sid,
                            "ts": car.last_event,
                            "recheck_ok": last_ok,
                            "note": self.note(code, last_ok),
                        }
                    )
            if i + 1 < n_visits:  # the next visit comes after this one's recheck
                start = max(
                    alerts[-1].ts + timedelta(days=rng.uniform(*VISIT_GAP_DAYS)), car.last_event + timedelta(days=1)
                )

    def note(self, code: str, ok: bool) -> str:
        """A recheck note with a plausible reading of the code's evidence."""
        rule = self.rules[code][1]
        lang = 0 if self.rng.random() < ZH_SHARE else 1
        if rule.signal is None:
            return self.rng.choice(NOTES_REPEAT[ok][lang]).format(c=code)
        spec = SIGNALS[rule.signal]
        value = _normal(self.rng, rule.signal) if ok else _evidence(self.rng, rule, True)
        unit = UNIT_DISPLAY[rule.signal.rsplit("_", 1)[1]]
        return self.rng.choice(NOTES_SIGNAL[ok][lang]).format(l=(spec.zh, spec.en)[lang], v=value, u=unit)


def predict(alerts: Sequence[Alert], rules: dict[str, tuple[str, Rule]]) -> tuple[list[str], list[str]]:
    """Replay alerts in ts order through the session rules: (opened ids, concluded ids)."""
    opened: list[str] = []
    concluded: list[str] = []
    state: dict[str, dict[str, Any]] = {}
    for a in alerts:
        s = state.get(a.vin)
        if s is None or s["done"] or a.ts - s["last"] > SESSION_TTL:
            s = state[a.vin] = {"id": session_id_for(a.vin, a.ts), "alerts": [], "done": False}
            opened.append(s["id"])
        s["last"] = a.ts
        s["alerts"].append(a)
        for code in dict.fromkeys(c for x in s["alerts"] for c in x.codes if c in rules):
            rule = rules[code][1]
            if rule.signal is None:
                met = sum(code in x.codes for x in s["alerts"]) >= rule.repeat
            else:
                met = any(rule.signal in x.signals and rule.met(x.signals[rule.signal]) for x in s["alerts"])
            if met:
                s["done"] = True
                concluded.append(s["id"])
                break
    return opened, concluded


def _check_spacing(alerts: Sequence[Alert]) -> None:
    """No gap between a VIN's alerts may sit near the TTL, where > and >= would disagree."""
    last: dict[str, datetime] = {}
    for a in alerts:
        if a.vin in last and abs(a.ts - last[a.vin] - SESSION_TTL) < TTL_MARGIN:
            raise PackError(f"{a.vin}: alert gap too close to the session TTL at {_ts(a.ts)}")
        last[a.vin] = a.ts


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def _alert_dict(a: Alert) -> dict[str, Any]:
    return {
        "type": "alert",
        "event_id": a.event_id,
        "vin": a.vin,
        "series": a.series,
        "ts": _ts(a.ts),
        "alert_text": a.text,
        "dtc_codes": a.codes,
        "signals": a.signals,
    }


def _malformed(rng: random.Random, alerts: Sequence[Alert]) -> list[str]:
    """One line per way an input can break (DESIGN.md §3.1 dead letters), built from real alerts."""
    picks = rng.sample(list(alerts), MALFORMED_COUNT)
    # A JSON round trip copies the alerts, so breaking a row never touches the real event.
    rows = [json.loads(_dump({**_alert_dict(a), "event_id": f"e-99{i:04d}"})) for i, a in enumerate(picks, 1)]
    missing_comma = _dump(rows[0]).replace(', "dtc_codes"', ' "dtc_codes"', 1)  # invalid JSON
    truncated = _dump(rows[1])[: len(_dump(rows[1])) * 3 // 5]
    rows[2]["vin"] = rows[2]["vin"][:16]  # 16 characters
    rows[3]["vin"] = rows[3]["vin"][:11] + "O" + rows[3]["vin"][12:]  # O is not a VIN character
    del rows[4]["ts"]
    # Codes that are no list (a count of codes): a reading or a code the job cannot read is set aside, its alert
    # diagnosed, and is no malformed line (here a reading over 1e15 was, until the job set such readings aside).
    rows[5]["dtc_codes"] = len(rows[5]["dtc_codes"]) + 1
    rows[6] = {"type": "telemetry", "event_id": "t-000001", **{k: rows[6][k] for k in ("vin", "ts", "signals")}}
    not_an_object = ["alert", rows[7]["event_id"], rows[7]["vin"], rows[7]["ts"]]
    return [missing_comma, truncated, *(_dump(r) for r in rows[2:7]), _dump(not_an_object)]


def _serialise(alerts: list[Alert], others: list[dict[str, Any]]) -> tuple[list[str], list[int]]:
    """Valid events sorted by ts (stable) with ids in file order: (lines, rows holding alerts)."""
    events: list[tuple[datetime, Alert | dict[str, Any]]] = [(a.ts, a) for a in alerts]
    events += [(o["ts"], o) for o in others]
    events.sort(key=lambda e: e[0])  # stable: generation order breaks ties
    counts = {"alert": 0, "recheck": 0, "lifecycle": 0}
    lines: list[str] = []
    alert_rows: list[int] = []
    for ts, ev in events:
        if isinstance(ev, Alert):
            counts["alert"] += 1
            ev.event_id = f"e-{counts['alert']:06d}"
            alert_rows.append(len(lines))
            lines.append(_dump(_alert_dict(ev)))
        else:
            counts[ev["type"]] += 1
            n = counts[ev["type"]]
            event_id = f"r-{n:05d}" if ev["type"] == "recheck" else f"l-{n:04d}"
            lines.append(_dump({**ev, "event_id": event_id, "ts": _ts(ts)}))
    return lines, alert_rows


def _corrupt(rng: random.Random, lines: list[str], alert_rows: list[int], bad: list[str]) -> list[str]:
    """Broken lines at evenly spread positions; exact replays of early alerts well after the originals."""
    inserts: dict[int, list[str]] = {}
    for k, line in enumerate(bad, 1):
        inserts.setdefault(k * len(lines) // (len(bad) + 1), []).append(line)
    early = [row for row in alert_rows if row < len(lines) * 3 // 5]
    for row in sorted(rng.sample(early, DUPLICATE_COUNT)):
        at = rng.randint(min(row + DUPLICATE_MIN_LAG, len(lines) - 1), len(lines) - 1)
        inserts.setdefault(at, []).append(lines[row])
    out: list[str] = []
    for i, line in enumerate(lines):
        out += [line, *inserts.get(i, [])]
    return out


def build(n_vins: int, seed: int) -> tuple[list[str], dict[str, Any]]:
    """All lines of the file, and the content of expected.json."""
    rng = random.Random(seed)
    rules = load_rules(PACK_PATH)
    fleet = Fleet(rng, rules)
    taken: set[str] = set()
    names = list(SERIES)
    cars = []
    for _ in range(n_vins):
        series = rng.choices(names, weights=[SERIES[s].share for s in names])[0]
        car = Vehicle(fleet.make_vin(series, taken), series, rng.uniform(*ODOMETER_START_KM), rng.uniform(*DAILY_KM))
        fleet.history(car)
        cars.append(car)
    lifecycle: list[dict[str, Any]] = []
    for car in rng.sample(cars, max(1, round(n_vins * LIFECYCLE_SHARE))):
        ts = car.last_event + timedelta(days=rng.uniform(*LIFECYCLE_DELAY_DAYS))
        change = rng.choice(["scrapped", "transferred"])
        lifecycle.append({"type": "lifecycle", "event_id": "", "vin": car.vin, "ts": ts, "change": change})

    # The prediction replays the stream; the visit plan must agree with it.
    alerts = sorted(fleet.alerts, key=lambda a: a.ts)  # stable, like _serialise
    _check_spacing(alerts)
    opened, concluded = predict(alerts, rules)
    wrong = {s for s, c in fleet.intended.items() if c != (s in concluded)} | (set(opened) ^ set(fleet.intended))
    if wrong:
        raise PackError(f"visit plan and session replay disagree on {sorted(wrong)[:5]}")
    if not {r["session_id"] for r in fleet.rechecks} <= set(concluded):
        raise PackError("a recheck names a session that does not conclude")

    lines, alert_rows = _serialise(fleet.alerts, fleet.rechecks + lifecycle)
    bad = _malformed(rng, fleet.alerts)
    final = _corrupt(rng, lines, alert_rows, bad)
    return final, {
        "vins": n_vins,
        "series": names,
        "lines": len(final),
        "alerts": len(fleet.alerts),
        "valid_events": len(lines),
        "malformed": len(bad),
        "duplicates": DUPLICATE_COUNT,
        "sessions_opened": len(opened),
        "concluded_sessions": concluded,
        "rechecks": len(fleet.rechecks),
        "lifecycle": len(lifecycle),
    }


def _summary(x: dict[str, Any], out: Path) -> str:
    return (
        f"gen_demo: {x['lines']} lines ({x['valid_events']} valid events: {x['alerts']} alerts, "
        f"{x['rechecks']} rechecks, {x['lifecycle']} lifecycle), {x['vins']} VINs, series {','.join(x['series'])}, "
        f"{x['sessions_opened']} sessions, {len(x['concluded_sessions'])} expected concluded, "
        f"{x['malformed']} malformed, {x['duplicates']} duplicates -> {out}"
    )


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Generate the deterministic vehicle-doctor demo alert stream.")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSONL to write; expected.json goes beside it")
    p.add_argument("--vins", type=int, default=DEFAULT_VINS, help=f"fleet size (at least {MIN_VINS})")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the one random stream")
    args = p.parse_args(argv)
    if args.vins < MIN_VINS:
        p.error(f"--vins must be at least {MIN_VINS}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        lines, expected = build(args.vins, args.seed)
    except (OSError, ValueError, KeyError, PackError) as err:
        print(f"gen_demo: {err}", file=sys.stderr)
        return 1
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    (out.parent / "expected.json").write_text(_dump(expected) + "\n", encoding="utf-8")
    print(_summary(expected, out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
