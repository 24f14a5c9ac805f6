# SPDX-License-Identifier: Apache-2.0
"""dflop's balanced microbatches in a PyTorch DataLoader over a LLaVA-style JSON list of samples.

    python3 train_loader.py [--data llava.json] [--plan plan.json] [--rank R] [--epochs N]

Without --data it writes a synthetic LLaVA-style list (images, videos, text
conversations) to a temporary file and reads that. Without --plan it plans
for siglip-400m+qwen2.5-7b on 16 x h100-80gb, global batch 128. Without
--rank it runs every LLM replica's loader in turn (as the ranks of a job
would, one each) and checks that together they load every sample of each
global batch exactly once.
"""

import argparse
import collections
import json
import random
import tempfile

import torch
from torch.utils.data import DataLoader, Dataset

import dflop
from dflop.torch import DflopBatchSampler

# What the encoder makes of an image tile or video frame: SigLIP at 384 px, patch 14 -> 27 x 27 tokens.
TOKENS_PER_TILE = 729
# Video frames are pooled 2 x 2 before the LLM (LLaVA-OneVision): 14 x 14 tokens per frame reach it.
LLM_TOKENS_PER_FRAME = 196


def sizes_of(record):
    """What a LLaVA record costs: its modality and sizes, from fields a preprocessing pass would add.

    `image_tiles` (AnyRes crops + the base image) and `video_frames` are read when
    present; otherwise 5 tiles and 32 frames are assumed. Text is estimated at 4
    characters per token; a trainer would count its tokenizer's tokens instead.
    """
    text = sum(len(turn["value"]) for turn in record["conversations"])
    text_tokens = max(1, text // 4)
    if "video" in record:
        frames = record.get("video_frames", 32)
        return {"modality": "video", "encoder_items": frames, "encoder_tokens": frames * TOKENS_PER_TILE,
                "llm_tokens": text_tokens + frames * LLM_TOKENS_PER_FRAME}
    if "image" in record:
        images = record["image"] if isinstance(record["image"], list) else [record["image"]]
        tiles = record.get("image_tiles", 5) if len(images) == 1 else len(images)
        return {"modality": "image" if len(images) == 1 else "multi_image", "encoder_items": tiles,
                "encoder_tokens": tiles * TOKENS_PER_TILE, "llm_tokens": text_tokens + tiles * TOKENS_PER_TILE}
    return {"modality": "text", "encoder_items": 0, "encoder_tokens": 0, "llm_tokens": text_tokens}


def synthetic_llava(count, seed=0):
    """`count` LLaVA-style records: images (AnyRes tiles), a few multi-image and video samples, text chats."""
    generator = random.Random(seed)
    records = []
    for i in range(count):
        turns = generator.randint(1, 6)
        conversations = []
        for _ in range(turns):
            conversations.append({"from": "human", "value": "Q" * generator.randint(20, 400)})
            conversations.append({"from": "gpt", "value": "A" * generator.randint(20, 2000)})
        record = {"id": f"{i:06d}", "conversations": conversations}
        kind = generator.random()
        if kind < 0.6:
            record["image"] = f"coco/train2017/{i:012d}.jpg"
            record["image_tiles"] = generator.choice([1, 3, 5, 7, 10])
            conversations[0]["value"] = "<image>\n" + conversations[0]["value"]
        elif kind < 0.7:
            record["image"] = [f"multi/{i}_{k}.jpg" for k in range(generator.randint(2, 6))]
        elif kind < 0.8:
            record["video"] = f"videos/{i}.mp4"
            record["video_frames"] = generator.choice([8, 16, 32])
        records.append(record)
    return records


class LlavaDataset(Dataset):
    """The JSON list itself; a real dataset would load the image and tokenize here."""

    def __init__(self, records):
        self.records = records

    def __len__(self):
        return len(self.records)

    def __getitem__(self, index):
        return index, self.records[index]


def collate(items):
    """One microbatch: the dataset indices and records (a real collate_fn packs token ids and pixels)."""
    return [index for index, _ in items], [record for _, record in items]


def main():
    parser = argparse.ArgumentParser(description="dflop's balanced microbatches in a PyTorch DataLoader")
    parser.add_argument("--data", help="LLaVA-style JSON list (default: a synthetic one of 3000 records)")
    parser.add_argument("--plan", help="plan file (`dflop plan --save`; default: plan here)")
    parser.add_argument("--rank", type=int, help="LLM replica to load for (default: every replica in turn)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()

    if arguments.data is None:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as out:
            json.dump(synthetic_llava(3000), out)
            arguments.data = out.name
    with open(arguments.data) as data:
        records = json.load(data)
    sizes = [sizes_of(record) for record in records]
    print(f"{len(records)} samples from {arguments.data}: "
          f"{dict(collections.Counter(size['modality'] for size in sizes))}")

    if arguments.plan:
        plan = dflop.Plan.load(arguments.plan)
    else:
        plan = dflop.plan(sizes, "siglip-400m+qwen2.5-7b", dflop.Cluster(16, 8, "h100-80gb"), global_batch=128,
                          batches=2)
    print(f"plan: {plan.llm_replicas} LLM replicas x {plan.microbatches} microbatches per global batch of "
          f"{plan.global_batch}, predicted {plan.iteration_seconds:.3f} s per iteration")

    dataset = LlavaDataset(records)
    ranks = [arguments.rank] if arguments.rank is not None else list(range(plan.llm_replicas))
    for epoch in range(arguments.epochs):
        loaded = {}
        for rank in ranks:
            sampler = DflopBatchSampler(sizes, plan, rank, seed=arguments.seed)
            sampler.set_epoch(epoch)  # every rank, before each epoch: same seed and epoch, same global batches
            loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate)
            loaded[rank] = [indices for indices, _ in loader]
            tokens = [sum(sizes[i]["llm_tokens"] for i in indices) for indices in loaded[rank]]
            print(f"epoch {epoch} rank {rank}: {len(tokens)} microbatches, LLM tokens per microbatch "
                  f"{min(tokens)} to {max(tokens)}")
        if len(ranks) == plan.llm_replicas:
            m = plan.microbatches
            for k, indices in enumerate(sampler.global_batch_indices()):
                together = collections.Counter(i for rank in ranks for mb in loaded[rank][k * m:(k + 1) * m] for i in mb)
                assert together == collections.Counter(indices), f"global batch {k} not loaded exactly once"
            print(f"epoch {epoch}: every global batch loaded exactly once across the {len(ranks)} ranks; "
                  f"{sampler.samples_left_out} samples left for another epoch")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
