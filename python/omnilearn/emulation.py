"""Emulated devices for the Python worker: the C++ worker's --emulate_device itself
(worker/devices/emulated_device.h, bound as omnilearn._core.EmulatedDevice), so both languages
pace steps by one rule. Every step takes FIXED_MS + MS_PER_SAMPLE x batch milliseconds of
wall time, times a per-step normal factor of relative standard deviation JITTER (clamped to
[0.5, 1.5]). The real forward, loss and backward run first; the worker waits out the rest and
reports the emulated time. "EPOCH@PROFILE,..." changes the profile with the global epoch.

    Worker(..., emulate_device="2:0.5:0.05")
    Worker(..., emulate_device="0@2:0.5,1.5@2:4:0.05", dataset_size=len(x))
"""

import os
import time
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from omnilearn._native import core as _core


@dataclass(frozen=True)
class DeviceProfile:
    fixed_ms: float
    ms_per_sample: float
    jitter: float = 0.0


def parse(text: str) -> None:
    """Checks a device's text; ValueError (the C++ parser's message) with the expected form."""
    _core.EmulatedDevice(text, 0)


class EmulatedDevice:
    """Paces steps to a device profile. `now` and `sleep` are injectable (tests drive them);
    `seed` seeds the jitter (None: a random one)."""

    def __init__(self, text: str, seed: Optional[int] = None, now: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep):
        seed = int.from_bytes(os.urandom(8), "little") if seed is None else seed % (1 << 64)
        self._device = _core.EmulatedDevice(text, seed)
        self._now, self._sleep = now, sleep
        self.overruns = 0  # steps whose real compute took longer than their emulated time

    def at(self, epoch: float) -> DeviceProfile:
        return DeviceProfile(*self._device.at(epoch))

    def step_seconds(self, batch: int, epoch: float) -> float:
        return self._device.step_seconds(batch, epoch)

    def pace(self, started: float, batch: int, epoch: float) -> Tuple[float, float]:
        """For a step whose compute started at `started` (on `now`'s clock): waits out its
        emulated time and returns (seconds to report, real seconds). An overrun (real compute
        longer than the emulated time) is counted and reports the time the step really took."""
        emulated, real, overrun = self._device.pace(started, batch, epoch, self._now, self._sleep)
        if overrun:
            self.overruns += 1
            return real, real
        return emulated, real
