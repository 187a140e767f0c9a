"""A PyTorch user's training script, as `python -m omnilearn.run` starts it (the server's
address and the worker's name come from the environment): a map-style Dataset through a
DataLoader with two worker processes, a model with BatchNorm, nothing else of OmniLearn's
but the Worker. Used by tests/python_worker_test.sh."""

import sys

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import omnilearn
from omnilearn import models


class Blobs(Dataset):
    """Two classes of 1x28x28 images: noise around -1 or +1 (a map-style data set)."""

    def __init__(self, n, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, 2, (n,), generator=g)
        self.x = torch.randn(n, 1, 28, 28, generator=g) * 0.5 + (self.y.float() * 2 - 1).view(-1, 1, 1, 1)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main():
    torch.manual_seed(1)
    data = Blobs(512)
    model = models.make("cnn_bn")
    with omnilearn.Worker(None, model, dataset_size=len(data), epochs=float(sys.argv[1])) as w:
        loader = DataLoader(data, batch_sampler=w.batch_sampler(parts=2), num_workers=2, persistent_workers=True)
        for step, (x, y) in w.batches(loader):
            assert torch.equal(y, data.y[step.samples]), "the loader must load the step's assigned samples"
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            w.push(loss)
        print(f"{w.name}: {w.iteration} steps, {w.samples_seen} samples", flush=True)


if __name__ == "__main__":
    main()
