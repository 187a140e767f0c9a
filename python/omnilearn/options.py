"""A worker's options, grouped and declared once: what omnilearn.Worker and
omnilearn.keras.Worker take as keywords beyond their framework's own, with their defaults,
their environment fallbacks and their checks. Imports no framework."""

import os
from dataclasses import dataclass, replace
from typing import Callable, Optional


def from_env(value, variable):
    """An argument left out (None) takes its value from the environment, torchrun-style."""
    return value if value is not None else (os.environ.get(variable) or None)


def check_keywords(options: dict, caller: str, takes: str) -> None:
    """TypeError, as Python words it for `caller`, for a keyword that is no WorkerOptions field
    (`takes`: what the caller does take, and where it is written)."""
    unknown = sorted(set(options) - set(WorkerOptions.__dataclass_fields__))
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument '{unknown[0]}': {takes}")


@dataclass(frozen=True)
class WorkerOptions:
    """Every option of a worker's session. Left out, `name`, `auth_token_file` and the TLS
    files come from the environment (OMNILEARN_NAME, OMNILEARN_AUTH_TOKEN_FILE,
    OMNILEARN_TLS_CA, _CERT, _KEY, _SERVER_NAME; python -m omnilearn.run sets the name)."""

    # The job: this worker's name and host (for the server's status and metrics), the data
    # set's size (the server assigns its samples), how long to train (epochs of the job's
    # global samples, or this worker's own iterations) and a batch ceiling the worker knows.
    name: Optional[str] = None
    host: Optional[str] = None
    dataset_size: int = 0
    epochs: float = 0.0
    max_iterations: int = 0
    max_batch_size: int = 0
    # The connection: a token (or a file holding it), TLS, and how long to wait for a call
    # (rpc_timeout), for a server never reached (connect_timeout: at once when its name does
    # not resolve) and for one lost after joining (reconnect_timeout).
    auth_token: Optional[str] = None
    auth_token_file: Optional[str] = None
    tls_ca: Optional[str] = None
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    tls_server_name: Optional[str] = None
    rpc_timeout: float = 600.0
    reconnect_timeout: float = 300.0
    connect_timeout: float = 10.0
    # Devices that are not this one: steps paced as a device of an emulated profile
    # (omnilearn.emulation), or real compute stretched by `slowdown`.
    emulate_device: Optional[str] = None
    slowdown: float = 1.0
    # Observability: this worker's Prometheus series at /metrics (port 0: none), and where
    # its lines go (the logging module's "omnilearn" logger unless given).
    metrics_port: int = 0
    metrics_bind: str = "0.0.0.0"
    log: Optional[Callable[[str], None]] = None

    def resolved(self) -> "WorkerOptions":
        """The options with the environment's values filled in and checked; ValueError for
        values that cannot go together or out of range."""
        o = replace(self, name=from_env(self.name, "OMNILEARN_NAME"),
                    auth_token_file=(self.auth_token_file if self.auth_token is not None
                                     else from_env(self.auth_token_file, "OMNILEARN_AUTH_TOKEN_FILE")),
                    **{f"tls_{k}": from_env(getattr(self, f"tls_{k}"), f"OMNILEARN_TLS_{k.upper()}")
                       for k in ("ca", "cert", "key", "server_name")})
        o.check()
        return o

    def check(self) -> None:
        if self.epochs > 0 and self.dataset_size <= 0:
            raise ValueError("epochs needs dataset_size (the training set's sample count)")
        if self.epochs < 0 or self.max_iterations < 0 or self.dataset_size < 0 or self.max_batch_size < 0:
            raise ValueError("epochs, max_iterations, dataset_size and max_batch_size must be >= 0")
        if not self.slowdown >= 1.0:
            raise ValueError("slowdown must be >= 1")
        # An emulated device sets the whole step time; slowdown is for real compute.
        if self.emulate_device and self.slowdown != 1.0:
            raise ValueError("emulate_device sets the whole step time: leave slowdown (real compute) out")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together")

    def token(self) -> Optional[str]:
        """The token: given, or read from auth_token_file (ValueError when it holds none)."""
        if not self.auth_token_file:
            return self.auth_token
        with open(self.auth_token_file) as f:
            token = f.read().strip()
        if not token:
            raise ValueError(f"{self.auth_token_file} holds no token")
        return token

    @property
    def streams_gradients(self) -> bool:
        """Whether a gradient may leave during backward: not when an emulated device or a
        slowdown waits after the real backward (a gradient leaving before that wait would hide
        the link behind a wait no real device makes)."""
        return not (self.emulate_device or self.slowdown > 1.0)
