"""pytorch/examples' mnist/main.py as docs/python.md ports it: its Net, its Adadelta(lr=1.0)
and StepLR(step_size=1, gamma=0.7), batch 64, unchanged but for the documented lines (the
Worker loop, no optimizer.step(), the rank check after training); on a part of Debian's
Fashion-MNIST so that the full tier can afford it.

    python -m omnilearn.run --nproc 2 --server_args="--global_batch=64 ..." tests/mnist_port_job.py

Rank 0 then trains the same program in one process (torch.optim steps) and prints
"mnist_port: job accuracy A single process B"; it exits non-zero when the job's test accuracy
is more than 2 points below the single process's.
"""

import os
import sys

import torch
from torch import nn
from torch import optim
from torch.nn import functional as F
from torch.optim.lr_scheduler import StepLR

import omnilearn

TRAIN, TEST, EPOCHS, LR, GAMMA, BATCH = 8192, 2000, 2, 1.0, 0.7, 64


class Net(nn.Module):  # pytorch/examples mnist/main.py, as it is
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def test(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = int((model(x).argmax(dim=1) == y).sum())
    return 100.0 * correct / len(y)


def single_process(x, y):
    """The program as pytorch/examples runs it: its DataLoader's shuffled batches of 64."""
    torch.manual_seed(1)
    model = Net()
    optimizer = optim.Adadelta(model.parameters(), lr=LR)
    scheduler = StepLR(optimizer, step_size=1, gamma=GAMMA)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    for _ in range(EPOCHS):
        model.train()
        for data, target in loader:
            optimizer.zero_grad()
            F.nll_loss(model(data), target).backward()
            optimizer.step()
        scheduler.step()
    return model


def main():
    torch.set_num_threads(1)
    x, y = omnilearn.fashion_mnist(train=True)
    x, y = x[:TRAIN], y[:TRAIN]
    tx, ty = omnilearn.fashion_mnist(train=False)
    tx, ty = tx[:TEST], ty[:TEST]
    torch.manual_seed(1)
    model = Net()
    optimizer = optim.Adadelta(model.parameters(), lr=LR)
    scheduler = StepLR(optimizer, step_size=1, gamma=GAMMA)
    with omnilearn.Worker(None, model, dataset_size=len(y), epochs=EPOCHS, optimizer=optimizer) as w:
        for step in w:
            model.train()
            loss = F.nll_loss(model(x[step.samples]), y[step.samples])
            loss.backward()
            w.push(loss)
            if step.epoch_end:
                scheduler.step()
    if os.environ.get("OMNILEARN_RANK", "0") != "0":
        return 0
    job = test(model, tx, ty)
    alone = test(single_process(x, y), tx, ty)
    print(f"mnist_port: job accuracy {job:.2f} single process {alone:.2f} (Adadelta, StepLR, {EPOCHS} epochs "
          f"of {TRAIN} samples)", flush=True)
    if job < alone - 2.0:
        sys.exit("mnist_port: the job's accuracy is below the single process's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
