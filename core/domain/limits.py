"""Bounds on the numbers a user can pass: a value past them is a typo or an attack, and
refusing it early is one clear line instead of an OverflowError or a machine brought down."""

from __future__ import annotations

import argparse
import math
import os

from core.errors import InvalidInput

MAX_WORKERS = 10_000  # any cluster; a local one is bounded by the machine (local_worker_limit)
MAX_STEPS = 1_000_000_000
MAX_TIMEOUT_S = 3600.0
LOCAL_WORKERS_PER_CPU = 4  # a tiny-model worker mostly waits on its peers; more thrash the machine
LOCAL_WORKER_MEMORY = 512 * 1024 * 1024  # bytes a tiny-model worker needs at least
# What geotrain ships to pods as source (the recipes, a custom-training --workdir): per file, and in all
DELIVERY_FILE_BYTES = 256 << 10
DELIVERY_TOTAL_BYTES = 4 << 20


def local_worker_limit() -> int:
    """Workers this machine can run at once: by CPUs and, where known, by memory."""
    by_cpu = (os.cpu_count() or 1) * LOCAL_WORKERS_PER_CPU
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return by_cpu
    return max(1, min(by_cpu, memory // LOCAL_WORKER_MEMORY))


def check_count(name: str, value: int, highest: int, why: str = "") -> None:
    """`value` (already an int) within 1..highest, else one InvalidInput naming the flag."""
    if value < 1:
        raise InvalidInput(f"--{name} must be 1 or more, got {value}", f"pass --{name} 1 or more")
    if value > highest:
        raise InvalidInput(f"--{name} {value} is more than {highest}{why}",
                           f"pass --{name} {highest} or fewer")


def int_between(low: int, high: int):
    """An argparse type: a whole number in low..high (argparse reports the error in one line)."""
    def parse(text: str) -> int:
        try:
            value = int(text) if len(text) <= 30 else None
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low} to {high}, not {text[:40]!r}")
        return value
    return parse


def float_between(low: float, high: float, unit: str = "", low_open: bool = True):
    """An argparse type: a finite number in (low, high] (nan, inf and huge values refused)."""
    def parse(text: str) -> float:
        try:
            value = float(text) if len(text) <= 30 else math.nan
        except ValueError:
            value = math.nan
        above = value > low if low_open else value >= low
        if not (math.isfinite(value) and above and value <= high):
            raise argparse.ArgumentTypeError(
                f"expected a number {'above' if low_open else 'from'} {low:g} up to {high:g}{unit}, not {text[:40]!r}")
        return value
    return parse
