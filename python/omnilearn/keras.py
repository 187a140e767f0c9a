"""TensorFlow and Keras 3 models as OmniLearn workers: the same job, server and protocol as
the PyTorch workers (the server knows no framework), in a tf.GradientTape custom loop or
through a fit-like call.

    import keras, tensorflow as tf, omnilearn.keras
    with omnilearn.keras.Worker("ps-host:50051", model, dataset_size=len(x), epochs=2) as w:
        for step in w:
            xb, yb = x[step.samples], y[step.samples]
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            w.push(loss, tape.gradient(loss, model.trainable_variables))

    history = omnilearn.keras.fit(model, x, y, server="ps-host:50051", epochs=2,
                                  validation_data=(x_test, y_test))      # a compiled model
    omnilearn.keras.load_weights(model, "export.safetensors")          # the job's export, into Keras

The model as the server sees it: model.trainable_variables (a push carries their
gradients), then the floating-point non-trainable variables (BatchNormalization's moving
mean and variance: a push carries their values, as the PyTorch worker carries buffers),
each named by its Keras path ("conv2d/kernel") and shaped as Keras holds it. Integer state
(a Dropout's seed) stays with each worker. The server runs the optimizer: a compiled
model's keras.optimizers.SGD, Adam or AdamW (or Worker(optimizer=...)) is described to it
at join, as the PyTorch worker's torch.optim object is (omnilearn.optim); never call its
apply_gradients. This module imports TensorFlow and Keras, and no PyTorch.
"""

import math
import sys
import time
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from omnilearn import tensor_files
from omnilearn.session import ServerError, Step, WorkerSession

__all__ = ["ServerError", "Step", "Worker", "fit", "load_weights", "model_tensors", "save_weights"]

# The floating types of the one dtype table: what a variable the server holds may be.
_DTYPE_NAMES = {framework: name for name, framework in tensor_files.FRAMEWORK_NAMES.items() if "float" in framework}


def _name(variable) -> str:
    """A variable's Keras path (Keras 3), or its name without the ':0' (a tf.Variable)."""
    return getattr(variable, "path", None) or variable.name.rsplit(":", 1)[0]


def _dtype(variable) -> str:
    return getattr(variable.dtype, "name", str(variable.dtype))


def model_tensors(model) -> list:
    """(name, variable, is_buffer) in layout order: the trainable variables, then the
    floating-point non-trainable ones. ValueError for a model not built yet, a name used
    twice, or a trainable variable of a type the server does not hold."""
    if not model.built or not model.variables:
        raise ValueError("the model is not built: call it on a batch, or give it a keras.Input, before the worker "
                         "(the layout is its variables' names and shapes)")
    prefix = f"{model.name}/"  # a Sequential's paths start with its own (process-numbered) name

    def name(v):
        n = _name(v)
        return n[len(prefix):] if n.startswith(prefix) else n
    entries = [(name(v), v, False) for v in model.trainable_variables]
    entries += [(name(v), v, True) for v in model.non_trainable_variables if _dtype(v) in _DTYPE_NAMES]
    if not any(not b for _, _, b in entries):
        raise ValueError("the model has no trainable variables")
    seen = set()
    for name, v, _ in entries:
        if _dtype(v) not in _DTYPE_NAMES:
            raise ValueError(f"variable '{name}' is {_dtype(v)}; a trainable variable must be one of "
                             f"{', '.join(_DTYPE_NAMES)}")
        if name in seen:
            raise ValueError(f"two variables are named '{name}': give the model's layers unique names")
        seen.add(name)
    return entries


