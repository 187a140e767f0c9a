"""A trained model back into PyTorch: the model's tensors of an export or a checkpoint
(the server's safetensors files) as a state_dict, and a torch.save file of it; and a
model as TorchScript for the C++ worker, its non-persistent buffers kept apart.

    model.load_state_dict(omnilearn.load_state_dict("export.safetensors"))   # strict
    omnilearn.save_state_dict("ckpt/checkpoint-000120.safetensors", "model.pt")
    model.load_state_dict(torch.load("model.pt"))
    omnilearn.save_torchscript(model, "model.ts")     # omnilearn_worker --model_file=model.ts
"""

import json
import os
from collections import OrderedDict
from typing import Optional, Union

import torch

from omnilearn.data import read_safetensors
from omnilearn.flat_model import DTYPE_NAMES

# A checkpoint also holds the optimizer's state, one tensor per model tensor and state
# ("optimizer.momentum/fc.weight", "optimizer.exp_avg/..."): not the model's.
_OPTIMIZER_PREFIX = "optimizer."
# TorchScript forgets which buffers are not persistent (a scripted module's state_dict has
# them all): the names go in the file beside it, one per line, and both workers read them.
# The C++ worker's name for it is worker/trainer/model.cc's kNonPersistentBuffersFile.
NON_PERSISTENT_BUFFERS_FILE = "omnilearn/non_persistent_buffers"
_TORCH_DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}


def non_persistent_buffers(model: torch.nn.Module):
    """The names of the module's buffers that its state_dict leaves out, in buffer order."""
    persistent = model.state_dict(keep_vars=True).keys()
    return [name for name, _ in model.named_buffers() if name not in persistent]


def save_torchscript(model: torch.nn.Module, path: Union[str, os.PathLike],
                     scripted: Optional[torch.jit.ScriptModule] = None) -> None:
    """Writes `model` as TorchScript for `omnilearn_worker --model_file` (and Python's
    load_torchscript): torch.jit.script(model), or `scripted` (a traced or scripted copy
    of it), with the names of its non-persistent buffers, which TorchScript forgets. Written
    to PATH.tmp, then renamed."""
    module = scripted if scripted is not None else torch.jit.script(model)
    tmp = f"{os.fspath(path)}.tmp"
    module.save(tmp, _extra_files={NON_PERSISTENT_BUFFERS_FILE: "\n".join(non_persistent_buffers(model))})
    os.replace(tmp, path)


def load_torchscript(path: Union[str, os.PathLike], map_location=None) -> torch.jit.ScriptModule:
    """torch.jit.load, with the non-persistent buffers save_torchscript named left out of
    the module's state_dict again (and so of what a Worker sends and the server keeps)."""
    extra = {NON_PERSISTENT_BUFFERS_FILE: ""}
    module = torch.jit.load(os.fspath(path), map_location=map_location, _extra_files=extra)
    modules = dict(module.named_modules())
    names = extra[NON_PERSISTENT_BUFFERS_FILE]
    for name in (names.decode() if isinstance(names, bytes) else names).split():
        owner, _, buffer = name.rpartition(".")
        if owner not in modules or buffer not in dict(modules[owner].named_buffers(recurse=False)):
            raise ValueError(f"{path} names a non-persistent buffer {name} the module does not hold")
        modules[owner]._non_persistent_buffers_set.add(buffer)
    return module


def _as_dtype(t: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.Tensor:
    """`t` in `dtype` (None: as it is); float values rounded to nearest into an integer or bool type."""
    if dtype is None or t.dtype == dtype:
        return t
    if t.is_floating_point() and not dtype.is_floating_point:
        t = t.round()
    return t.to(dtype)


def load_state_dict(path: Union[str, os.PathLike], model: Optional[torch.nn.Module] = None,
                    device: Union[str, torch.device] = "cpu") -> "OrderedDict[str, torch.Tensor]":
    """The model's tensors of an export or a checkpoint, for model.load_state_dict(strict=True).

    Each tensor comes in the model's own type (an export writes integer and bool buffers,
    e.g. BatchNorm's num_batches_tracked averaged over workers, rounded to their type; a
    checkpoint holds the server's float32 values and names the types, which are applied
    here). With `model`, each tensor takes the type the model holds it in, only its
    state_dict's keys are returned (a non-persistent buffer the server also kept is left
    out) and a missing one is an error naming it.
    """
    tensors, metadata = read_safetensors(os.fspath(path))
    dtypes = {k: _TORCH_DTYPES[v] for k, v in json.loads(metadata.get("omnilearn.model_dtypes", "{}")).items()}
    state = OrderedDict((k, _as_dtype(v, dtypes.get(k))) for k, v in tensors.items()
                        if not k.startswith(_OPTIMIZER_PREFIX))
    if model is not None:
        want = model.state_dict()
        missing = [k for k in want if k not in state]
        if missing:
            raise KeyError(f"{path} holds no {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}: "
                           "is it this model's export or checkpoint?")
        state = OrderedDict((k, _as_dtype(state[k], want[k].dtype)) for k in want)
    return OrderedDict((k, v.to(device)) for k, v in state.items())


def save_state_dict(source, path: Union[str, os.PathLike]) -> None:
    """Writes a torch.save file of a state_dict: `source` is one (a dict of tensors) or the
    path of an export or a checkpoint. Written to PATH.tmp, then renamed."""
    state = load_state_dict(source) if isinstance(source, (str, os.PathLike)) else OrderedDict(source)
    tmp = f"{os.fspath(path)}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)
