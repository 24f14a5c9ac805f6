# SPDX-License-Identifier: Apache-2.0
"""dflop's balanced microbatches in a PyTorch DataLoader.

    from dflop.torch import DflopBatchSampler
    sampler = DflopBatchSampler(sizes, plan, rank=replica, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, collate_fn=collate)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for microbatch in loader: ...

Each epoch is shuffled with torch.randperm seeded `seed + epoch` (as
torch.utils.data.DistributedSampler does) and cut into global batches of the
plan's `global_batch` samples; the remainder of fewer than `global_batch`
samples is left out of that epoch (`samples_left_out`), a different one each
epoch. Global batch k of epoch e is scheduled with `Plan.schedule_batch` and
packing seed `seed + e * batches_per_epoch + k`. Every rank computes the same
schedules (deterministic, milliseconds per batch) and yields its own LLM
replica's microbatches in execution order, so across ranks each sample of a
global batch is yielded exactly once.

Samples the plan was made without (`Plan.excluded_samples`: planned with
`exclude_unfittable=True`, no configuration holds them in memory) are matched by
id and never drawn (`samples_excluded`): scheduling them would run out of memory.
"""

from typing import Iterator, List, Sequence, Tuple

import torch
from torch.utils.data import Sampler

from ._dflop import BatchSchedule, Plan, Samples
from ._samples import samples_from


class DflopBatchSampler(Sampler):
    """Yields rank `rank`'s microbatches (lists of dataset indices) of every global batch, in execution order.

    sizes: the dataset's per-sample sizes (dflop.samples_from: a list of dicts,
        a NumPy structured array, a JSONL trace path or a dflop.Samples);
        sizes[i] describes dataset item i.
    plan: a dflop.Plan (dflop.plan(...) or dflop.Plan.load(path)).
    rank: this process's LLM data-parallel replica, 0 <= rank <
        plan.method(method).llm_replicas. Every GPU of one replica (its tensor- and
        pipeline-parallel ranks) passes the same replica index.
    seed: shuffling and packing seed; the same seed and epoch give the same
        microbatches in every process.
    method: 'dflop' (the plan's choice) or a baseline ('data_blind',
        'dflop_reference') scheduled as that method runs.
    shuffle: draw global batches from a shuffled order (True) or in dataset order.
    """

    def __init__(self, sizes, plan: Plan, rank: int, *, seed: int = 0, method: str = "dflop", shuffle: bool = True):
        self.samples: Samples = samples_from(sizes, "sizes")
        self.plan = plan
        self.method = method
        self.replicas = plan.method(method).llm_replicas
        if not isinstance(rank, int) or not 0 <= rank < self.replicas:
            raise ValueError(f"rank {rank!r} out of range: the plan's '{method}' configuration has {self.replicas} "
                             f"LLM replicas (ranks 0 to {self.replicas - 1})")
        if len(self.samples) < plan.global_batch:
            raise ValueError(f"sizes: {len(self.samples)} samples cannot fill the plan's global batch of "
                             f"{plan.global_batch}")
        excluded = set(plan.excluded_samples)
        ids = self.samples.ids if excluded else []
        #: Dataset indices the sampler draws from: all but the plan's excluded samples.
        self.eligible: List[int] = ([i for i, sample_id in enumerate(ids) if sample_id not in excluded]
                                    if excluded else list(range(len(self.samples))))
        if len(self.eligible) < plan.global_batch:
            raise ValueError(f"sizes: {len(self.eligible)} samples (without the plan's "
                             f"{len(self.samples) - len(self.eligible)} excluded ones) cannot fill the plan's "
                             f"global batch of {plan.global_batch}")
        self.rank = rank
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch the next iteration draws (call before each epoch, on every rank)."""
        self.epoch = epoch

    @property
    def batches_per_epoch(self) -> int:
        """Global batches per epoch: floor(drawable samples / global_batch)."""
        return len(self.eligible) // self.plan.global_batch

    @property
    def samples_left_out(self) -> int:
        """Samples of each epoch in no global batch (fewer than global_batch; which ones changes every epoch)."""
        return len(self.eligible) - self.batches_per_epoch * self.plan.global_batch

    @property
    def samples_excluded(self) -> int:
        """Dataset items never drawn: the plan's excluded samples (no configuration holds them)."""
        return len(self.samples) - len(self.eligible)

    def global_batch_indices(self) -> List[List[int]]:
        """The dataset indices of each global batch of the current epoch, in draw order."""
        count = len(self.eligible)
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = [self.eligible[j] for j in torch.randperm(count, generator=generator).tolist()]
        else:
            order = list(self.eligible)
        size = self.plan.global_batch
        return [order[k * size:(k + 1) * size] for k in range(self.batches_per_epoch)]

    def packing_seed(self, batch: int) -> int:
        """The packing seed of global batch `batch` of the current epoch."""
        return self.seed + self.epoch * self.batches_per_epoch + batch

    def schedule(self, batch: int, indices: Sequence[int]) -> BatchSchedule:
        """Global batch `batch` (its dataset `indices`) scheduled as every rank schedules it."""
        return self.plan.schedule_batch(self.samples.take(indices), self.packing_seed(batch), self.method)

    def schedules(self) -> Iterator[Tuple[List[int], BatchSchedule]]:
        """(dataset indices, BatchSchedule) of each global batch of the current epoch."""
        for batch, indices in enumerate(self.global_batch_indices()):
            yield indices, self.schedule(batch, indices)

    def __iter__(self) -> Iterator[List[int]]:
        for indices, scheduled in self.schedules():
            for microbatch in scheduled.replica_microbatches(self.rank):
                yield [indices[i] for i in microbatch]

    def __len__(self) -> int:
        """Microbatches this rank yields per epoch."""
        return self.batches_per_epoch * self.plan.method(self.method).microbatches
