"""The server's optimizers against torch.optim's own, step by step on the same gradients.

Each case builds a torch.optim optimizer with two param groups (the second with its own
rate, decay and options), describes it as a worker does (omnilearn.optim.describe), and
runs both on the same gradients for 60 steps: the server's through
server/checkpoint/optimizer_replay, which also changes the rates at step 30 as a scheduler
does and restarts from a checkpoint after step 40. The weights must agree to 1e-6 of their
size after every step; a rate 1% off must not (the check sees a rule's change).
"""

import json
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
import torch

from omnilearn import optim

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPLAY = os.environ.get("OMNILEARN_OPTIMIZER_REPLAY") or os.path.join(
    _HERE, "..", "..", "bazel-bin", "server", "checkpoint", "optimizer_replay")
_SHAPES = {"a": (4, 6), "b": (6,), "c": (2, 3, 5)}
_STEPS, _RATE_CHANGE, _RESTART = 60, 30, 40
_TOLERANCE = 1e-6
_RECORD = os.environ.get("OMNILEARN_MIRROR_RECORD")  # bench/optimizer_mirror.py: each case's figure


def _record(case, worst, tolerance):
    """Appends the case's largest difference to bench/optimizer_mirror.py's file, when it asks."""
    if _RECORD:
        with open(_RECORD, "a") as f:
            f.write(json.dumps({"framework": f"torch {torch.__version__}", "case": case, "worst": float(worst),
                                "tolerance": tolerance}) + "\n")


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        for name, shape in _SHAPES.items():
            self.register_parameter(name, torch.nn.Parameter(torch.randn(shape, generator=gen)))


def _has(cls, option=None):
    c = getattr(torch.optim, cls, None)
    return c is not None and (option is None or option in c.__init__.__code__.co_varnames)


# What a case needs of the installed torch (Debian's is 1.13; the pip venv's runs every case).
_NEEDS = {
    "decoupled_weight_decay": lambda cls: _has(cls, "decoupled_weight_decay"),
    "Adafactor": lambda cls: _has("Adafactor"),
    # torch < 2 multiplied mu into NAdam's mu_product_next twice (fixed since); the server runs today's rule.
    "torch 2": lambda cls: int(torch.__version__.split(".")[0]) >= 2,
}


# (id, torch.optim class, its keyword arguments, group 1's own, what the installed torch needs)
_CASES = [
    ("sgd", "SGD", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-2), dict(momentum=0.5), None),
    ("sgd_nesterov", "SGD", dict(lr=0.05, momentum=0.9, nesterov=True), dict(weight_decay=1e-3), None),
    ("sgd_maximize", "SGD", dict(lr=0.05, maximize=True), dict(), None),
    ("adam_amsgrad", "Adam", dict(lr=0.01, betas=(0.8, 0.99), amsgrad=True, weight_decay=1e-2),
     dict(betas=(0.9, 0.95)), None),
    ("adam_maximize", "Adam", dict(lr=0.01, maximize=True), dict(eps=1e-6), None),
    ("adamw_amsgrad", "AdamW", dict(lr=0.01, amsgrad=True, weight_decay=0.1), dict(weight_decay=0.0), None),
    ("adadelta", "Adadelta", dict(lr=1.0, rho=0.95, weight_decay=1e-2), dict(rho=0.8), None),
    ("adagrad", "Adagrad", dict(lr=0.05, lr_decay=0.01, initial_accumulator_value=0.1, weight_decay=1e-3),
     dict(eps=1e-6), None),
    ("adamax", "Adamax", dict(lr=0.01, weight_decay=1e-2), dict(betas=(0.8, 0.9)), None),
    ("nadam", "NAdam", dict(lr=0.01, momentum_decay=0.01, weight_decay=1e-2), dict(), "torch 2"),
    ("nadam_decoupled", "NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
     dict(betas=(0.85, 0.99)), "decoupled_weight_decay"),
    ("radam", "RAdam", dict(lr=0.01, weight_decay=1e-2), dict(betas=(0.9, 0.99)), None),
    ("radam_decoupled", "RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True), dict(),
     "decoupled_weight_decay"),
    ("rmsprop_centered_momentum", "RMSprop", dict(lr=0.01, alpha=0.9, momentum=0.9, centered=True,
                                                  weight_decay=1e-2), dict(momentum=0.5), None),
    ("rmsprop", "RMSprop", dict(lr=0.01), dict(alpha=0.95), None),
    ("rprop", "Rprop", dict(lr=0.01, etas=(0.4, 1.3), step_sizes=(1e-5, 1.0)), dict(etas=(0.5, 1.1)), None),
    ("asgd", "ASGD", dict(lr=0.05, lambd=1e-2, alpha=0.7, t0=10, weight_decay=1e-3), dict(lambd=1e-3), None),
    ("adafactor", "Adafactor", dict(lr=0.05, weight_decay=1e-2), dict(d=0.5), "Adafactor"),
]


