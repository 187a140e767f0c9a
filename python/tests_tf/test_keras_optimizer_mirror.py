"""The server's optimizers against Keras's own, step by step on the same gradients: each Keras
optimizer the Keras door runs, described as a worker describes it
(omnilearn.keras.describe_optimizer), 60 steps through server/checkpoint/optimizer_replay (the
rate halved at step 30, a restart from a checkpoint after step 40) and through the optimizer's
own apply_gradients. The weights must agree to 1e-6 of their size after every step, and not
with the rate 1% off (the check sees a rule's change). SGD, Adam, AdamW, Adadelta, Adagrad,
Adamax, Nadam, RMSprop, Adafactor and Muon run in Keras's own form (their option "keras");
Lion, Lamb and Ftrl are Keras's only."""

import json
import os
import shutil
import subprocess
import tempfile

import keras
import numpy as np
import pytest

from omnilearn import keras as okeras

_REPLAY = os.environ.get("OMNILEARN_OPTIMIZER_REPLAY") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "bazel-bin", "server", "checkpoint", "optimizer_replay")
_SHAPES = {"a": (4, 6), "b": (6,), "c": (7, 3), "d": (2, 3, 5)}
_STEPS, _RATE_CHANGE, _RESTART = 60, 30, 40
_RECORD = os.environ.get("OMNILEARN_MIRROR_RECORD")  # bench/optimizer_mirror.py: each case's figure

_CASES = [  # (id, the optimizer, the tolerance)
    ("adadelta", lambda: keras.optimizers.Adadelta(learning_rate=1.0, rho=0.9), 1e-6),
    ("nadam", lambda: keras.optimizers.Nadam(learning_rate=0.01, weight_decay=0.05), 1e-6),
    ("lion", lambda: keras.optimizers.Lion(learning_rate=0.001, weight_decay=0.1), 1e-6),
    ("lamb", lambda: keras.optimizers.Lamb(learning_rate=0.01, weight_decay=0.01), 1e-6),
    ("adamw", lambda: keras.optimizers.AdamW(learning_rate=0.01, weight_decay=0.05), 1e-6),
    ("adam_amsgrad", lambda: keras.optimizers.Adam(learning_rate=0.01, beta_1=0.8, amsgrad=True), 1e-6),
    ("adagrad", lambda: keras.optimizers.Adagrad(learning_rate=0.05, weight_decay=0.01), 1e-6),
    ("adamax", lambda: keras.optimizers.Adamax(learning_rate=0.01), 1e-6),
    ("rmsprop_centered_momentum",
     lambda: keras.optimizers.RMSprop(learning_rate=0.01, momentum=0.9, centered=True, weight_decay=0.01), 1e-6),
    ("sgd_nesterov", lambda: keras.optimizers.SGD(learning_rate=0.05, momentum=0.9, nesterov=True), 1e-6),
    ("sgd_momentum_decay", lambda: keras.optimizers.SGD(learning_rate=0.05, momentum=0.8, weight_decay=0.01), 1e-6),
    ("sgd", lambda: keras.optimizers.SGD(learning_rate=0.05), 1e-6),
    ("adadelta_decay", lambda: keras.optimizers.Adadelta(learning_rate=0.5, weight_decay=0.02), 1e-6),
    ("ftrl", lambda: keras.optimizers.Ftrl(learning_rate=0.05), 1e-6),
    ("ftrl_regularized", lambda: keras.optimizers.Ftrl(
        learning_rate=0.1, learning_rate_power=-0.6, initial_accumulator_value=0.5, l1_regularization_strength=0.01,
        l2_regularization_strength=0.02, l2_shrinkage_regularization_strength=0.01, beta=0.1), 1e-6),
    ("adafactor", lambda: keras.optimizers.Adafactor(learning_rate=0.05, weight_decay=0.01), 1e-6),
    ("adafactor_clipped", lambda: keras.optimizers.Adafactor(learning_rate=0.5, clip_threshold=0.5), 1e-6),
    ("muon", lambda: keras.optimizers.Muon(learning_rate=0.01, adam_lr_ratio=0.5), 1e-6),
    ("muon_plain", lambda: keras.optimizers.Muon(learning_rate=0.02, nesterov=False, rms_rate=None,
                                                 exclude_layers=["c"], weight_decay=0.01), 1e-6),
]