class VariableStorage:
    """The model's variables as the core sends and receives them (see WorkerSession): one
    float32 vector of the weights and one of the update, in layout order. TensorFlow owns
    its variables' memory, so a model that arrives is assigned to them (received()) and a
    push copies the gradients out (prepare_update())."""

    def __init__(self, entries):
        self.entries = entries
        self.sizes = [int(np.prod(v.shape, dtype=np.int64)) for _, v, _ in entries]
        self.offsets = [int(o) for o in np.cumsum([0] + self.sizes[:-1])]
        self.total = sum(self.sizes)
        self.weights_host = np.zeros(self.total, dtype=np.float32)
        self.update_host = np.zeros(self.total, dtype=np.float32)
        self.trainable = sum(1 for _, _, b in entries if not b)
        self._gradients = None
        self._assign = None  # received()'s traced function, made at its first call

    def tensors(self):
        """(name, shape, is_buffer, dtype name) in layout order: what the join sends."""
        return [(name, [int(d) for d in v.shape], b, _DTYPE_NAMES[_dtype(v)]) for name, v, b in self.entries]

    def _spans(self):
        for (name, v, b), off, n in zip(self.entries, self.offsets, self.sizes):
            yield name, v, b, off, n

    def prepare_weights(self) -> np.ndarray:
        for _, v, _, off, n in self._spans():
            self.weights_host[off:off + n] = np.asarray(v.numpy(), dtype=np.float32).reshape(-1)
        return self.weights_host

    def received(self) -> None:
        """The model the core wrote into weights_host, into the variables: one traced
        function of every assign (eager assigns cost about 0.3 ms each)."""
        spans = list(self._spans())
        if self._assign is None:
            variables = [v for _, v, _, _, _ in spans]

            @tf.function
            def assign(values):
                for v, value in zip(variables, values):
                    v.assign(tf.cast(value, v.dtype))
            self._assign = assign
        self._assign([self.weights_host[off:off + n].reshape(v.shape) for _, v, _, off, n in spans])

    def set_gradients(self, gradients) -> None:
        gradients = list(gradients)
        if len(gradients) != self.trainable:
            raise ValueError(f"push() got {len(gradients)} gradients; the model has {self.trainable} trainable "
                             "variables: pass tape.gradient(loss, model.trainable_variables)")
        self._gradients = gradients

    def zero_grad(self) -> None:
        self._gradients = None

    def new_step(self) -> None:
        self._gradients = None

    def prepare_update(self, streamed: bool = False) -> np.ndarray:
        """The gradients set for this step (zeros for a None: a variable the loss does not
        reach), then the non-trainable variables' values."""
        for i, (name, v, b, off, n) in enumerate(self._spans()):
            if b:
                value = v.numpy()
            else:
                g = self._gradients[i] if self._gradients is not None else None
                if g is None:
                    self.update_host[off:off + n] = 0
                    continue
                value = tf.convert_to_tensor(g).numpy()  # an IndexedSlices (embeddings) made dense
            if value.size != n:
                raise ValueError(f"the gradient of '{name}' has {value.size} values, the variable {n}")
            self.update_host[off:off + n] = np.asarray(value, dtype=np.float32).reshape(-1)
        return self.update_host


# ---------------------------------------------------------------------- optimizer
_KERAS_KINDS = {"SGD": "sgd", "Adam": "adam", "AdamW": "adamw"}
_UNSUPPORTED = ("clipnorm", "clipvalue", "global_clipnorm", "gradient_accumulation_steps")


def _rate(optimizer) -> float:
    lr = getattr(optimizer, "_learning_rate", optimizer.learning_rate)  # Keras 3 keeps a schedule there
    if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule) or callable(lr):
        raise ValueError("the optimizer's learning rate is a schedule: the server steps, so Keras never advances it; "
                         "set a number and change optimizer.learning_rate between steps (a callback), or use the "
                         "server's flags")
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def describe_optimizer(optimizer) -> dict:
    """A Keras optimizer as the join describes it to the server (omnilearn.optim's form).
    ValueError naming the class or the option the server does not run."""
    kind = _KERAS_KINDS.get(type(optimizer).__name__)
    if kind is None or not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"the server cannot run {type(optimizer).__module__}.{type(optimizer).__qualname__}: it runs "
                         "keras.optimizers.SGD (learning_rate, momentum, weight_decay), Adam and AdamW "
                         "(learning_rate, beta_1, beta_2, epsilon, weight_decay); or pass optimizer=None (to "
                         "Worker or fit) to run the server's --optimizer flags")
    for option in _UNSUPPORTED:
        if getattr(optimizer, option, None) is not None:
            raise ValueError(f"{type(optimizer).__name__}({option}=...): the server does not run it here "
                             "(its --clip_grad_norm flag clips the global norm)")
    if getattr(optimizer, "use_ema", False) or getattr(optimizer, "nesterov", False):
        raise ValueError(f"{type(optimizer).__name__} with use_ema or nesterov: the server runs neither")
    weight_decay = float(optimizer.weight_decay or 0.0)
    if kind == "adam" and weight_decay:
        kind = "adamw"  # Keras decays every optimizer's weights decoupled, as torch's AdamW does
    momentum = float(getattr(optimizer, "momentum", 0.0) or 0.0)
    if kind == "sgd" and momentum and weight_decay:
        raise ValueError("SGD with momentum and weight_decay: Keras decays the weights outside the momentum, the "
                         "server (as torch.optim.SGD) inside; use one of them, or AdamW")
    return {"kind": kind, "lr": _rate(optimizer), "momentum": momentum, "weight_decay": weight_decay,
            "beta1": float(getattr(optimizer, "beta_1", 0.9)), "beta2": float(getattr(optimizer, "beta_2", 0.999)),
            "eps": float(getattr(optimizer, "epsilon", 1e-8)), "groups": []}


