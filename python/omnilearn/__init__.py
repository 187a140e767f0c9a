"""OmniLearn's Python worker library: train a model of your own, with your own training
loop and data, as a worker of an OmniLearn parameter server (next to C++ workers).
PyTorch: omnilearn.Worker (omnilearn.worker); TensorFlow/Keras: omnilearn.keras. See
docs/python.md, "Python workers".

Importing the package imports no framework: each name below loads its module (and
PyTorch) when first used, so a TensorFlow-only environment imports omnilearn.keras alone.
"""

import importlib

_LAZY = {"FlatModel": "flat_model", "fashion_mnist": "data", "load_tensors": "data", "save_tensors": "data",
         "load_state_dict": "state", "load_torchscript": "state", "save_state_dict": "state",
         "save_torchscript": "state", "ServerError": "session", "Step": "session", "Worker": "worker",
         "WorkerOptions": "options"}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'omnilearn' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"omnilearn.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
