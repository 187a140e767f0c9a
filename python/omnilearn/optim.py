"""A torch.optim object as the server runs it: `omnilearn.Worker(..., optimizer=opt)`.

The server steps the job's model, so the optimizer a program builds is described to it at
join (its class, every hyperparameter, its param groups by tensor name) and, when this
worker brings the job's model, the job runs it; a later worker's must be the same. Its
schedulers (StepLR, CosineAnnealingLR, ReduceLROnPlateau, ...) keep working: they change
the param groups' `lr`, and each push that follows a change carries the new rates.

The server runs torch.optim.SGD (momentum, weight decay), Adam and AdamW (betas, eps,
weight decay), each with param groups of their own lr and weight_decay. Anything else is
refused here, before the join, saying why: another class (a user's own optimizer would
have to step on the workers, which then exchange weights instead of gradients: not what a
parameter server does), or an option the server does not implement.
"""

import torch

_KINDS = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw"}
RUNS = ("torch.optim.SGD (lr, momentum, weight_decay), torch.optim.Adam and torch.optim.AdamW (lr, betas, eps, "
        "weight_decay), each with param groups of their own lr and weight_decay")
# Options the server does not implement, with the value it runs (any other is refused).
_FIXED = {"sgd": {"dampening": 0, "nesterov": False, "maximize": False},
          "adam": {"amsgrad": False, "maximize": False}, "adamw": {"amsgrad": False, "maximize": False}}
# For an optimizer the server does not run: why, where the reason is not only that, and the
# nearest one it runs with its usual rate (the refusal names both).
_NEAREST_ADAM = "torch.optim.Adam(params, lr=1e-3), the adaptive optimizer it runs (AdamW for decoupled decay)"
_INSTEAD = {
    "RMSprop": "torch.optim.Adam(params, lr=1e-3, betas=(0.0, 0.99)): RMSprop's update, with Adam's bias correction",
    "ASGD": "torch.optim.SGD(params, lr=0.01): ASGD's step, without its averaged copy of the weights",
    "LBFGS": "LBFGS needs a closure that evaluates the loss several times a step, which a server's step cannot "
             "call: " + _NEAREST_ADAM,
    "SparseAdam": "SparseAdam takes sparse gradients and the job exchanges dense ones: " + _NEAREST_ADAM,
}


def _instead(optimizer) -> str:
    return _INSTEAD.get(type(optimizer).__name__, _NEAREST_ADAM)


# Options every group must share: the server runs one value for the whole model.
_SHARED = {"sgd": ("momentum",), "adam": ("betas", "eps"), "adamw": ("betas", "eps")}


def _number(x) -> float:
    return float(x.item() if isinstance(x, torch.Tensor) else x)


def describe(optimizer: torch.optim.Optimizer, model: torch.nn.Module) -> dict:
    """The optimizer as JoinHeader.optimizer carries it (omnilearn._core takes the dict).

    ValueError naming the class or the option when the server cannot run it, and a
    parameter in no group or not the model's."""
    kind = _KINDS.get(type(optimizer))
    if kind is None:
        raise ValueError(f"the server cannot run {type(optimizer).__module__}.{type(optimizer).__qualname__}: it runs "
                         f"{RUNS}. The nearest: {_instead(optimizer)}. Or leave optimizer= out and set the server's "
                         "--optimizer flags")
    groups = optimizer.param_groups
    for i, g in enumerate(groups):
        for option, runs in _FIXED[kind].items():
            if option in g and g[option] != runs:
                raise ValueError(f"{type(optimizer).__name__} with {option}={g[option]} (param group {i}): the server "
                                 f"runs {option}={runs} only")
        for option in _SHARED[kind]:
            if g[option] != groups[0][option]:
                raise ValueError(f"param group {i} has {option}={g[option]}, group 0 {groups[0][option]}: the server "
                                 f"runs one {option} for the whole model (groups may differ in lr and weight_decay)")
    names = {id(p): n for n, p in model.named_parameters()}
    grouped = set()
    out_groups = []
    for i, g in enumerate(groups):
        tensors = []
        for p in g["params"]:
            if id(p) not in names:
                raise ValueError(f"param group {i} holds a tensor of shape {list(p.shape)} that is not a parameter of "
                                 "the worker's model: build the optimizer over model.parameters()")
            tensors.append(names[id(p)])
            grouped.add(id(p))
        out_groups.append({"tensors": tensors, "lr": _number(g["lr"]), "weight_decay": float(g["weight_decay"])})
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in grouped]
    if missing:
        raise ValueError(f"parameter '{missing[0]}' is in none of the optimizer's param groups: the server steps "
                         "every trainable parameter (freeze it with requires_grad_(False), or add it to a group)")
    first = groups[0]
    betas = first.get("betas", (0.9, 0.999))
    return {"kind": kind, "lr": _number(first["lr"]), "momentum": float(first.get("momentum", 0.0)),
            "weight_decay": float(first["weight_decay"]), "beta1": _number(betas[0]), "beta2": _number(betas[1]),
            "eps": float(first.get("eps", 1e-8)), "groups": out_groups if len(groups) > 1 else []}


def rates(optimizer: torch.optim.Optimizer) -> list:
    """Each param group's current lr (a scheduler changes them)."""
    return [_number(g["lr"]) for g in optimizer.param_groups]
