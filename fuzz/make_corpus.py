#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/) in the input format
of fuzz/fuzz_input.h: valid messages, so that fuzzing starts from the paths real workers
take. Run from the checkout: PYTHONPATH=python /usr/bin/python3 fuzz/make_corpus.py"""

import json
import os
import pathlib
import struct

from omnilearn import _stubs

pb2, _ = _stubs.load()
OUT = pathlib.Path(__file__).resolve().parent / "corpus"


def field(b: bytes) -> bytes:
    return struct.pack("<H", len(b)) + b


def floats(*v) -> bytes:
    return struct.pack(f"<{len(v)}f", *v)


def layout():
    return pb2.ModelLayout(tensors=[pb2.TensorSpec(name="w", shape=[2, 2]), pb2.TensorSpec(name="b", shape=[2]),
                                    pb2.TensorSpec(name="bn.var", shape=[2], buffer=True)])


def chunks(values):
    return [pb2.TensorChunk(name="w", shape=[2, 2], offset=0, data=floats(*values[:2])),
            pb2.TensorChunk(name="w", shape=[2, 2], offset=2, data=floats(*values[2:4])),
            pb2.TensorChunk(name="b", shape=[2], offset=0, data=floats(*values[4:6])),
            pb2.TensorChunk(name="bn.var", shape=[2], offset=0, data=floats(*values[6:8]))]


def write(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def main():
    # codec: a layout, then its chunks (whole, in pieces, one missing, one misplaced)
    good = chunks([1, 2, 3, 4, 5, 6, 7, 8])
    write("codec", "whole", field(layout().SerializeToString()) + b"".join(field(c.SerializeToString()) for c in good))
    write("codec", "missing", field(layout().SerializeToString()) +
          b"".join(field(c.SerializeToString()) for c in good[1:]))
    write("codec", "reversed", field(layout().SerializeToString()) +
          b"".join(field(c.SerializeToString()) for c in reversed(good)))

    # safetensors: an export-like file and a data set with other dtypes
    def st(header, data):
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        return struct.pack("<Q", len(h)) + h + data
    write("safetensors", "model", st({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                                      "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]},
                                      "__metadata__": {"version": "3"}}, floats(1, 2, 3, 4, 5, 6)))
    write("safetensors", "dataset", st({"train_x": {"dtype": "U8", "shape": [2, 2], "data_offsets": [0, 4]},
                                        "train_y": {"dtype": "I64", "shape": [2], "data_offsets": [4, 20]}},
                                       bytes([1, 2, 3, 4]) + struct.pack("<2q", 0, 1)))

    # service: mode byte, then operations (kind byte, message, chunk count, chunks)
    join = pb2.JoinHeader(name="w0", host="h", layout=layout(), has_initial_parameters=True)
    push = pb2.PushHeader(batch_size=8, compute_seconds=0.01, train_loss=1.0)
    ops = (bytes([0]) + field(join.SerializeToString()) + bytes([4]) +
           b"".join(field(c.SerializeToString()) for c in good) +
           bytes([0x80 | 2]) + field(pb2.PullRequest(have_version=(1 << 64) - 1).SerializeToString()) +
           bytes([0x80 | 1]) + field(push.SerializeToString()) + bytes([3]) +
           b"".join(field(c.SerializeToString()) for c in good[:3]) +
           bytes([0x80 | 3]) + field(b"") + bytes([5]) + bytes([0x80 | 4]) + field(b""))
    for mode in range(3):
        write("service", f"session-mode{mode}", bytes([mode]) + ops)
    bad_push = pb2.PushHeader(batch_size=1 << 40, compute_seconds=float("nan"), test_accuracy=2)
    write("service", "hostile-push", bytes([1]) + bytes([0]) + field(join.SerializeToString()) + bytes([4]) +
          b"".join(field(c.SerializeToString()) for c in good) + bytes([0x80 | 1]) +
          field(bad_push.SerializeToString()) + bytes([0]))

    # shard: operations (kind byte, then its fields) on a coordinator's shard table and a
    # shard fed from it: register, adopt the model, open a session, step, drain, push, pull
    hello = pb2.ShardHello(address="127.0.0.1:7001", shards=3, partition_bytes=64)
    step = pb2.ShardStep(version=0, update_scale=1, learning_rate=0.1, buffer_blend=1, momentum=-1,
                         members=[pb2.ShardStepMember(worker_id=7, model_version=0, weight=1)])
    gradient = floats(*([0.5] * 32))
    flow = (bytes([0x80 | 0]) + field(hello.SerializeToString()) + bytes([1]) + bytes([3]) +
            bytes([4, 0, 7]) + field(b"sixteen-byte-key") + bytes([2, 0]) +
            bytes([6, 7, 8, 0, 0]) + field(gradient) + bytes([4, 2]) + field(step.SerializeToString()) +
            bytes([2, 0]) + bytes([7, 7, 0, 1]))
    write("shard", "register-step-pull", flow)
    huge = pb2.ShardHello(address="x" * 300, shards=3, partition_bytes=64, index=(1 << 32) - 1)
    write("shard", "hostile-hello", bytes([0]) + field(huge.SerializeToString()) + bytes([1]) +
          bytes([0x80 | 0]) + field(pb2.ShardHello(index=1 << 31).SerializeToString()) + bytes([1]))
    bad_init = pb2.ShardCommand(init=pb2.ShardInit(index=(1 << 31), layout=layout(), optimizer=pb2.ShardOptimizer(
        kind="sgd", momentum=float("nan"), round_timeout_seconds=1e300)))
    write("shard", "hostile-command", bytes([5]) + field(bad_init.SerializeToString()) + bytes([0]) +
          bytes([5]) + field(pb2.ShardCommand(step=step).SerializeToString()) + bytes([1]))


if __name__ == "__main__":
    main()
