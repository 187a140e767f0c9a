"""The C++ worker's built-in models (worker/trainer/model.cc) in PyTorch, tensor for tensor: a
Python worker with one of these trains the same job as C++ workers with --model=NAME."""

import torch
from torch import nn
from torch.nn import functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5, padding=2)
        self.conv2 = nn.Conv2d(8, 16, 5, padding=2)
        self.fc1, self.fc2 = nn.Linear(16 * 7 * 7, 64), nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class CnnBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 5, padding=2, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 5, padding=2, bias=False), nn.BatchNorm2d(16)
        self.fc1, self.fc2 = nn.Linear(16 * 7 * 7, 64), nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


BUILT_IN = {"mlp": Mlp, "cnn": Cnn, "cnn_bn": CnnBn}


def make(name: str, seed: int = 1) -> nn.Module:
    if name not in BUILT_IN:
        raise ValueError(f"unknown model '{name}' (want {', '.join(BUILT_IN)})")
    torch.manual_seed(seed)
    return BUILT_IN[name]()
