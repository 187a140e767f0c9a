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
model's Keras optimizer (or Worker(optimizer=...)) is described to it at join, as the
PyTorch worker's torch.optim object is (omnilearn.optim): SGD, Adam, AdamW, Adadelta,
Adagrad, Adamax, Nadam, RMSprop, Lion, Lamb, Ftrl, Adafactor and Muon, each stepped as Keras
steps it. Never call its apply_gradients. This module imports TensorFlow and Keras, and no PyTorch.
"""

import math
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from omnilearn import tensor_files
from omnilearn.options import check_keywords
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

    def snapshot(self) -> np.ndarray:
        """The variables' values now, flat (a local round's start)."""
        return self.prepare_weights().copy()

    def prepare_difference(self, start: np.ndarray) -> np.ndarray:
        """A local round's push: `start` less the values now for the trainable variables (the
        round's pseudo-gradient), the non-trainable ones' values."""
        now = self.prepare_weights()
        for name, v, b, off, n in self._spans():
            self.update_host[off:off + n] = now[off:off + n] if b else start[off:off + n] - now[off:off + n]
        return self.update_host

    def trainable_pairs(self):
        """(gradient, variable) of the step's gradients, as an optimizer's apply_gradients takes them."""
        return [(g, v) for g, (_, v, b) in zip(self._gradients, self.entries) if not b and g is not None]

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
_KERAS_KINDS = {"SGD": "sgd", "Adam": "adam", "AdamW": "adamw", "Adadelta": "adadelta", "Nadam": "nadam",
                "Lion": "lion", "RMSprop": "rmsprop", "Adagrad": "adagrad", "Adamax": "adamax", "Lamb": "lamb",
                "Ftrl": "ftrl", "Adafactor": "adafactor", "Muon": "muon"}
# The kinds the server runs in Keras's own form (its option "keras": epsilon where Keras adds
# it, the rate inside SGD's and RMSprop's momentum, decoupled decay, float32 scalars).
_KERAS_FORM = {"sgd", "adam", "adamw", "adadelta", "rmsprop", "adagrad", "adamax", "nadam", "adafactor", "muon"}
# Keras's optimizers the server does not run: why, and the nearest one.
_KERAS_INSTEAD = {
    "ScheduleFreeAdamW": "schedule-free AdamW evaluates the gradient at an interpolation of two copies of the "
                         "weights that the server would have to send each step: keras.optimizers.AdamW(...)",
    "LossScaleOptimizer": "the worker's gradients reach the server unscaled and in float32, so loss scaling has "
                          "nothing to do: pass its inner_optimizer",
    "MultiOptimizer": "one optimizer runs a job: pass one (param groups of their own rate come with torch.optim)",
}
_KERAS_NEAREST = "keras.optimizers.Adam(learning_rate=0.001), the adaptive optimizer it runs (AdamW for decoupled decay)"
_KERAS_RUNS = ("keras.optimizers.SGD (momentum, nesterov), Adam and AdamW (beta_1, beta_2, epsilon, amsgrad), "
               "Adadelta, Adagrad, Adamax, Nadam, RMSprop (rho, momentum, centered), Lion, Lamb, Ftrl, Adafactor and "
               "Muon, with weight_decay")
_UNSUPPORTED = ("clipnorm", "clipvalue", "global_clipnorm", "gradient_accumulation_steps")


def _rate(optimizer) -> float:
    lr = getattr(optimizer, "_learning_rate", optimizer.learning_rate)  # Keras 3 keeps a schedule there
    if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule) or callable(lr):
        raise ValueError("the optimizer's learning rate is a schedule: the server steps, so Keras never advances it; "
                         "set a number and change optimizer.learning_rate between steps (a callback), or use the "
                         "server's flags")
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def _keras_options(kind: str, optimizer) -> dict:
    """The optimizer's options by the server's names (optimizer_rules.h)."""
    if kind == "sgd":
        return {"momentum": float(optimizer.momentum or 0.0), "nesterov": float(bool(optimizer.nesterov)),
                "keras": 1.0}
    if kind == "adadelta":
        return {"rho": float(optimizer.rho), "eps": float(optimizer.epsilon), "keras": 1.0}
    if kind == "ftrl":
        return {"learning_rate_power": float(optimizer.learning_rate_power),
                "initial_accumulator_value": float(optimizer.initial_accumulator_value),
                "l1_regularization_strength": float(optimizer.l1_regularization_strength),
                "l2_regularization_strength": float(optimizer.l2_regularization_strength),
                "l2_shrinkage_regularization_strength": float(optimizer.l2_shrinkage_regularization_strength),
                "beta": float(optimizer.beta)}
    if kind == "adafactor":
        return {"beta2_decay": float(optimizer.beta_2_decay), "eps1": float(optimizer.epsilon_1),
                "eps2": float(optimizer.epsilon_2), "d": float(optimizer.clip_threshold), "keras": 1.0}
    if kind == "muon":
        return {"momentum": float(optimizer.momentum), "nesterov": float(bool(optimizer.nesterov)),
                "ns_a": float(optimizer.muon_a), "ns_b": float(optimizer.muon_b), "ns_c": float(optimizer.muon_c),
                "ns_steps": float(optimizer.ns_steps), "eps": float(optimizer.epsilon),
                # Keras's lr_adjust: match_rms_adamw with its rms_rate, or none
                "adjust_lr_fn": 3.0 if optimizer.rms_rate is None else 1.0,
                "rms_rate": float(optimizer.rms_rate or 0.0), "keras": 1.0}
    if kind == "lion":
        return {"beta1": float(optimizer.beta_1), "beta2": float(optimizer.beta_2)}
    if kind == "rmsprop":
        return {"alpha": float(optimizer.rho), "eps": float(optimizer.epsilon), "momentum": float(optimizer.momentum),
                "centered": float(bool(optimizer.centered)), "keras": 1.0}
    if kind == "adagrad":
        return {"initial_accumulator_value": float(optimizer.initial_accumulator_value),
                "eps": float(optimizer.epsilon), "keras": 1.0}
    out = {"beta1": float(optimizer.beta_1), "beta2": float(optimizer.beta_2), "eps": float(optimizer.epsilon)}
    if kind in ("adam", "adamw"):
        out["amsgrad"] = float(bool(optimizer.amsgrad))
    if kind in _KERAS_FORM:
        out["keras"] = 1.0
    return out


def _muon_groups(optimizer, variables) -> list:
    """Keras's Muon as the server's param groups, by the server's tensor names: the matrices
    Muon steps, then those Keras's AdamW steps (vectors, embeddings, exclude_layers) at
    adam_lr_ratio of the rate, each decayed by its own weight decay at the optimizer's rate."""
    muon, adamw = [], []
    for name, v in variables:
        (adamw if optimizer._should_use_adamw(v) else muon).append(name)
    ratio = float(optimizer.adam_lr_ratio)
    lr = _rate(optimizer)
    adam_decay = float(optimizer.adam_weight_decay or 0.0)
    return [g for g in (
        {"tensors": muon, "lr": lr, "weight_decay": float(optimizer.weight_decay or 0.0), "options": {}},
        {"tensors": adamw, "lr": lr * ratio, "weight_decay": adam_decay / ratio if ratio else 0.0,
         "options": {"adamw": 1.0, "beta1": float(optimizer.adam_beta_1), "beta2": float(optimizer.adam_beta_2)}},
    ) if g["tensors"]]


