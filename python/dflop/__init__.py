# SPDX-License-Identifier: Apache-2.0
"""dflop: data-aware pipeline-parallel planning for multimodal LLM training.

The C++ library's planner, packer and per-batch scheduler, from Python:

    import dflop
    workload = dflop.generate_mixture("onevision", 10000, 0)     # or dflop.read_trace("train.jsonl")
    plan = dflop.plan(workload, "siglip-400m+qwen2.5-7b", dflop.Cluster(64, 8, "h100-80gb"), global_batch=512)
    batch = plan.schedule_batch(workload.take(range(512)), seed=0)  # every iteration
    batch.llm_microbatches[replica][position]                        # sample indices, execution order

`dflop.torch.DflopBatchSampler` yields one rank's microbatches for a PyTorch
DataLoader. Errors: `InputError` (also a ValueError) for bad input, naming the
source, the line and the reason; `InfeasibleError` when no plan fits. Guide:
docs/python.md.
"""

from ._dflop import (
    BatchSchedule,
    Cluster,
    Error,
    Gpu,
    InfeasibleError,
    InputError,
    MethodResult,
    Model,
    Packing,
    Plan,
    Sample,
    Samples,
    encoder_names,
    generate_mixture,
    gpu_names,
    llm_names,
    load_gpu,
    load_model,
    mixture_names,
    pack,
    plan,
    read_trace,
    read_trace_text,
    simulate,
    statistics,
    write_trace,
)
from ._samples import samples_from

__version__ = "0.1.0"

__all__ = [
    "BatchSchedule",
    "Cluster",
    "Error",
    "Gpu",
    "InfeasibleError",
    "InputError",
    "MethodResult",
    "Model",
    "Packing",
    "Plan",
    "Sample",
    "Samples",
    "encoder_names",
    "generate_mixture",
    "gpu_names",
    "llm_names",
    "load_gpu",
    "load_model",
    "mixture_names",
    "pack",
    "plan",
    "read_trace",
    "read_trace_text",
    "samples_from",
    "simulate",
    "statistics",
    "write_trace",
]
