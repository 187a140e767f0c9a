"""OmniLearn's Python worker library: train a PyTorch model of your own, with your own
training loop and data, as a worker of an OmniLearn parameter server (next to C++
workers). See Worker, and README.md's "Python workers"."""

from omnilearn.flat_model import FlatModel
from omnilearn.data import fashion_mnist, load_tensors, save_tensors
from omnilearn.state import load_state_dict, load_torchscript, save_state_dict, save_torchscript
from omnilearn.worker import ServerError, Step, Worker

__all__ = ["FlatModel", "ServerError", "Step", "Worker", "fashion_mnist", "load_state_dict", "load_tensors",
           "load_torchscript", "save_state_dict", "save_tensors", "save_torchscript"]
