#!/usr/bin/python3
"""Writes a job of one's own for the tensors-dataset test: OUT/data.safetensors (a
learnable 5-class problem on 3x8x8 inputs, stored as float16 images and uint8 labels),
OUT/model.pt (a TorchScript CNN for it, holding a non-persistent bool mask and an integer
buffer, as users' transformers and BatchNorm do), and files that must be refused:
OUT/bad_labels.safetensors (float labels), OUT/bad_shape.safetensors (6 classes, 4x8x8)."""

import sys

import torch

import omnilearn


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8 * 4 * 4, 5)
        # Not model state: each worker keeps its own, none travels or is exported.
        self.register_buffer("mask", torch.ones(8, 4, 4, dtype=torch.bool), persistent=False)
        # Model state of an integer dtype (like num_batches_tracked): averaged, restored to int64.
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        if self.training:
            self.steps.add_(1)
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.head(x.masked_fill(~self.mask, 0.0).flatten(1))


def split(n, gen, templates, channels=3):
    y = torch.randint(0, templates.shape[0], (n,), generator=gen)
    x = templates[y][:, :channels] + 2.0 * torch.randn(n, channels, 8, 8, generator=gen)
    return x.half(), y.to(torch.uint8)


def main(out):
    gen = torch.Generator().manual_seed(5)
    templates = torch.randn(6, 4, 8, 8, generator=gen)
    train_x, train_y = split(6000, gen, templates[:5])
    test_x, test_y = split(1000, gen, templates[:5])
    omnilearn.save_tensors(f"{out}/data.safetensors",
                           {"train_x": train_x, "train_y": train_y, "test_x": test_x, "test_y": test_y})
    torch.manual_seed(3)
    omnilearn.save_torchscript(Net(), f"{out}/model.pt")
    omnilearn.save_tensors(f"{out}/bad_labels.safetensors", {"train_x": train_x, "train_y": train_y.float()})
    wide_x, wide_y = split(100, gen, templates, channels=4)
    omnilearn.save_tensors(f"{out}/bad_shape.safetensors", {"train_x": wide_x, "train_y": wide_y})
    omnilearn.save_tensors(f"{out}/bad_classes.safetensors", {"train_x": train_x, "train_y": train_y + 1})


if __name__ == "__main__":
    main(sys.argv[1])