def _device_kind(entries) -> str:
    device = getattr(getattr(entries[0][1], "value", entries[0][1]), "device", "") or ""
    return "cuda" if "GPU" in device.upper() else "cpu"


class Worker(WorkerSession):
    """A Keras model (Keras 3 on TensorFlow, or tf.keras) as an OmniLearn worker (see the
    module's doc). The session's options (name, dataset_size, epochs, TLS, timeouts,
    emulate_device, metrics...) are omnilearn.options.WorkerOptions' fields, as keywords.

    Each step's compute time runs from the moment the step is handed out to push() (the
    data's gathering included); call start_compute() to start it later. The gradient leaves
    whole at push() and the new model is assigned to the variables before push() returns:
    TensorFlow computes a tape's gradients in one call and keeps its variables' memory its
    own. `optimizer`: a Keras SGD, Adam or AdamW for the server to run (fit() passes the
    compiled model's); a change of its learning_rate reaches the server with the next push.
    """

    def __init__(self, server, model, *, optimizer=None, **options):
        self.model = model
        entries = model_tensors(model)
        self.optimizer = optimizer
        spec = describe_optimizer(optimizer) if optimizer is not None else None
        self._sent_rate = (spec["lr"], 0) if spec else None
        storage = VariableStorage(entries)
        super().__init__(server, storage, storage.tensors(), device=_device_kind(entries), optimizer_spec=spec,
                         **options)

    def push(self, loss, gradients, test_accuracy: Optional[float] = None):
        """Sends the step's gradients (tape.gradient(loss, model.trainable_variables)) and
        assigns the new model to the variables. Returns the server's reply, or None when the
        step was dropped (the session was re-established) or the server stopped."""
        self._require_step()
        self.storage.set_gradients(gradients)
        return self._push_step(float(loss), test_accuracy)

    def _changed_rates(self) -> list:
        """The optimizer's learning rate when it changed since the server last had it (or
        the session was established again since); else [] (unchanged)."""
        if self.optimizer is None:
            return []
        now = (_rate(self.optimizer), self.rejoins)
        if now == self._sent_rate:
            return []
        self._sent_rate = now
        return [now[0]]


# ---------------------------------------------------------------------- fit
class _Batches:
    """The data as fit() indexes it: arrays x and y, or one source whose [ids] is (x, y)."""

    def __init__(self, x, y):
        if y is None and not hasattr(x, "__getitem__"):
            raise ValueError("fit() takes arrays x and y, or an indexable source whose source[ids] is (x, y)")
        self.x, self.y = x, y
        self.size = len(x)
        if y is not None and len(y) != self.size:
            raise ValueError(f"x holds {self.size} samples and y {len(y)}")

    def __getitem__(self, ids):
        if self.y is None:
            return self.x[ids]
        return self.x[ids], self.y[ids]


def _train_step(model):
    """One step's forward, the compiled loss and its gradients, the compiled metrics
    updated: a tf.function for every batch size (the server changes them)."""
    @tf.function(reduce_retracing=True)
    def step(x, y):
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred, training=True)
        gradients = tape.gradient(loss, model.trainable_variables)
        model.compute_metrics(x, y, y_pred)
        return loss, gradients
    return step


def _accuracy(logs: dict) -> Optional[float]:
    """The first accuracy among evaluation results, for the server's job accuracy."""
    for name, value in logs.items():
        if "acc" in name and 0.0 <= float(value) <= 1.0:
            return float(value)
    return None


class _Progress:
    """fit()'s lines and History: one per epoch of the job, as keras.Model.fit reports them."""

    def __init__(self, model, epochs, verbose):
        self.model, self.epochs, self.verbose = model, epochs, verbose
        self.history = keras.callbacks.History()
        self.history.set_model(model)
        self.history.on_train_begin()
        self.loss = keras.metrics.Mean(name="loss")
        self._start()

    def _start(self):
        self.loss.reset_state()
        for m in self.model.metrics:
            m.reset_state()
        self.t0, self.steps = time.perf_counter(), 0

    def logs(self) -> dict:
        out = {k: float(v) for k, v in self.model.get_metrics_result().items()}
        out["loss"] = float(self.loss.result())
        return out

    def end_epoch(self, epoch, validation, batch_size):
        logs = self.logs()
        if validation is not None:
            results = self.model.evaluate(validation[0], validation[1], batch_size=batch_size, verbose=0,
                                          return_dict=True)
            logs.update({f"val_{k}": float(v) for k, v in results.items()})
        self.history.on_epoch_end(epoch, logs)
        if self.verbose:
            text = " - ".join(f"{k}: {v:.4f}" for k, v in logs.items())
            print(f"Epoch {epoch + 1}/{math.ceil(self.epochs)}: {self.steps} steps, "
                  f"{time.perf_counter() - self.t0:.1f}s - {text}", file=sys.stdout, flush=True)
        self._start()
        return logs


