"""omnilearn.keras without a server: the layout of a Keras model, its storage's round trips,
the optimizer's description and its refusals, and the export's files both ways. Runs on the
TensorFlow venv (tests/keras_workers_test.sh), where torch is not installed."""

import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from omnilearn import keras as okeras
from omnilearn import tensor_files


def cnn(seed=1, dropout=False):
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, name="conv"), keras.layers.BatchNormalization(name="bn"),
              keras.layers.Flatten()]
    if dropout:
        layers.append(keras.layers.Dropout(0.5, name="drop"))
    layers.append(keras.layers.Dense(3, name="fc"))
    return keras.Sequential(layers, name="net")


def test_no_torch_imported():
    assert "torch" not in sys.modules


def test_layout_is_trainable_then_float_state_by_path():
    model = cnn(dropout=True)  # the Dropout's integer seed stays with the worker
    names = [(n, b) for n, _, b in okeras.model_tensors(model)]
    assert names == [("conv/kernel", False), ("conv/bias", False), ("bn/gamma", False), ("bn/beta", False),
                     ("fc/kernel", False), ("fc/bias", False), ("bn/moving_mean", True), ("bn/moving_variance", True)]
    storage = okeras.VariableStorage(okeras.model_tensors(model))
    assert storage.tensors()[0] == ("conv/kernel", [3, 3, 1, 4], False, "F32")
    assert storage.total == sum(int(np.prod(v.shape)) for _, v, _ in okeras.model_tensors(model))


def test_unbuilt_model_and_duplicate_names_are_refused():
    with pytest.raises(ValueError, match="not built"):
        okeras.model_tensors(keras.Sequential([keras.layers.Dense(2)]))


def test_storage_round_trips_weights_and_update():
    model, other = cnn(1), cnn(2)
    a, b = okeras.VariableStorage(okeras.model_tensors(model)), okeras.VariableStorage(okeras.model_tensors(other))
    b.weights_host[:] = a.prepare_weights()
    b.received()
    for v, w in zip(model.variables, other.variables):
        np.testing.assert_array_equal(v.numpy(), w.numpy())
    x = np.random.default_rng(0).normal(size=(5, 8, 8, 1)).astype(np.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(model(x, training=True) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    with pytest.raises(ValueError, match="trainable variables"):
        a.set_gradients(grads[:-1])
    a.set_gradients(grads[:-1] + [None])  # a variable the loss does not reach: zeros
    update = a.prepare_update()
    first = grads[0].numpy().reshape(-1)
    np.testing.assert_array_equal(update[:first.size], first)
    names = [n for n, _, _ in a.entries]
    off = a.offsets[names.index("fc/bias")]
    assert not update[off:off + 3].any()
    off = a.offsets[names.index("bn/moving_mean")]  # a buffer's value, moved by the training forward
    np.testing.assert_array_equal(update[off:off + 4], model.get_layer("bn").moving_mean.numpy())
    assert update[off:off + 4].any()


def test_optimizers_described_as_the_server_runs_them():
    sgd = okeras.describe_optimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    assert (sgd["kind"], sgd["lr"], sgd["momentum"], sgd["weight_decay"]) == ("sgd", pytest.approx(0.1), 0.9, 0.0)
    adamw = okeras.describe_optimizer(keras.optimizers.AdamW(0.001, weight_decay=0.01, beta_2=0.99))
    assert (adamw["kind"], adamw["weight_decay"], adamw["beta2"]) == ("adamw", pytest.approx(0.01), 0.99)
    # Keras decays Adam's weights decoupled: torch's AdamW.
    assert okeras.describe_optimizer(keras.optimizers.Adam(weight_decay=0.1))["kind"] == "adamw"
    nadam = okeras.describe_optimizer(keras.optimizers.Nadam(weight_decay=0.01))
    assert (nadam["kind"], nadam["options"]["keras"]) == ("nadam", 1.0)
    assert okeras.describe_optimizer(keras.optimizers.SGD(nesterov=True, momentum=0.9))["options"]["nesterov"] == 1
    assert okeras.describe_optimizer(keras.optimizers.RMSprop(centered=True))["options"] == {
        "alpha": 0.9, "eps": 1e-7, "momentum": 0.0, "centered": 1.0, "keras": 1.0}
    for bad, why in [(keras.optimizers.SGD(clipnorm=1.0), "clipnorm"),
                     (keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.9)), "schedule")]:
        with pytest.raises(ValueError, match=why):
            okeras.describe_optimizer(bad)