def _spec(described):
    index = {n: i for i, n in enumerate(_SHAPES)}
    groups = [{"tensors": [index[t] for t in g["tensors"]], "lr": g["lr"], "weight_decay": g["weight_decay"],
               "hyper": g["options"]} for g in described["groups"]]
    return {"kind": described["kind"], "learning_rate": described["lr"], "weight_decay": described["weight_decay"],
            "momentum": 0.0, "beta1": 0.9, "beta2": 0.999, "eps": -1.0, "hyper": described["options"],
            "groups": groups}


def _replay(spec, initial, gradients):
    """The server's weights after each step (server/checkpoint/optimizer_replay)."""
    work = tempfile.mkdtemp(prefix="omnilearn-keras-mirror-")
    try:
        paths = [os.path.join(work, f) for f in ("spec.json", "in.bin", "out.bin")]
        with open(paths[0], "w") as f:
            json.dump(spec, f)
        np.concatenate([initial] + gradients).astype(np.float32).tofile(paths[1])
        subprocess.run([_REPLAY] + paths, check=True, timeout=120)
        return np.fromfile(paths[2], dtype=np.float32).reshape(_STEPS, -1)
    finally:
        shutil.rmtree(work)


@pytest.mark.parametrize("make,tolerance", [c[1:] for c in _CASES], ids=[c[0] for c in _CASES])
def test_the_server_steps_as_keras(make, tolerance, request):
    rng = np.random.default_rng(5)
    variables = [keras.Variable(rng.normal(size=s).astype(np.float32), name=n) for n, s in _SHAPES.items()]
    initial = np.concatenate([v.numpy().reshape(-1) for v in variables])
    opt = make()
    described = okeras.describe_optimizer(opt, list(zip(_SHAPES, variables)))
    factors = [g["lr"] / described["lr"] for g in described["groups"]] or [1.0]
    spec = {"optimizer": _spec(described),
            "tensors": [{"name": n, "shape": list(s)} for n, s in _SHAPES.items()],
            "steps": _STEPS, "rates": [None] * _STEPS, "restart_after": _RESTART}
    gradients, theirs = [], []
    for step in range(_STEPS):
        if step == _RATE_CHANGE:
            opt.learning_rate = float(opt.learning_rate) * 0.5
            spec["rates"][step] = [float(opt.learning_rate) * f for f in factors]
        grads = [rng.normal(size=s).astype(np.float32) for s in _SHAPES.values()]
        opt.apply_gradients(zip([keras.ops.convert_to_tensor(g) for g in grads], variables))
        gradients.append(np.concatenate([g.reshape(-1) for g in grads]))
        theirs.append(np.concatenate([v.numpy().reshape(-1) for v in variables]))
    theirs = np.stack(theirs)

    def worst(ours):
        return (np.abs(ours - theirs).max(axis=1) / np.abs(theirs).max(axis=1)).max()
    ours = worst(_replay(spec, initial, gradients))
    assert ours <= tolerance
    if _RECORD:
        with open(_RECORD, "a") as f:
            f.write(json.dumps({"framework": f"Keras {keras.__version__}", "case": request.node.callspec.id,
                                "worst": float(ours), "tolerance": tolerance}) + "\n")
    spec["optimizer"]["learning_rate"] *= 1.01
    for g in spec["optimizer"]["groups"]:
        g["lr"] *= 1.01
    assert worst(_replay(spec, initial, gradients)) > 10 * tolerance
