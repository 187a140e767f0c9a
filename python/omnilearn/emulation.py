"""Emulated devices for the Python worker, the same as the C++ worker's --emulate_device
(worker/emulated_device.h): every step takes FIXED_MS + MS_PER_SAMPLE x batch milliseconds of
wall time, times a per-step normal factor of relative standard deviation JITTER (clamped to
[0.5, 1.5]). The real forward, loss and backward run first; the worker waits out the rest and
reports the emulated time. "EPOCH@PROFILE,..." changes the profile with the global epoch.

    Worker(..., emulate_device="2:0.5:0.05")
    Worker(..., emulate_device="0@2:0.5,1.5@2:4:0.05", dataset_size=len(x))
"""

import random
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

_FORMAT = "FIXED_MS:MS_PER_SAMPLE[:JITTER] (e.g. 2:0.5:0.05), or EPOCH@PROFILE,... (e.g. 0@2:0.5,1@2:4)"


@dataclass(frozen=True)
class DeviceProfile:
    fixed_ms: float
    ms_per_sample: float
    jitter: float = 0.0


def _number(text: str) -> float:
    value = float(text)  # ValueError for what is no number
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(text)
    return value


def _profile(text: str) -> DeviceProfile:
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError(text)
        p = DeviceProfile(*(_number(x) for x in parts))
    except ValueError:
        raise ValueError(f"emulate_device: '{text}' is not {_FORMAT}") from None
    if p.fixed_ms < 0 or p.ms_per_sample < 0 or p.fixed_ms + p.ms_per_sample <= 0:
        raise ValueError(f"emulate_device: '{text}': times must be finite, >= 0 and not both 0")
    if not 0 <= p.jitter < 0.5:
        raise ValueError(f"emulate_device: '{text}': JITTER must be in [0, 0.5)")
    return p


def parse(text: str) -> List[Tuple[float, DeviceProfile]]:
    """The schedule as (from epoch, profile) pairs; ValueError with the expected form."""
    if "@" not in text:
        return [(0.0, _profile(text))]
    steps: List[Tuple[float, DeviceProfile]] = []
    for entry in text.split(","):
        epoch_text, sep, profile = entry.partition("@")
        try:
            epoch = _number(epoch_text) if sep else None
        except ValueError:
            epoch = None
        if epoch is None:
            raise ValueError(f"emulate_device: '{entry}' is not EPOCH@PROFILE")
        if (epoch != 0) if not steps else not epoch > steps[-1][0]:
            raise ValueError(f"emulate_device: the schedule starts at epoch 0 and its epochs increase (at '{entry}')")
        steps.append((epoch, _profile(profile)))
    return steps


class EmulatedDevice:
    """Paces steps to a device profile. `now` and `sleep` are injectable (tests drive them)."""

    def __init__(self, text: str, seed: Optional[int] = None, now: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep):
        self.steps = parse(text)
        self._rng = random.Random(seed)
        self._now, self._sleep = now, sleep
        self.overruns = 0  # steps whose real compute took longer than their emulated time

    def at(self, epoch: float) -> DeviceProfile:
        profile = self.steps[0][1]
        for start, p in self.steps:
            if epoch >= start:
                profile = p
        return profile

    def step_seconds(self, batch: int, epoch: float) -> float:
        p = self.at(epoch)
        factor = min(1.5, max(0.5, self._rng.gauss(1.0, p.jitter))) if p.jitter > 0 else 1.0
        return factor * (p.fixed_ms + p.ms_per_sample * batch) / 1000

    def pace(self, started: float, batch: int, epoch: float) -> Tuple[float, float]:
        """For a step whose compute started at `started` (on `now`'s clock): waits out its
        emulated time and returns (seconds to report, real seconds). An overrun (real compute
        longer than the emulated time) is counted and reports the time the step really took."""
        emulated = self.step_seconds(batch, epoch)
        real = self._now() - started
        if real > emulated:
            self.overruns += 1
            return real, real
        self._sleep(emulated - real)
        return emulated, real