_COMPILED = object()  # fit()'s optimizer: the compiled model's


def fit(model, x, y=None, *, server: Optional[str] = None, epochs: float = 1, validation_data=None,
        verbose: int = 1, optimizer=_COMPILED, **options):
    """Trains a compiled keras.Model as an OmniLearn worker, as model.fit would, with the
    server's batch sizes and sample assignment: `x` and `y` are arrays (anything indexed
    by an array of sample ids), or `x` alone a source whose source[ids] is (x, y). The
    compiled loss and metrics are computed; the compiled optimizer runs on the server
    (`optimizer`: another Keras optimizer, or None for the server's --optimizer flags).
    Each epoch of the job ends with a line of its metrics (and validation_data's, whose
    accuracy is reported to the server as the job's). Returns a keras.callbacks.History.
    `options`: the Worker's (name, emulate_device, ...)."""
    data = _Batches(x, y)
    if not getattr(model, "compiled", False) or getattr(model, "loss", None) is None:
        raise ValueError("fit() needs a compiled model: model.compile(optimizer=..., loss=..., metrics=[...])")
    step_fn = _train_step(model)
    progress = _Progress(model, epochs, verbose)
    if optimizer is _COMPILED:
        optimizer = model.optimizer
    with Worker(server, model, optimizer=optimizer, dataset_size=data.size, epochs=epochs, **options) as worker:
        epoch, batch = None, 0
        for step in worker:
            if epoch is not None and step.epoch != epoch:
                _end_epoch(worker, progress, epoch, validation_data, batch)
            epoch, batch = step.epoch, step.batch_size
            xb, yb = data[step.samples]
            loss, gradients = step_fn(xb, yb)
            progress.loss.update_state(loss, sample_weight=step.batch_size)
            progress.steps += 1
            worker.push(loss, gradients)
        if epoch is not None and not worker.stopped.is_set():
            if worker.mode != "sync":
                worker.pull()  # the model as the last pushes left it
            _end_epoch(worker, progress, epoch, validation_data, batch)
    return progress.history


def _end_epoch(worker, progress, epoch, validation_data, batch):
    logs = progress.end_epoch(epoch, validation_data, max(batch, 32))
    accuracy = _accuracy({k: v for k, v in logs.items() if k.startswith("val_")})
    if accuracy is not None:
        worker.report(accuracy, logs["loss"])


# ---------------------------------------------------------------------- files
def load_weights(model, path: str) -> None:
    """Loads an export or a checkpoint of the job (the server's safetensors) into the Keras
    model: every variable of the layout by its path. Paths that differ only as Keras
    numbered the layers of another process ("dense_3/kernel") are matched in layout order
    when every shape agrees. KeyError or ValueError naming what does not fit."""
    arrays, _, _ = tensor_files.read(path)
    arrays = {k: v for k, v in arrays.items() if not k.startswith("optimizer.")}
    entries = model_tensors(model)
    names = [name for name, _, _ in entries]
    if set(names) <= set(arrays):
        pairs = [(v, arrays[name], name) for name, v, _ in entries]
    elif len(arrays) == len(entries) and all(tuple(a.shape) == tuple(v.shape)
                                             for a, (_, v, _) in zip(arrays.values(), entries)):
        pairs = [(v, a, name) for a, (name, v, _) in zip(arrays.values(), entries)]
    else:
        missing = [n for n in names if n not in arrays]
        raise KeyError(f"{path} holds no {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}, and its "
                       "tensors do not match the model's in order and shape: is it this model's export?")
    for v, a, name in pairs:
        if tuple(a.shape) != tuple(v.shape):
            raise ValueError(f"'{name}' is {list(a.shape)} in {path}, {list(v.shape)} in the model")
        v.assign(a.astype(_dtype(v)))


def save_weights(model, path: str) -> None:
    """Writes the model's layout (trainable and floating non-trainable variables, by path)
    as a safetensors file: load_weights() reads it back, and it is the form of the job's
    export. Written to PATH.tmp, then renamed."""
    tensor_files.write(path, {name: np.asarray(v.numpy()) for name, v, _ in model_tensors(model)})
