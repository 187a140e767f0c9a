"""Cumulative counters sampled over time (a process's CPU time, a port's bytes): their values
at any instant, interpolated between the samples around it."""


def value_at(series, t):
    """`series`: [(time, (counter, ...)), ...] in time order. The counters at time t, linear
    between the samples around it; the first or last sample's outside them."""
    if t <= series[0][0]:
        return series[0][1]
    for (t0, a), (t1, b) in zip(series, series[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
            return tuple(x + f * (y - x) for x, y in zip(a, b))
    return series[-1][1]
