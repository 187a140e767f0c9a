"""The Keras side of tests/keras_workers_test.sh: a Keras CNN (BatchNormalization) on
Fashion-MNIST, trained in one process by keras.Model.fit (the reference), or as an
OmniLearn worker through omnilearn.keras.fit or a tf.GradientTape loop; and the job's
export evaluated in Keras.

    keras_job.py reference --epochs=2 --out=ref.json
    keras_job.py worker --server=HOST:PORT --name=w0 --loop=fit|tape --device=0:2 --ids=w0.ids
    keras_job.py evaluate --export=job.safetensors --out=eval.json
"""

import argparse
import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

import omnilearn.keras
from omnilearn import tensor_files

BATCH = 96
LR, MOMENTUM = 0.05, 0.9


def data(train: bool, limit: int = 0):
    images, labels = tensor_files.fashion_mnist_raw(train)
    x = tensor_files.normalize_fashion_mnist(images)[..., None]  # NHWC, as Keras holds images
    y = labels.astype(np.int64)
    return (x[:limit], y[:limit]) if limit else (x, y)


def make_model(lr: float = LR, momentum: float = MOMENTUM):
    keras.utils.set_random_seed(7)  # every process starts from the same weights
    layers = keras.layers
    inputs = keras.Input((28, 28, 1))
    h = inputs
    for i, width in enumerate((16, 32), 1):
        h = layers.Conv2D(width, 3, padding="same", use_bias=False, name=f"conv{i}")(h)
        h = layers.BatchNormalization(name=f"bn{i}")(h)
        h = layers.ReLU()(h)
        h = layers.MaxPooling2D()(h)
    h = layers.Flatten()(h)
    h = layers.Dense(64, activation="relu", name="fc1")(h)
    outputs = layers.Dense(10, name="fc2")(h)
    model = keras.Model(inputs, outputs, name="cnn")
    model.compile(optimizer=keras.optimizers.SGD(lr, momentum=momentum),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def test_accuracy(model) -> float:
    x, y = data(False)
    return float(model.evaluate(x, y, batch_size=500, verbose=0, return_dict=True)["accuracy"])


class Recorded:
    """The training set as fit()'s source: source[ids] is (x, y); it writes every id it gives."""

    def __init__(self, x, y, out):
        self.x, self.y, self.out = x, y, out

    def __len__(self):
        return len(self.x)

    def __getitem__(self, ids):
        np.asarray(ids, dtype=np.int64).tofile(self.out)
        return self.x[ids], self.y[ids]


def tape_loop(model, x, y, args, ids_out):
    """docs/keras.md's custom loop: a tf.function for the step, any batch size."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(reduce_retracing=True)
    def step_fn(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        return loss, tape.gradient(loss, model.trainable_variables)

    with omnilearn.keras.Worker(args.server, model, optimizer=model.optimizer, name=args.name, dataset_size=len(x),
                                epochs=args.epochs, emulate_device=args.device or None,
                                connect_timeout=args.connect_timeout, reconnect_timeout=args.reconnect_timeout) as w:
        for step in w:
            step.samples.tofile(ids_out)
            loss, gradients = step_fn(x[step.samples], y[step.samples])
            w.push(loss, gradients)
            if args.log_every and step.iteration % args.log_every == 0:
                print(f"[{w.name}] it={step.iteration} batch={step.batch_size} version={w.model_version}", flush=True)
        print(f"{args.name}: {w.iteration} steps, {w.samples_seen} samples, batch now {w.batch_size}, "
              f"{w.emulation.overruns if w.emulation else 0} emulation overruns", flush=True)


def worker(args):
    model = make_model(args.lr, args.momentum)
    x, y = data(True, args.limit)
    with open(args.ids, "wb") as ids_out:
        if args.loop == "fit":
            history = omnilearn.keras.fit(model, Recorded(x, y, ids_out), server=args.server, epochs=args.epochs,
                                          validation_data=data(False), name=args.name,
                                          emulate_device=args.device or None, connect_timeout=args.connect_timeout,
                                          reconnect_timeout=args.reconnect_timeout)
            print(f"{args.name}: history {json.dumps(history.history)}", flush=True)
        else:
            tape_loop(model, x, y, args, ids_out)


def reference(args):
    model = make_model()
    x, y = data(True, args.limit)
    model.fit(x, y, batch_size=BATCH, epochs=int(args.epochs), shuffle=True, verbose=2)
    result = {"accuracy": test_accuracy(model)}
    print(f"reference: {json.dumps(result)}", flush=True)
    json.dump(result, open(args.out, "w"))


def evaluate(args):
    model = make_model()
    before = [v.numpy().copy() for v in model.variables]
    omnilearn.keras.load_weights(model, args.export)  # docs/python.md's one line
    moved = sum(not np.array_equal(a, v.numpy()) for a, v in zip(before, model.variables))
    bn = model.get_layer("bn1")
    result = {"accuracy": test_accuracy(model), "variables_loaded": moved,
              "bn1_moving_var_mean": float(np.mean(bn.moving_variance.numpy()))}
    # And back: the model's own file of its weights loads into a fresh model to the same accuracy.
    omnilearn.keras.save_weights(model, args.export + ".keras_saved.safetensors")
    again = make_model()
    omnilearn.keras.load_weights(again, args.export + ".keras_saved.safetensors")
    result["saved_and_loaded_accuracy"] = test_accuracy(again)
    print(f"evaluate: {json.dumps(result)}", flush=True)
    json.dump(result, open(args.out, "w"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["reference", "worker", "evaluate"])
    parser.add_argument("--server", default=None)
    parser.add_argument("--name", default=None)
    parser.add_argument("--loop", choices=["fit", "tape"], default="fit")
    parser.add_argument("--device", default="", help="an emulated device (omnilearn.emulation)")
    parser.add_argument("--epochs", type=float, default=2)
    parser.add_argument("--lr", type=float, default=LR, help="the compiled SGD's rate (the server runs it)")
    parser.add_argument("--momentum", type=float, default=MOMENTUM, help="the compiled SGD's momentum")
    parser.add_argument("--limit", type=int, default=0, help="train on this many samples (0: all)")
    parser.add_argument("--ids", help="write the trained sample ids here (int64)")
    parser.add_argument("--log_every", type=int, default=0, help="tape: a line every this many steps (0: none)")
    parser.add_argument("--connect_timeout", type=float, default=10.0, help="seconds to wait for a server never reached")
    parser.add_argument("--reconnect_timeout", type=float, default=300.0, help="seconds to wait for a server lost")
    parser.add_argument("--export")
    parser.add_argument("--out")
    args = parser.parse_args()
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(int(os.environ.get("KERAS_JOB_THREADS", "1")))
    {"reference": reference, "worker": worker, "evaluate": evaluate}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
