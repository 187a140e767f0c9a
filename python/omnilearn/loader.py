"""The server's sample assignment as a torch.utils.data batch sampler: any map-style
Dataset, DataLoader worker processes and pin_memory.

    sampler = worker.batch_sampler(parts=2)   # each step's batch in 2 pieces, loaded in parallel
    loader = DataLoader(dataset, batch_sampler=sampler, num_workers=2, persistent_workers=True,
                        pin_memory=True)
    for step, (x, y) in worker.batches(loader):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        worker.push(loss)

A pass over the loader loads exactly the current step's samples (the server assigns the
next step's only in its reply to this one's push), so the loader runs in lockstep with the
steps; persistent_workers=True keeps its processes between steps.
"""

import torch


class StepBatchSampler(torch.utils.data.Sampler):
    """Each pass yields the current step's sample ids, in the server's order, as `parts`
    consecutive batches (a DataLoader hands them to its worker processes in parallel)."""

    def __init__(self, worker, parts: int = 1):
        if parts < 1:
            raise ValueError("parts must be at least 1")
        self.worker = worker
        self.parts = parts

    def _ids(self):
        step = self.worker._step
        if step is None:
            raise RuntimeError("the loader runs inside a step: iterate worker.batches(loader)")
        if step.samples is None:
            raise RuntimeError("the server assigns no samples to this worker: give the Worker "
                               "dataset_size=len(dataset)")
        return step.samples.tolist()

    def __iter__(self):
        ids = self._ids()
        k = max(1, min(self.parts, len(ids)))
        for i in range(k):
            yield ids[i * len(ids) // k:(i + 1) * len(ids) // k]

    def __len__(self):
        return self.parts


def concat(parts):
    """Joins a step's collated pieces into one batch (tensors along their first dimension;
    tuples, lists and dicts element by element)."""
    first = parts[0]
    if len(parts) == 1:
        return first
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    if isinstance(first, dict):
        return {k: concat([p[k] for p in parts]) for k in first}
    if isinstance(first, (tuple, list)):
        joined = [concat(list(items)) for items in zip(*parts)]
        return type(first)(*joined) if hasattr(first, "_fields") else type(first)(joined)
    raise TypeError(f"cannot join a batch of {type(first).__name__}: collate to tensors, tuples, lists or dicts")
