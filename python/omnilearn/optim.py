"""A torch.optim object as the server runs it: `omnilearn.Worker(..., optimizer=opt)`.

The server steps the job's model, so the optimizer a program builds is described to it at
join (its class, every hyperparameter, its param groups by tensor name) and, when this
worker brings the job's model, the job runs it; a later worker's must be the same. Its
schedulers (StepLR, CosineAnnealingLR, ReduceLROnPlateau, ...) keep working: they change
the param groups' `lr`, and each push that follows a change carries the new rates.

The server runs torch.optim's SGD, Adam, AdamW, Adadelta, Adagrad, Adamax, NAdam, RAdam,
RMSprop, Rprop, ASGD, Adafactor and Muon with every option of their step (nesterov,
dampening, amsgrad, centered, maximize, decoupled weight decay, ns_coefficients, ...), each
param group with its own values of any of them. Muon takes matrices only, so torch's recipe
pairs it with an AdamW for the rest: pass both, `optimizer=[muon, adamw]`, and the server
runs them as one. What it cannot run is refused here, before the join, saying why and naming
the nearest one it runs: another class (a user's own optimizer would have to step on the
workers, which then exchange weights instead of gradients: not what a parameter server
does), LBFGS (a closure), SparseAdam (sparse gradients).
"""

import torch

# Each class the server runs: its name there, and its options as torch.optim's param
# groups hold them -> the server's names (a pair as two).
_PAIR = {"betas": ("beta1", "beta2"), "etas": ("etaminus", "etaplus"), "step_sizes": ("step_size_min", "step_size_max")}
_OPTIONS = {
    "sgd": ("momentum", "dampening", "nesterov", "maximize"),
    "adam": ("betas", "eps", "amsgrad", "maximize"),
    "adamw": ("betas", "eps", "amsgrad", "maximize"),
    "adadelta": ("rho", "eps", "maximize"),
    "adagrad": ("lr_decay", "initial_accumulator_value", "eps", "maximize"),
    "adamax": ("betas", "eps", "maximize"),
    "nadam": ("betas", "eps", "momentum_decay", "decoupled_weight_decay", "maximize"),
    "radam": ("betas", "eps", "decoupled_weight_decay", "maximize"),
    "rmsprop": ("alpha", "eps", "momentum", "centered", "maximize"),
    "rprop": ("etas", "step_sizes", "maximize"),
    "asgd": ("lambd", "alpha", "t0", "maximize"),
    "adafactor": ("beta2_decay", "eps", "d", "maximize"),
    "muon": ("momentum", "nesterov", "ns_coefficients", "eps", "ns_steps", "adjust_lr_fn"),
}
# Muon's adjust_lr_fn by the server's number (Hp::kAdjustLrFn); None is "original".
_ADJUST_LR_FN = {None: 0.0, "original": 0.0, "match_rms_adamw": 1.0, "spectral_unclamped": 2.0}
_KINDS = {getattr(torch.optim, cls): kind for cls, kind in (
    ("SGD", "sgd"), ("Adam", "adam"), ("AdamW", "adamw"), ("Adadelta", "adadelta"), ("Adagrad", "adagrad"),
    ("Adamax", "adamax"), ("NAdam", "nadam"), ("RAdam", "radam"), ("RMSprop", "rmsprop"), ("Rprop", "rprop"),
    ("ASGD", "asgd"), ("Adafactor", "adafactor"), ("Muon", "muon")) if hasattr(torch.optim, cls)}
RUNS = ("torch.optim's SGD, Adam, AdamW, Adadelta, Adagrad, Adamax, NAdam, RAdam, RMSprop, Rprop, ASGD, Adafactor and "
        "Muon (with an AdamW for what Muon does not take: optimizer=[muon, adamw]), with their options and param groups")
# For an optimizer the server does not run: why, and the nearest one it runs with its usual rate.
_NEAREST_ADAM = "torch.optim.Adam(params, lr=1e-3), the adaptive optimizer it runs (AdamW for decoupled decay)"
_INSTEAD = {
    "LBFGS": "LBFGS needs a closure that evaluates the loss several times a step, which a server's step cannot "
             "call: " + _NEAREST_ADAM,
    "SparseAdam": "SparseAdam takes sparse gradients and the job exchanges dense ones: " + _NEAREST_ADAM,
}


def _instead(optimizer) -> str:
    return _INSTEAD.get(type(optimizer).__name__, _NEAREST_ADAM)


def _number(x) -> float:
    return float(x.item() if isinstance(x, torch.Tensor) else x)


def _kind(optimizer) -> str:
    kind = _KINDS.get(type(optimizer))
    if kind is None:
        raise ValueError(f"the server cannot run {type(optimizer).__module__}.{type(optimizer).__qualname__}: it runs "
                         f"{RUNS}. The nearest: {_instead(optimizer)}. Or leave optimizer= out and set the server's "
                         "--optimizer flags")
    # torch.optim.Adam(decoupled_weight_decay=True) is AdamW.
    if kind == "adam" and optimizer.param_groups[0].get("decoupled_weight_decay", False):
        return "adamw"
    return kind