def test_muon_is_described_as_keras_groups_its_tensors():
    """Keras's Muon steps a 2-D kernel itself and hands vectors and embeddings to its AdamW,
    at adam_lr_ratio of the rate: two param groups, by the server's tensor names."""
    model = keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(10, 4, name="emb"),
                              keras.layers.Flatten(), keras.layers.Dense(2, name="fc")])
    entries = okeras.model_tensors(model)
    muon = keras.optimizers.Muon(learning_rate=0.01, adam_lr_ratio=0.5, weight_decay=0.1, adam_weight_decay=0.2)
    d = okeras.describe_optimizer(muon, [(n, v) for n, v, b in entries if not b])
    assert d["kind"] == "muon" and d["options"]["keras"] == 1.0
    (matrices, rest) = d["groups"]
    assert matrices["tensors"] == ["fc/kernel"] and matrices["lr"] == pytest.approx(0.01)
    assert sorted(rest["tensors"]) == ["emb/embeddings", "fc/bias"] and rest["lr"] == pytest.approx(0.005)
    assert rest["options"]["adamw"] == 1.0 and rest["weight_decay"] == pytest.approx(0.4)  # Keras decays at lr
    with pytest.raises(ValueError, match="needs the model's variables"):
        okeras.describe_optimizer(muon)


def test_a_refusal_names_the_nearest_optimizer_that_runs_and_its_rate():
    for bad, says in [(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()), "pass its inner_optimizer"),
                      (keras.optimizers.ScheduleFreeAdamW(), "two copies of the weights")]:
        with pytest.raises(ValueError) as e:
            okeras.describe_optimizer(bad)
        assert says in str(e.value)


def test_export_loads_by_path_and_by_order(tmp_path):
    model = cnn(1)
    path = str(tmp_path / "export.safetensors")
    okeras.save_weights(model, path)
    arrays, dtypes, _ = tensor_files.read(path)
    assert list(arrays)[0] == "conv/kernel" and dtypes["conv/kernel"] == "F32"
    fresh = cnn(2)
    okeras.load_weights(fresh, path)
    for v, w in zip(model.variables, fresh.variables):
        np.testing.assert_array_equal(v.numpy(), w.numpy())
    # Another process's auto-numbered names: matched in order when every shape agrees.
    renamed = {f"x{i}/{k}": v for i, (k, v) in enumerate(arrays.items())}
    tensor_files.write(path, renamed)
    okeras.load_weights(cnn(3), path)
    tensor_files.write(path, dict(list(renamed.items())[:-1]))
    with pytest.raises(KeyError, match="holds no"):
        okeras.load_weights(cnn(3), path)
    tensor_files.write(path, {**arrays, "fc/bias": np.zeros(4, np.float32)})
    with pytest.raises(ValueError, match="'fc/bias' is \\[4\\]"):
        okeras.load_weights(cnn(3), path)


def test_fit_needs_a_compiled_model():
    with pytest.raises(ValueError, match="compiled model"):
        okeras.fit(cnn(), np.zeros((4, 8, 8, 1), np.float32), np.zeros(4, np.int64), server="127.0.0.1:1")
    with pytest.raises(ValueError, match="x holds 4 samples and y 3"):
        okeras._Batches(np.zeros((4, 1)), np.zeros(3))


def test_tf_keras_model_is_taken_as_well():
    """tf.keras (Keras 3 in TensorFlow 2.16 and later) builds models this module takes."""
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2, name="fc")])
    assert [(n, b) for n, _, b in okeras.model_tensors(model)] == [("fc/kernel", False), ("fc/bias", False)]


def test_fit_refuses_an_optimizer_the_server_does_not_run_and_says_what_to_do():
    model = cnn()
    model.compile(optimizer=keras.optimizers.ScheduleFreeAdamW(), loss="mse")
    with pytest.raises(ValueError, match="optimizer=None"):
        okeras.fit(model, np.zeros((4, 8, 8, 1), np.float32), np.zeros((4, 3), np.float32), server="127.0.0.1:1")
