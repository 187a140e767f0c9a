"""omnilearn.keras.fit with model.fit's arguments, in jobs of a real server
(OMNILEARN_SERVER_BIN, which tests/keras_workers_test.sh sets) and one Keras worker: the
callbacks, validation_split, class and sample weights, initial_epoch, steps_per_epoch; and
the refusals, in Keras's words, of what the server decides."""

import csv
import json
import os
import socket
import subprocess

import keras
import numpy as np
import pytest

from omnilearn import keras as okeras

SERVER = os.environ.get("OMNILEARN_SERVER_BIN")
needs_server = pytest.mark.skipif(not SERVER, reason="needs OMNILEARN_SERVER_BIN (tests/keras_workers_test.sh)")


def data(n=320, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8, 8, 1)).astype(np.float32)
    return x, (x.mean((1, 2, 3)) > 0).astype(np.int64)


def model(lr=0.1):
    keras.utils.set_random_seed(1)
    m = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(2, name="fc")])
    m.compile(optimizer=keras.optimizers.SGD(lr), metrics=["accuracy"],
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


class Job:
    """A server on 127.0.0.1 for one worker, global batch 32; its summary once it exited."""

    def __init__(self, tmp_path, *flags):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.summary_path = tmp_path / "summary.json"
        self.server = subprocess.Popen([SERVER, "--bind=127.0.0.1", f"--port={self.port}", "--metrics_port=0",
                                        "--num_workers=1", "--global_batch=32", "--exit_when_done", "--quiet",
                                        f"--summary_json={self.summary_path}", *flags])
        self.address = f"127.0.0.1:{self.port}"

    def summary(self):
        assert self.server.wait(timeout=120) == 0
        return json.loads(self.summary_path.read_text())

    def stop(self):
        if self.server.poll() is None:
            self.server.kill()
            self.server.wait(timeout=60)


@pytest.fixture
def job(tmp_path):
    j = Job(tmp_path)
    yield j
    j.stop()


def test_batch_size_shuffle_and_unknown_keywords_are_refused_in_keras_words():
    x, y = data(8)
    with pytest.raises(ValueError, match="server's --global_batch.*--global_batch=128 and leave batch_size out"):
        okeras.fit(model(), x, y, server="127.0.0.1:1", batch_size=128)
    with pytest.raises(ValueError, match="shuffle=False.*--data_seed"):
        okeras.fit(model(), x, y, server="127.0.0.1:1", shuffle=False)
    with pytest.raises(TypeError, match="fit\\(\\) got an unexpected keyword argument 'batchsize'"):
        okeras.fit(model(), x, y, server="127.0.0.1:1", batchsize=128)
    with pytest.raises(ValueError, match="validation_split must be in"):
        okeras.fit(model(), x, y, server="127.0.0.1:1", validation_split=1.0)


def test_validation_split_is_the_last_samples_as_keras_takes_them():
    x, y = np.arange(10), np.arange(10) * 2
    tx, ty, w, (vx, vy) = okeras._split(x, y, None, 0.25)  # 2.5 rounds up to 3, as in Keras
    assert tx.tolist() == list(range(7)) and vx.tolist() == [7, 8, 9] and vy.tolist() == [14, 16, 18]
    assert w is None


def test_class_weight_weighs_each_sample_by_its_class():
    assert okeras._class_weights({0: 1.0, 1: 3.0}, np.array([1, 0, 1])).tolist() == [3.0, 1.0, 3.0]
    assert okeras._class_weights({0: 1.0, 1: 3.0}, np.eye(2)[[1, 0]]).tolist() == [3.0, 1.0]  # one-hot
    with pytest.raises(ValueError, match="no weight for class 2"):
        okeras._class_weights({0: 1.0, 1: 3.0}, np.array([2]))


@needs_server
def test_callbacks_run_on_the_jobs_epochs(job, tmp_path):
    x, y = data()
    m = model()
    calls = [keras.callbacks.CSVLogger(str(tmp_path / "log.csv")),
             keras.callbacks.ModelCheckpoint(str(tmp_path / "e{epoch}.weights.h5"), save_weights_only=True),
             keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.1 * 0.5 ** epoch),
             keras.callbacks.ReduceLROnPlateau(monitor="val_loss", patience=5),
             keras.callbacks.TensorBoard(str(tmp_path / "tb"))]
    history = okeras.fit(m, x, y, server=job.address, epochs=3, validation_split=0.1, callbacks=calls,
                         verbose=0, name="k0")
    s = job.summary()
    assert s["global_samples"] == 3 * 288  # 320 less the validation's 32, every epoch once
    assert s["test_accuracy"] is None  # what fit() reported is named for what it is
    assert s["validation_accuracy"] == pytest.approx(history.history["val_accuracy"][-1])
    assert sorted(history.history) == ["accuracy", "learning_rate", "loss", "val_accuracy", "val_loss"]
    assert history.epoch == [0, 1, 2]
    assert history.history["learning_rate"] == pytest.approx([0.1, 0.05, 0.025])
    rows = list(csv.DictReader(open(tmp_path / "log.csv")))
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    assert all((tmp_path / f"e{e}.weights.h5").is_file() for e in (1, 2, 3))
    assert history.history["val_loss"][-1] < history.history["val_loss"][0]
    assert list((tmp_path / "tb" / "train").glob("events.out.tfevents.*"))  # TensorBoard's logs
    assert list((tmp_path / "tb" / "validation").glob("events.out.tfevents.*"))