def describe_optimizer(optimizer, variables=None) -> dict:
    """A Keras optimizer as the join describes it to the server (omnilearn.optim's form);
    `variables`, (server name, variable) pairs, place Muon's tensors in its groups.
    ValueError naming the class or the option the server does not run."""
    name = type(optimizer).__name__
    kind = _KERAS_KINDS.get(name)
    if kind is None or not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(f"the server cannot run {type(optimizer).__module__}.{type(optimizer).__qualname__}: it runs "
                         f"{_KERAS_RUNS}. The nearest: {_KERAS_INSTEAD.get(name, _KERAS_NEAREST)}. Or pass "
                         "optimizer=None (to Worker or fit) to run the server's --optimizer flags")
    for option in _UNSUPPORTED:
        if getattr(optimizer, option, None) is not None:
            raise ValueError(f"{name}({option}=...): the server does not run it here "
                             "(its --clip_grad_norm flag clips the global norm)")
    if getattr(optimizer, "use_ema", False):
        raise ValueError(f"{name} with use_ema: the server keeps no moving average of the weights")
    weight_decay = float(optimizer.weight_decay or 0.0)
    options = _keras_options(kind, optimizer)
    if kind == "adam" and weight_decay:
        kind = "adamw"  # Keras decays every optimizer's weights decoupled, as torch's AdamW does
    if kind == "muon" and variables is None:
        raise ValueError("Muon: describe_optimizer needs the model's variables, which place each in its group")
    groups = _muon_groups(optimizer, variables) if kind == "muon" else []
    described = {"kind": kind, "lr": _rate(optimizer), "weight_decay": weight_decay,
                 "momentum": options.get("momentum", 0.0), "beta1": options.get("beta1", 0.9),
                 "beta2": options.get("beta2", 0.999), "eps": options.get("eps", 1e-8), "options": options,
                 "groups": groups if len(groups) > 1 else []}
    if len(groups) == 1:  # one kind of tensor: the group is the job's
        described.update(lr=groups[0]["lr"], weight_decay=groups[0]["weight_decay"])
        options.update(groups[0]["options"])
    return described


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
    own. `optimizer`: a Keras optimizer for the server to run (fit() passes the
    compiled model's); a change of its learning_rate reaches the server with the next push.
    """

    def __init__(self, server, model, *, optimizer=None, **options):
        self.model = model
        entries = model_tensors(model)
        self.optimizer = optimizer
        spec = describe_optimizer(optimizer, [(n, v) for n, v, buffer in entries if not buffer]) \
            if optimizer is not None else None
        if spec:  # each param group's rate as a multiple of the optimizer's (Muon's AdamW: adam_lr_ratio)
            base = _rate(optimizer)
            self._rate_factors = [lr / base if base else 1.0 for lr in [g["lr"] for g in spec["groups"]] or [spec["lr"]]]
        self._sent_rates = (self._rates(), 0) if spec else None  # the rates the server has, at this many rejoins
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

    def _begin_local_steps(self):
        if self.optimizer is None:
            raise ValueError("the server runs local steps (--local_steps or --local_batch): each worker steps the "
                             "program's own optimizer, so pass it: Worker(..., optimizer=opt), or compile the model "
                             "with one for fit()")
        super()._begin_local_steps()

    def _local_step(self):
        self.optimizer.apply_gradients(self.storage.trainable_pairs())

    def _optimizer_rates(self) -> Optional[list]:
        return None if self.optimizer is None else self._rates()

    def _rates(self) -> list:
        """Each param group's rate now: the optimizer's, times the group's factor."""
        rate = _rate(self.optimizer)
        return [rate * f for f in self._rate_factors]


# ---------------------------------------------------------------------- fit
class _Batches:
    """The data as fit() indexes it: arrays x and y (and per-sample weights), or one source
    whose [ids] is (x, y)."""

    def __init__(self, x, y, sample_weight=None):
        if y is None and not hasattr(x, "__getitem__"):
            raise ValueError("fit() takes arrays x and y, or an indexable source whose source[ids] is (x, y)")
        self.x, self.y, self.sample_weight = x, y, sample_weight
        self.size = len(x)
        if y is not None and len(y) != self.size:
            raise ValueError(f"x holds {self.size} samples and y {len(y)}")
        if sample_weight is not None and len(sample_weight) != self.size:
            raise ValueError(f"sample_weight holds {len(sample_weight)} weights for {self.size} samples")

    def __getitem__(self, ids):
        xb, yb = self.x[ids] if self.y is None else (self.x[ids], self.y[ids])
        weights = None if self.sample_weight is None else np.asarray(self.sample_weight)[ids]
        return xb, yb, weights


def _split(x, y, sample_weight, validation_split):
    """model.fit's validation_split: the last samples of x and y (before any shuffling) are the
    validation data; the rest is trained. (train x, y, weights, validation (x, y))."""
    if not 0.0 <= validation_split < 1.0:
        raise ValueError(f"validation_split must be in [0, 1), not {validation_split}")
    if y is None:
        raise ValueError("validation_split is only supported for arrays x and y: pass validation_data for a source")
    cut = len(x) - int(math.ceil(len(x) * validation_split))  # Keras's rule: the validation part rounded up
    if cut <= 0:
        raise ValueError(f"validation_split={validation_split} leaves no training sample of {len(x)}")
    weights = None if sample_weight is None else sample_weight[:cut]
    return x[:cut], y[:cut], weights, (x[cut:], y[cut:])


def _class_weights(class_weight, yb):
    """A batch's per-sample weights from class_weight (labels as integers or one-hot rows)."""
    labels = np.asarray(yb)
    if labels.ndim > 1 and labels.shape[-1] > 1:
        labels = labels.argmax(-1)
    labels = labels.reshape(-1).astype(np.int64)
    missing = set(np.unique(labels).tolist()) - set(class_weight)
    if missing:
        raise ValueError(f"class_weight has no weight for class {sorted(missing)[0]}")
    return np.array([class_weight[c] for c in labels.tolist()], dtype=np.float32)


def _train_step(model):
    """One step's forward, the compiled loss (sample-weighted) and its gradients, the compiled
    metrics updated: a tf.function for every batch size (the server changes them)."""
    @tf.function(reduce_retracing=True)
    def step(x, y, sample_weight):
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
        gradients = tape.gradient(loss, model.trainable_variables)
        model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
        return loss, gradients
    return step


def _accuracy(logs: dict) -> Optional[float]:
    """The first accuracy among evaluation results, for the server's job accuracy."""
    for name, value in logs.items():
        if "acc" in name and 0.0 <= float(value) <= 1.0:
            return float(value)
    return None


_COMPILED = object()  # fit()'s optimizer: the compiled model's

# model.fit's arguments and what each is in a job; those fit() does not take are refused by name.
_REFUSED = {
    "batch_size": "in an OmniLearn job the server sets every worker's batch: the job's global batch (the "
                  "server's --global_batch) split by the workers' speeds. Start the server with "
                  "--global_batch={value} and leave batch_size out of fit()",
    "shuffle": "the server draws every epoch's order of the samples (its --data_seed) for all the workers; "
               "a job cannot keep the data's order. Leave shuffle out (True)",
}


def _check_fit_arguments(batch_size, shuffle, options):
    if batch_size is not None:
        raise ValueError(f"fit(batch_size={batch_size}): " + _REFUSED["batch_size"].format(value=batch_size))
    if shuffle is not True:
        raise ValueError(f"fit(shuffle={shuffle!r}): " + _REFUSED["shuffle"])
    check_keywords(options, "fit", "it takes model.fit's arguments and the worker's options (docs/keras.md)")


class _Epochs:
    """Where the job's steps fall in model.fit's epochs: the job's own (every sample once across
    the workers: Step.epoch_end) or steps_per_epoch of this worker's steps; numbered from
    initial_epoch."""

    def __init__(self, initial_epoch, steps_per_epoch):
        self.initial, self.steps_per_epoch = initial_epoch, steps_per_epoch
        self.current, self.step_in_epoch = initial_epoch, 0

    def ended(self, step) -> bool:
        self.step_in_epoch += 1
        if self.steps_per_epoch:
            return self.step_in_epoch >= self.steps_per_epoch
        return step.epoch_end

    def next(self):
        self.current += 1
        self.step_in_epoch = 0


def fit(model, x=None, y=None, *, server: Optional[str] = None, batch_size=None, epochs: float = 1,
        verbose="auto", callbacks=None, validation_split: float = 0.0, validation_data=None, shuffle=True,
        class_weight=None, sample_weight=None, initial_epoch: int = 0, steps_per_epoch=None,
        validation_steps=None, validation_batch_size=None, validation_freq: int = 1, optimizer=_COMPILED,
        **options):
    """Trains a compiled keras.Model as an OmniLearn worker, as model.fit would, with the
    server's batch sizes and sample assignment. `x` and `y` are arrays (anything indexed by an
    array of sample ids), or `x` alone a source whose source[ids] is (x, y). model.fit's
    arguments mean what they mean there, in a job:
    - epochs: the job's epochs (every sample once per epoch, across the workers), from
      initial_epoch; steps_per_epoch: an epoch of that many of this worker's steps instead,
      and this worker trains (epochs - initial_epoch) of them;
    - validation_split (the last samples of x and y) or validation_data, evaluated at each
      epoch's end (every validation_freq epochs; validation_steps, validation_batch_size); its
      accuracy is reported to the server as the job's validation accuracy;
    - callbacks: Keras callbacks (History, EarlyStopping, ModelCheckpoint, CSVLogger,
      LearningRateScheduler, ReduceLROnPlateau, TensorBoard...) on this worker's epochs and
      steps; a learning rate they change reaches the server with the next push, and a callback
      that stops training makes this worker leave the job;
    - class_weight and sample_weight weigh each sample's loss; verbose as Keras's (0, 1, 2);
    - batch_size is the server's (--global_batch), shuffle is the server's too: both refused
      with the reason; a keyword of neither model.fit nor the worker is a TypeError.
    The compiled loss and metrics are computed; the compiled optimizer runs on the server
    (`optimizer`: another Keras optimizer, or None for the server's --optimizer flags).
    `options`: the Worker's (name, emulate_device, ...). Returns the keras.callbacks.History."""
    _check_fit_arguments(batch_size, shuffle, options)
    if validation_split and validation_data is None:
        x, y, sample_weight, validation_data = _split(x, y, sample_weight, validation_split)
    data = _Batches(x, y, sample_weight)
    if not getattr(model, "compiled", False) or getattr(model, "loss", None) is None:
        raise ValueError("fit() needs a compiled model: model.compile(optimizer=..., loss=..., metrics=[...])")
    if not 0 <= initial_epoch < epochs:
        raise ValueError(f"initial_epoch={initial_epoch} leaves no epoch of epochs={epochs} to train")
    job_epochs = epochs - initial_epoch
    if steps_per_epoch is not None:
        if steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be 1 or more, not {steps_per_epoch}")
        options.setdefault("max_iterations", int(math.ceil(steps_per_epoch * job_epochs)))
    verbose = 1 if verbose == "auto" else verbose
    calls = keras.callbacks.CallbackList(callbacks, add_history=True, add_progbar=verbose != 0, model=model,
                                         verbose=verbose, epochs=math.ceil(epochs), steps=steps_per_epoch)
    evaluation = dict(steps=validation_steps, batch_size=validation_batch_size or 32, verbose=0, return_dict=True)
    if optimizer is _COMPILED:
        optimizer = model.optimizer
    train_step = _train_step(model)
    model.stop_training = False
    loss_mean = keras.metrics.Mean(name="loss")
    calls.on_train_begin()
    with Worker(server, model, optimizer=optimizer, dataset_size=data.size, epochs=job_epochs, **options) as worker:
        epochs_seen = _Epochs(initial_epoch, steps_per_epoch)
        logs = {}
        for step in worker:
            if epochs_seen.step_in_epoch == 0:
                _begin_epoch(calls, model, loss_mean, epochs_seen.current)
            calls.on_train_batch_begin(epochs_seen.step_in_epoch)
            xb, yb, weights = data[step.samples]
            if class_weight is not None:
                cw = _class_weights(class_weight, yb)
                weights = cw if weights is None else weights * cw
            if weights is None:
                weights = np.ones(len(step.samples), dtype=np.float32)
            loss, gradients = train_step(xb, yb, weights)
            loss_mean.update_state(loss, sample_weight=step.batch_size)
            worker.push(loss, gradients)
            logs = _train_logs(model, loss_mean)
            calls.on_train_batch_end(epochs_seen.step_in_epoch, logs)
            if not epochs_seen.ended(step):
                continue
            logs = _end_epoch(worker, calls, epochs_seen.current, validation_data, validation_freq, evaluation, logs)
            if model.stop_training:
                worker.finished = True  # a callback ended training: this worker leaves the job, done
                break
            epochs_seen.next()
        if epochs_seen.step_in_epoch and not model.stop_training:  # the job ended inside an epoch of ours
            if worker.mode != "sync":
                worker.pull()  # the model as the last pushes left it
            logs = _end_epoch(worker, calls, epochs_seen.current, validation_data, validation_freq, evaluation, logs)
    calls.on_train_end(logs)
    return model.history


def _begin_epoch(calls, model, loss_mean, epoch):
    loss_mean.reset_state()
    for m in model.metrics:
        m.reset_state()
    calls.on_epoch_begin(epoch)


def _train_logs(model, loss_mean) -> dict:
    logs = {k: float(v) for k, v in model.get_metrics_result().items()}
    logs["loss"] = float(loss_mean.result())
    return logs


def _end_epoch(worker, calls, epoch, validation_data, validation_freq, evaluation, logs) -> dict:
    """The epoch's validation (every validation_freq epochs), reported to the server as the job's
    validation accuracy, then the callbacks' epoch end."""
    logs = dict(logs)
    if validation_data is not None and (epoch + 1) % validation_freq == 0:
        results = worker.model.evaluate(validation_data[0], validation_data[1], **evaluation)
        logs.update({f"val_{k}": float(v) for k, v in results.items()})
        accuracy = _accuracy(results)
        if accuracy is not None:
            worker.report(accuracy, logs["loss"], validation=True)
    calls.on_epoch_end(epoch, logs)
    return logs


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
