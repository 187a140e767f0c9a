"""A trained model back into PyTorch: the model's tensors of an export or a checkpoint
(the server's safetensors files) as a state_dict, and a torch.save file of it.

    model.load_state_dict(omnilearn.load_state_dict("export.safetensors"))   # strict
    omnilearn.save_state_dict("ckpt/checkpoint-000120.safetensors", "model.pt")
    model.load_state_dict(torch.load("model.pt"))
"""

import os
from collections import OrderedDict
from typing import Optional, Union

import torch

from omnilearn.data import load_tensors

# A checkpoint also holds the optimizer's state, one tensor per model tensor and state
# ("optimizer.momentum/fc.weight", "optimizer.exp_avg/..."): not the model's.
_OPTIMIZER_PREFIX = "optimizer."


def load_state_dict(path: Union[str, os.PathLike], model: Optional[torch.nn.Module] = None,
                    device: Union[str, torch.device] = "cpu") -> "OrderedDict[str, torch.Tensor]":
    """The model's tensors of an export or a checkpoint, for model.load_state_dict(strict=True).

    Tensors of integer buffers (BatchNorm's num_batches_tracked, averaged over workers on
    the server) are rounded to their dtype when `model` is given; with a model, only its
    state_dict's keys are returned (a non-persistent buffer the server also kept is left
    out) and a missing one is an error naming it.
    """
    tensors = load_tensors(os.fspath(path))
    state = OrderedDict((k, v) for k, v in tensors.items() if not k.startswith(_OPTIMIZER_PREFIX))
    if model is not None:
        want = model.state_dict()
        missing = [k for k in want if k not in state]
        if missing:
            raise KeyError(f"{path} holds no {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}: "
                           "is it this model's export or checkpoint?")
        state = OrderedDict((k, state[k].round().to(want[k].dtype) if not want[k].is_floating_point()
                             else state[k].to(want[k].dtype)) for k in want)
    return OrderedDict((k, v.to(device)) for k, v in state.items())


def save_state_dict(source, path: Union[str, os.PathLike]) -> None:
    """Writes a torch.save file of a state_dict: `source` is one (a dict of tensors) or the
    path of an export or a checkpoint. Written to PATH.tmp, then renamed."""
    state = load_state_dict(source) if isinstance(source, (str, os.PathLike)) else OrderedDict(source)
    tmp = f"{os.fspath(path)}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)
