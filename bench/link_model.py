"""A model of one synchronous iteration's time against the number of workers, for a ring
all-reduce and for parameter servers on the worker hosts (bench/scaling.py fits it to the
measured points and predicts beyond them; docs/performance.md).

Both layouts move the same bytes per host: each host's link carries 2 (N-1)/N x M each way
per iteration (the ring's reduce-scatter and all-gather; the servers' gradients in and models
out, a slice of M/N per peer). They differ in how those bytes move:

- the ring: one flow per link direction, pipelined over 2 (N-1) steps of M/N, each step a
  round of latency and synchronisation with a neighbour;
- servers on the worker hosts: N-1 concurrent flows per link direction in each of two phases
  (gradients in, then models out) with a barrier between them (every member's slice in, the
  step decided and commanded), and per peer a call on each side.

So an iteration is

    T(N) = C (1 + s E[max of N]) + k x wire(N) + a x (N - 1) + o x M / R

- C: the balanced compute of one iteration; s: the devices' relative jitter (a sync step waits
  for the slowest of N draws; E[max of N] for standard normals);
- wire(N) = 2 (N-1)/N x M / R: the bytes per host over the link's rate R;
- k: how far from the wire a layout's transfers run (1 = at the link's rate; flow count,
  incast and stragglers within a phase raise it);
- a: seconds per peer (the ring's per-step latency, twice per peer; the servers' per-call and
  fan-out costs);
- o: local work per byte of model, in link-times (copies, the optimizer's step, sums).

With local steps (the servers' --local_steps), a round is H inner steps of compute and one
exchange of the servers' layout, the pseudo-gradient's bytes scaled by the wire's type
(bf16: 1/2): per inner step

    T_local(N) = C (1 + s E[max of N]) + (k x wire(N) x b + a x (N - 1) + o x M / R) / H

with the servers' fitted k, a and o (predict_local).

k, a and o are fitted per layout by least squares on measured points, none negative (a fit
free to go below 0 bought a few tenths of a percent on the points with a negative cost per
peer, which then predicts a ring that gets faster with more hosts); the fit is judged by how
well it predicts points it was not given.
"""

import itertools
import math

import numpy as np

FEATURES = ("k", "a", "o")


def expected_max_normal(n, points=4001, span=9.0):
    """E[max of n independent standard normals] (0 for n = 1), by numerical integration of
    x n phi(x) Phi(x)^(n-1)."""
    if n < 1:
        raise ValueError(f"expected_max_normal: n={n} must be at least 1")
    x = np.linspace(-span, span, points)
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    density = n * phi * cdf ** (n - 1)
    return float(np.sum(x * density) * (x[1] - x[0]))


def wire_seconds(n, model_bytes, rate):
    """Seconds the bytes per host take at the link's rate: 2 (N-1)/N x M / R."""
    return 2 * (n - 1) / n * model_bytes / rate


def compute_seconds(n, compute_s, jitter):
    """A sync iteration's compute: the slowest of n devices of relative jitter `jitter`."""
    return compute_s * (1 + jitter * expected_max_normal(n))


def _row(n, model_bytes, rate):
    return [wire_seconds(n, model_bytes, rate), n - 1, model_bytes / rate]


def fit(points, jitter):
    """The parameters {k, a, o} that best explain `points`, each a dict with workers,
    model_bytes, rate (bytes/s), compute_s and iteration_s, none of them negative (a link
    runs no faster than its rate, a peer and a byte cost no less than nothing): least squares
    over every subset of the parameters left free, the others held at 0, the best one whose
    values are all >= 0. Needs three points or more."""
    if len(points) < len(FEATURES):
        raise ValueError(f"fit: {len(points)} points for {len(FEATURES)} parameters")
    x = np.array([_row(p["workers"], p["model_bytes"], p["rate"]) for p in points], dtype=float)
    y = np.array([p["iteration_s"] - compute_seconds(p["workers"], p["compute_s"], jitter) for p in points])
    if np.linalg.matrix_rank(x) < len(FEATURES):
        raise ValueError("fit: the points do not separate the parameters (vary workers and model size)")
    best, best_residual = np.zeros(len(FEATURES)), float(np.sum(y * y))
    for free in itertools.chain.from_iterable(itertools.combinations(range(len(FEATURES)), r)
                                              for r in range(1, len(FEATURES) + 1)):
        cols = list(free)
        values, _, _, _ = np.linalg.lstsq(x[:, cols], y, rcond=None)
        if np.any(values < 0):
            continue
        solution = np.zeros(len(FEATURES))
        solution[cols] = values
        residual = float(np.sum((x @ solution - y) ** 2))
        if residual < best_residual:
            best, best_residual = solution, residual
    return dict(zip(FEATURES, (float(v) for v in best)))


def predict(params, n, model_bytes, rate, compute_s, jitter):
    """The model's iteration time in seconds."""
    k, a, o = (params[f] for f in FEATURES)
    return compute_seconds(n, compute_s, jitter) + float(np.dot([k, a, o], _row(n, model_bytes, rate)))


def predict_local(params, n, model_bytes, rate, compute_s, jitter, steps, wire_scale=1.0):
    """An inner step's time in seconds with local steps: the servers' exchange (`params`,
    the pseudo-gradient's bytes times `wire_scale`) once every `steps` steps."""
    k, a, o = (params[f] for f in FEATURES)
    exchange = k * wire_seconds(n, model_bytes, rate) * wire_scale + a * (n - 1) + o * model_bytes / rate
    return compute_seconds(n, compute_s, jitter) + exchange / steps


def crossing(params_a, params_b, model_bytes, rate, compute_s, jitter, workers):
    """The first worker count in `workers` (ascending) at which layout b's predicted
    iteration is no longer than layout a's, or None."""
    for n in workers:
        if predict(params_b, n, model_bytes, rate, compute_s, jitter) <= predict(params_a, n, model_bytes, rate,
                                                                                 compute_s, jitter):
            return n
    return None
