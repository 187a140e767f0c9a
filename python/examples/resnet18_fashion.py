"""torchvision's ResNet-18 (BatchNorm: its running statistics and num_batches_tracked are
model state, averaged on the server) on Fashion-MNIST through a map-style Dataset and a
DataLoader with worker processes, as OmniLearn workers. Run it with the launcher:

    python -m omnilearn.run --nproc 3 \\
      --server_args="--lr=0.05 --global_batch=96 --export=resnet.safetensors" \\
      python/examples/resnet18_fashion.py --epochs=1

then evaluate the export, loaded strictly into a fresh torchvision model:

    python3 python/examples/resnet18_fashion.py --evaluate=resnet.safetensors
"""

import argparse
import sys

import torch
import torchvision
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import omnilearn


class FashionMnist(Dataset):
    """A map-style Dataset over Debian's Fashion-MNIST (omnilearn.fashion_mnist)."""

    def __init__(self, train: bool, limit: int = 0):
        self.x, self.y = omnilearn.fashion_mnist(train=train)
        if limit:
            self.x, self.y = self.x[:limit], self.y[:limit]

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def resnet18():
    """torchvision's ResNet-18 for 1x28x28 images and 10 classes: a 3x3 first convolution
    with one input channel, no max pool."""
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = torch.nn.Identity()
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--max_iterations", type=int, default=0)
    p.add_argument("--limit", type=int, default=0, help="train on the first N images only")
    p.add_argument("--evaluate", default="", help="an export: load it strictly and print the test accuracy")
    p.add_argument("--test_limit", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(1)  # every worker starts from the same model
    model = resnet18()
    if a.evaluate:
        model.load_state_dict(omnilearn.load_state_dict(a.evaluate))  # strict
        model.eval()
        test = FashionMnist(train=False, limit=a.test_limit)
        correct = 0
        with torch.no_grad():
            for x, y in DataLoader(test, batch_size=500):
                correct += int((model(x).argmax(1) == y).sum())
        print(f"test accuracy {correct / len(test):.4f} ({len(test)} images)", flush=True)
        return 0
    data = FashionMnist(train=True, limit=a.limit)
    with omnilearn.Worker(None, model, dataset_size=len(data), epochs=a.epochs, max_iterations=a.max_iterations) as w:
        loader = DataLoader(data, batch_sampler=w.batch_sampler(parts=2), num_workers=2, pin_memory=True)
        for step, (x, y) in w.batches(loader):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            w.push(loss)
        print(f"{w.name}: {w.iteration} steps, {w.samples_seen} samples", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