@needs_server
def test_early_stopping_makes_the_worker_leave_done(job):
    x, y = data()
    stop = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=1e9)  # stops after epoch 2
    history = okeras.fit(model(), x, y, server=job.address, epochs=5, callbacks=[stop], verbose=0, name="k0")
    assert history.epoch == [0, 1]
    assert job.summary()["global_samples"] == 2 * 320


@needs_server
def test_initial_epoch_steps_per_epoch_and_weights(job):
    x, y = data()
    weights = np.where(y == 1, 2.0, 1.0).astype(np.float32)
    history = okeras.fit(model(), x, y, server=job.address, epochs=4, initial_epoch=2, steps_per_epoch=4,
                         sample_weight=weights, class_weight={0: 1.0, 1: 0.5}, verbose=0, name="k0")
    assert history.epoch == [2, 3]
    s = job.summary()
    assert s["global_samples"] == 8 * 32  # 2 epochs of 4 steps of the global batch


@needs_server
def test_keras_muon_runs_in_a_job_its_groups_at_the_callbacks_rates(job, tmp_path):
    """Keras's Muon: the Dense kernel in Muon's group, the bias in its AdamW's at
    adam_lr_ratio of the rate; a LearningRateScheduler's rates reach both groups."""
    x, y = data()
    m = model()
    m.compile(optimizer=keras.optimizers.Muon(learning_rate=0.05, adam_lr_ratio=0.5), metrics=["accuracy"],
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rates = keras.callbacks.LearningRateScheduler(lambda epoch, lr: 0.05 * 0.5 ** epoch)
    history = okeras.fit(m, x, y, server=job.address, epochs=3, callbacks=[rates], verbose=0, name="k0")
    assert job.summary()["global_samples"] == 3 * 320
    assert history.history["learning_rate"] == pytest.approx([0.05, 0.025, 0.0125])
    assert history.history["loss"][-1] < history.history["loss"][0]


@needs_server
def test_local_steps_step_the_compiled_optimizer_on_the_worker(tmp_path):
    """--local_steps=4: fit() splits each batch in four steps of the compiled Adam, the server
    steps the pseudo-gradients with its outer Nesterov SGD; every sample trains once."""
    job = Job(tmp_path, "--local_steps=4", "--optimizer=sgd", "--lr=0.7", "--momentum=0.5",
              "--optimizer_options=nesterov=1")
    try:
        x, y = data()
        m = model()
        m.compile(optimizer=keras.optimizers.Adam(0.01), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        before = m.optimizer.iterations.numpy()
        history = okeras.fit(m, x, y, server=job.address, epochs=3, verbose=0, name="k0")
        assert job.summary()["global_samples"] == 3 * 320
        assert m.optimizer.iterations.numpy() - before == 4 * 30  # 10 rounds of 32 an epoch, 4 steps each
        assert history.history["loss"][-1] < history.history["loss"][0]
    finally:
        job.stop()
