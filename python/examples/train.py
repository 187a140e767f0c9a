#!/usr/bin/python3
"""A Python OmniLearn worker: your own PyTorch loop on Fashion-MNIST or a tensors file.

    PYTHONPATH=python /usr/bin/python3 python/examples/train.py --server=127.0.0.1:50051 --model=cnn

The loop is the library's intended use: the server assigns each step's samples and batch
size; the model, the data and the loss are the script's own.
"""

import argparse
import sys

import torch
from torch.nn import functional as F

import omnilearn
from omnilearn import models


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum()) for i in range(0, len(y), 1000))
    model.train()
    return correct / len(y)


def load_data(dataset):
    """(train_x, train_y, test_x, test_y) of --dataset; the test set may be None."""
    if dataset == "fashion-mnist":
        return (*omnilearn.fashion_mnist(train=True), *omnilearn.fashion_mnist(train=False))
    if dataset.startswith("tensors:"):
        t = omnilearn.load_tensors(dataset[len("tensors:"):])
        test_x, test_y = t.get("test_x"), t.get("test_y")
        return (t["train_x"].float(), t["train_y"].long(), test_x.float() if test_x is not None else None,
                test_y.long() if test_y is not None else None)
    sys.exit(f"unknown dataset '{dataset}' (want fashion-mnist or tensors:PATH)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="127.0.0.1:50051")
    p.add_argument("--name", default=None)
    p.add_argument("--model", default="cnn", help="mlp | cnn | cnn_bn (the C++ worker's built-in models)")
    p.add_argument("--model_file", default="", help="a TorchScript module instead of --model")
    p.add_argument("--dataset", default="fashion-mnist", help="fashion-mnist | tensors:PATH")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--max_iterations", type=int, default=0)
    p.add_argument("--slowdown", type=float, default=1.0, help="heterogeneity emulation, as the C++ worker's")
    p.add_argument("--emulate_device", default=None, help="FIXED_MS:MS_PER_SAMPLE, as the C++ worker's")
    p.add_argument("--optimizer", default="", choices=["", "sgd", "adamw"],
                   help="this program's own torch.optim (the server's flags when left out; a job of local "
                        "steps needs one: the worker steps it)")
    p.add_argument("--lr", type=float, default=0.05, help="--optimizer's learning rate")
    p.add_argument("--momentum", type=float, default=0.0, help="--optimizer=sgd's momentum")
    p.add_argument("--evaluate", action="store_true", help="measure test accuracy at epoch ends, report it")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log_every", type=int, default=50)
    p.add_argument("--auth_token_file", default=None)
    p.add_argument("--tls_ca", default=None)
    p.add_argument("--tls_cert", default=None)
    p.add_argument("--tls_key", default=None)
    p.add_argument("--tls_server_name", default=None)
    p.add_argument("--connect_timeout", type=float, default=10.0, help="seconds to wait for a server never reached")
    p.add_argument("--reconnect_timeout", type=float, default=300.0, help="seconds to wait for a server lost")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    train_x, train_y, test_x, test_y = load_data(a.dataset)
    model = omnilearn.load_torchscript(a.model_file) if a.model_file else models.make(a.model, a.seed)
    model.train()
    optimizer = None
    if a.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    elif a.optimizer == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr)

    with omnilearn.Worker(a.server, model, optimizer=optimizer, name=a.name, dataset_size=len(train_y),
                          epochs=a.epochs, max_iterations=a.max_iterations, slowdown=a.slowdown,
                          emulate_device=a.emulate_device, connect_timeout=a.connect_timeout,
                          reconnect_timeout=a.reconnect_timeout, auth_token_file=a.auth_token_file,
                          tls_ca=a.tls_ca, tls_cert=a.tls_cert, tls_key=a.tls_key,
                          tls_server_name=a.tls_server_name) as w:
        accuracy, evaluated_epoch, last_loss = None, w.epoch, 0.0
        for step in w:
            x, y = train_x[step.samples], train_y[step.samples]
            w.start_compute()  # the data is ready (a TorchScript model cannot mark this itself)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            last_loss = float(loss)
            reply = w.push(loss, test_accuracy=accuracy)
            accuracy = None
            if reply is not None and a.log_every and step.iteration % a.log_every == 0:
                print(f"[{w.name}] it={step.iteration} batch={step.batch_size} loss={float(loss):.4f} "
                      f"version={reply.model_version}", flush=True)
            if a.evaluate and test_x is not None and w.epoch > evaluated_epoch:
                evaluated_epoch = w.epoch
                accuracy = evaluate(model, test_x, test_y)
                print(f"[{w.name}] epoch {w.epoch}: test accuracy {100 * accuracy:.2f}%", flush=True)
        if w.finished and a.evaluate and test_x is not None:
            accuracy = evaluate(model, test_x, test_y)
            print(f"[{w.name}] final test accuracy {100 * accuracy:.2f}% (model version {w.model_version})",
                  flush=True)
            w.report(accuracy, last_loss)


if __name__ == "__main__":
    main()