def _groups(model, own):
    return [{"params": [model.a, model.c]}, {"params": [model.b], "lr": 0.02, **own}]


def _server_spec(described, names):
    """omnilearn.optim.describe's dict as optimizer_replay's (server/checkpoint/optimizer_json.h)."""
    index = {n: i for i, n in enumerate(names)}
    groups = [{"tensors": [index[t] for t in g["tensors"]], "lr": g["lr"], "weight_decay": g["weight_decay"],
               "hyper": g["options"]} for g in described["groups"]]
    return {"kind": described["kind"], "learning_rate": described["lr"], "weight_decay": described["weight_decay"],
            "momentum": 0.0, "beta1": 0.9, "beta2": 0.999, "eps": -1.0, "hyper": described["options"],
            "groups": groups}


def _replay(spec, initial, gradients, work):
    """The server's weights after each step."""
    paths = [os.path.join(work, f) for f in ("spec.json", "in.bin", "out.bin")]
    with open(paths[0], "w") as f:
        json.dump(spec, f)
    np.concatenate([initial] + gradients).astype(np.float32).tofile(paths[1])
    subprocess.run([_REPLAY] + paths, check=True, timeout=120)
    return np.fromfile(paths[2], dtype=np.float32).reshape(len(gradients), -1)


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def _mirror(cls, kwargs, own, model=None, make=None):
    """(torch's weights after each step, the server's spec, the initial weights, the
    gradients): getattr(torch.optim, cls) over _groups, or make(model)'s optimizer (a list too)."""
    torch.manual_seed(0)
    model = model or _Model()
    opt = make(model) if make else getattr(torch.optim, cls)(_groups(model, own), **kwargs)
    opts = opt if isinstance(opt, list) else [opt]
    names = [n for n, _ in model.named_parameters()]
    spec = {"optimizer": _server_spec(optim.describe(opt, model), names),
            "tensors": [{"name": n, "shape": list(p.shape)} for n, p in model.named_parameters()],
            "steps": _STEPS, "rates": [None] * _STEPS, "restart_after": _RESTART}
    initial = _flat(model)
    gen = torch.Generator().manual_seed(1)
    gradients, theirs = [], []
    for step in range(_STEPS):
        if step == _RATE_CHANGE:  # as a scheduler does between steps
            for g in (g for o in opts for g in o.param_groups):
                g["lr"] = g["lr"] * 0.5
            spec["rates"][step] = optim.rates(opt)
        grads = [torch.randn(p.shape, generator=gen) for p in model.parameters()]
        for p, g in zip(model.parameters(), grads):
            p.grad = g.clone()
        for o in opts:
            o.step()
        gradients.append(torch.cat([g.reshape(-1) for g in grads]).numpy())
        theirs.append(_flat(model))
    return np.stack(theirs), spec, initial, gradients


def _worst(ours, theirs):
    """Each step's largest difference, relative to the largest weight."""
    return np.abs(ours - theirs).max(axis=1) / np.abs(theirs).max(axis=1)


@pytest.fixture
def work():
    path = tempfile.mkdtemp(prefix="omnilearn-mirror-")
    yield path
    shutil.rmtree(path)


def _check_mirrored(case, mirrored, work, tolerance=_TOLERANCE, sensitive=True):
    """The server's steps within `tolerance` of torch's; and, with group 0's rate 1% off,
    not (`sensitive`): the check sees a rule's change. Returns the largest difference."""
    if not os.path.exists(_REPLAY):
        pytest.fail(f"no {_REPLAY}: bazel build //server/checkpoint:optimizer_replay")
    theirs, spec, initial, gradients = mirrored
    worst = _worst(_replay(spec, initial, gradients, work), theirs)
    assert worst.max() <= tolerance, f"step {int(worst.argmax())} differs by {worst.max():.2e} of the weights"
    _record(case, worst.max(), tolerance)
    if not sensitive:
        return worst.max()
    spec["optimizer"]["learning_rate"] *= 1.01
    for g in spec["optimizer"]["groups"][:1]:
        g["lr"] *= 1.01
    assert _worst(_replay(spec, initial, gradients, work), theirs).max() > 10 * tolerance
    return worst.max()


