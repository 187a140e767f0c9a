"""keras_step: where a Keras worker's step goes, against the same model's compute alone.

One omnilearn_server on 127.0.0.1 and one omnilearn.keras.Worker (no emulated device: real
compute), a tf.GradientTape loop over a synthetic data set; for each model, the median over
the timed steps of:
  compute     forward, loss and backward (tape.gradient), a tf.function
  copy_out    the gradients into the push's flat vector (VariableStorage.prepare_update)
  wire        push and reply over loopback, the server's step included (PushPull)
  assign      the new model into the variables (VariableStorage.received)
and the share of a step that the two copies take: what streaming the gradient during backward,
or the model during the next forward, could hide at most. TensorFlow computes a tape's
gradients in one call and owns its variables' memory, so neither is open to a worker.

  OMNILEARN_TF_PYTHON=... bench/keras_step.py --server_binary=bazel-bin/server/omnilearn_server
Run on the TensorFlow venv (deploy/install-venv.sh tensorflow), from the checkout's root.
"""

import argparse
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import omnilearn.keras  # noqa: E402


def models():
    """(name, model, input shape): the test's CNN (0.4 MB) and an MLP of about 40 MB."""
    keras.utils.set_random_seed(1)
    l = keras.layers
    cnn = keras.Sequential([keras.Input((28, 28, 1)), l.Conv2D(16, 3, padding="same", name="conv1"),
                            l.BatchNormalization(name="bn1"), l.ReLU(), l.MaxPooling2D(),
                            l.Conv2D(32, 3, padding="same", name="conv2"), l.BatchNormalization(name="bn2"), l.ReLU(),
                            l.MaxPooling2D(), l.Flatten(), l.Dense(64, activation="relu", name="fc1"),
                            l.Dense(10, name="fc2")], name="cnn")
    mlp = keras.Sequential([keras.Input((784,)), l.Dense(2048, activation="relu", name="fc1"),
                            l.Dense(2048, activation="relu", name="fc2"), l.Dense(2048, activation="relu", name="fc3"),
                            l.Dense(10, name="fc4")], name="mlp")
    return [("cnn", cnn, (28, 28, 1)), ("mlp40", mlp, (784,))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(fn, out):
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        result = fn(*args, **kwargs)
        out.append(time.perf_counter() - t)
        return result
    return wrapper


def run(name, model, shape, args):
    n = args.batch * (args.steps + args.warmup) + args.batch
    x = np.random.default_rng(0).normal(size=(n, *shape)).astype(np.float32)
    y = np.random.default_rng(1).integers(0, 10, size=n)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(reduce_retracing=True)
    def step_fn(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        return loss, tape.gradient(loss, model.trainable_variables)

    port = free_port()
    work = tempfile.mkdtemp(prefix="keras_step-")
    server = subprocess.Popen([args.server_binary, f"--port={port}", "--bind=127.0.0.1", "--num_workers=1",
                               f"--global_batch={args.batch}", "--exit_when_done", "--quiet", "--lr=0.01"],
                              stdout=open(f"{work}/server.log", "w"), stderr=subprocess.STDOUT)
    times = {"compute": [], "copy_out": [], "wire": [], "assign": []}
    try:
        with omnilearn.keras.Worker(f"127.0.0.1:{port}", model, name=name, dataset_size=n,
                                    max_iterations=args.steps + args.warmup, log=lambda line: None) as w:
            w.storage.prepare_update = timed(w.storage.prepare_update, times["copy_out"])
            w.storage.received = timed(w.storage.received, times["assign"])
            for step in w:
                t = time.perf_counter()
                loss, grads = step_fn(x[step.samples], y[step.samples])
                _ = loss.numpy()
                times["compute"].append(time.perf_counter() - t)
                t = time.perf_counter()
                w.push(loss, grads)
                times["wire"].append(time.perf_counter() - t)
    finally:
        server.wait(timeout=60)
    k = args.warmup
    med = {key: 1000 * statistics.median(v[k:]) for key, v in times.items()}
    med["wire"] -= med["copy_out"] + med["assign"]  # push() holds both copies: the wire alone
    mb = 4 * omnilearn.keras.VariableStorage(omnilearn.keras.model_tensors(model)).total / 1e6
    step = sum(med.values())
    print(f"{name}: {mb:.1f} MB, batch {args.batch}: compute {med['compute']:.1f} ms, copy_out "
          f"{med['copy_out']:.1f} ms, wire {med['wire']:.1f} ms, assign {med['assign']:.1f} ms; the copies are "
          f"{100 * (med['copy_out'] + med['assign']) / step:.1f}% of a {step:.1f} ms step", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server_binary", default=str(ROOT / "bazel-bin" / "server" / "omnilearn_server"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    print(f"keras_step: tensorflow {tf.__version__}, keras {keras.__version__}, {os.cpu_count()} CPUs", flush=True)
    for name, model, shape in models():
        run(name, model, shape, args)


if __name__ == "__main__":
    main()