def _options(kind: str, group: dict, i: int) -> dict:
    """A param group's options by the server's names; ValueError for one the server does not run."""
    if group.get("differentiable", False):
        raise ValueError(f"{kind} with differentiable=True (param group {i}): the server's step is not part of the "
                         "worker's autograd graph")
    out = {}
    for name in _OPTIONS[kind]:
        if name not in group:  # an option of a later torch: the server's default is this torch's step
            continue
        value = group[name]
        if kind == "adafactor" and name == "eps":  # (eps1, eps2); eps1 None: the dtype's eps
            out["eps1"] = torch.finfo(torch.float32).eps if value[0] is None else _number(value[0])
            out["eps2"] = _number(value[1])
        elif name == "ns_coefficients":
            out["ns_a"], out["ns_b"], out["ns_c"] = (_number(v) for v in value)
        elif name == "adjust_lr_fn":
            out[name] = _ADJUST_LR_FN[value]
        elif name in _PAIR:
            out[_PAIR[name][0]], out[_PAIR[name][1]] = _number(value[0]), _number(value[1])
        else:
            out[name] = float(value)
    return out


def _tensors(optimizer, model) -> list:
    """Each group's tensors by the model's names; ValueError for a parameter in no group or not the model's."""
    names = {id(p): n for n, p in model.named_parameters()}
    grouped, out = set(), []
    for i, g in enumerate(optimizer.param_groups):
        tensors = []
        for p in g["params"]:
            if id(p) not in names:
                raise ValueError(f"param group {i} holds a tensor of shape {list(p.shape)} that is not a parameter of "
                                 "the worker's model: build the optimizer over model.parameters()")
            tensors.append(names[id(p)])
            grouped.add(id(p))
        out.append(tensors)
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in grouped]
    if missing:
        raise ValueError(f"parameter '{missing[0]}' is in none of the optimizer's param groups: the server steps "
                         "every trainable parameter (freeze it with requires_grad_(False), or add it to a group)")
    return out


class _MuonWithAdamW:
    """torch's Muon recipe as one optimizer for the server: Muon's param groups, then the
    AdamW's, each marked adamw (the server's Muon steps those as AdamW)."""

    def __init__(self, optimizers):
        names = sorted(type(o).__name__ for o in optimizers)
        muon = [o for o in optimizers if type(o).__name__ == "Muon"]
        rest = [o for o in optimizers if type(o).__name__ != "Muon"]
        if len(optimizers) != 2 or len(muon) != 1 or _kind(rest[0]) != "adamw":
            raise ValueError(f"optimizer={names}: a list runs as one optimizer only as torch.optim.Muon with an "
                             "AdamW for the parameters Muon does not take (its docs' recipe); else pass one optimizer")
        self.muon, self.adamw = muon[0], rest[0]
        self.param_groups = self.muon.param_groups + self.adamw.param_groups

    def options(self) -> list:
        out = [_options("muon", g, i) for i, g in enumerate(self.muon.param_groups)]
        for i, g in enumerate(self.adamw.param_groups, start=len(out)):
            opts = _options("adamw", g, i)
            if opts.pop("amsgrad", 0.0):
                raise ValueError(f"AdamW(amsgrad=True) beside Muon (param group {i}): the server's Muon steps its "
                                 "AdamW groups without amsgrad")
            out.append({**opts, "adamw": 1.0})
        return out


def _joined(optimizer):
    """One optimizer, or torch's Muon recipe (a list: Muon and AdamW) as one."""
    return _MuonWithAdamW(list(optimizer)) if isinstance(optimizer, (list, tuple)) else optimizer


def describe(optimizer, model: torch.nn.Module) -> dict:
    """The optimizer as JoinHeader.optimizer carries it (omnilearn._core takes the dict):
    a torch.optim object, or [Muon, AdamW].

    ValueError naming the class or the option when the server cannot run it, and a
    parameter in no group or not the model's."""
    optimizer = _joined(optimizer)
    if isinstance(optimizer, _MuonWithAdamW):
        kind, options = "muon", optimizer.options()
    else:
        kind = _kind(optimizer)
        options = [_options(kind, g, i) for i, g in enumerate(optimizer.param_groups)]
    groups = optimizer.param_groups
    tensors = _tensors(optimizer, model)
    out_groups = []
    for g, opts, names in zip(groups, options, tensors):
        own = {k: v for k, v in opts.items() if v != options[0].get(k)}  # where the group differs from group 0
        out_groups.append({"tensors": names, "lr": _number(g["lr"]), "weight_decay": float(g.get("weight_decay", 0)),
                           "options": own})
    first = groups[0]
    job = options[0]
    return {"kind": kind, "lr": _number(first["lr"]), "weight_decay": float(first.get("weight_decay", 0)),
            # The fields a server of an earlier release reads (it runs sgd, adam and adamw only).
            "momentum": job.get("momentum", 0.0), "beta1": job.get("beta1", 0.9), "beta2": job.get("beta2", 0.999),
            "eps": job.get("eps", 1e-8),
            "options": job, "groups": out_groups if len(groups) > 1 else []}


def rates(optimizer) -> list:
    """Each param group's current lr (a scheduler changes them); of [Muon, AdamW], Muon's
    groups then AdamW's."""
    return [_number(g["lr"]) for g in _joined(optimizer).param_groups]