@pytest.mark.parametrize("cls,kwargs,own,needs", [c[1:] for c in _CASES], ids=[c[0] for c in _CASES])
def test_the_server_steps_as_torch_optim(cls, kwargs, own, needs, work, request):
    if needs is not None and not _NEEDS[needs](cls):
        pytest.skip(f"torch {torch.__version__} lacks what {cls} needs here ({needs}); the pip venv's torch runs it")
    _check_mirrored(request.node.callspec.id, _mirror(cls, kwargs, own), work)


class _MatricesModel(torch.nn.Module):
    """Matrices for Muon (a wide one, a tall one: the iteration runs on the transpose), and a
    vector and a 3-D tensor for the AdamW beside it."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        for name, shape in (("wide", (4, 6)), ("tall", (7, 3)), ("bias", (6,)), ("cube", (2, 3, 5))):
            self.register_parameter(name, torch.nn.Parameter(torch.randn(shape, generator=gen)))


def _muon_recipe(adjust_lr_fn):
    """torch's Muon over the matrices (two groups), its docs' AdamW over the rest."""
    def make(m):
        muon = torch.optim.Muon([{"params": [m.wide]}, {"params": [m.tall], "lr": 0.01, "nesterov": False}],
                                lr=0.02, weight_decay=0.05, adjust_lr_fn=adjust_lr_fn)
        return [muon, torch.optim.AdamW([m.bias, m.cube], lr=0.01, betas=(0.85, 0.99), weight_decay=0.01)]
    return make


class _Float32Torch:
    """torch, but its bfloat16 is float32: Muon's own code with its iteration in float32."""

    def __getattr__(self, name):
        return torch.float32 if name == "bfloat16" else getattr(torch, name)


@pytest.mark.parametrize("adjust_lr_fn", [None, "match_rms_adamw", "spectral_unclamped"])
def test_muon_and_its_adamw_step_as_torch_in_float32(adjust_lr_fn, work, monkeypatch):
    """The server runs Muon's Newton-Schulz iteration in float32; torch in bfloat16. Its own
    code made float32 must agree to 1e-6, as every other optimizer's."""
    if not _has("Muon"):
        pytest.skip(f"torch {torch.__version__} has no Muon; the pip venv's torch runs it")
    import torch.optim._muon as muon_module
    monkeypatch.setattr(muon_module, "torch", _Float32Torch())
    _check_mirrored(f"muon_adamw_{adjust_lr_fn or 'original'}_float32",
                    _mirror(None, None, None, _MatricesModel(), _muon_recipe(adjust_lr_fn)), work)


def test_muon_stays_within_bfloat16_of_torch(work):
    """torch's own Muon, its iteration in bfloat16 (8 bits of mantissa): the server's float32
    iteration stays within 2e-3 of the weights over the 60 steps (bfloat16's eps is 7.8e-3)."""
    if not _has("Muon"):
        pytest.skip(f"torch {torch.__version__} has no Muon; the pip venv's torch runs it")
    _check_mirrored("muon_adamw_bfloat16", _mirror(None, None, None, _MatricesModel(), _muon_recipe(None)), work,
                    tolerance=2e-3, sensitive=False)


def test_what_torch_steps_elsewhere_is_refused_naming_the_nearest():
    model = _Model()
    for cls, says in (("LBFGS", "needs a closure"), ("SparseAdam", "takes sparse gradients")):
        if not _has(cls):
            continue
        with pytest.raises(ValueError, match="cannot run") as e:
            optim.describe(getattr(torch.optim, cls)(model.parameters()), model)
        assert says in str(e.value)
    if _has("Muon"):  # a list runs as one only as torch's Muon recipe
        m = _MatricesModel()
        with pytest.raises(ValueError, match="only as torch.optim.Muon with an AdamW"):
            optim.describe([torch.optim.SGD([m.bias, m.cube]), torch.optim.Muon([m.wide, m.tall])], m)
