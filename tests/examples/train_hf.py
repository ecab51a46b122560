"""A tiny Hugging Face `Trainer` script (GPT-Neo on byte tokens of geotrain's README files), trained
as the Trainer's own DDP or, with the one line `geotrain_loop.huggingface(preset)`, with geotrain's
DiLoCo at that preset:

    geotrain workspaces deploy custom-training --workers 2 --workdir tests/examples \\
        --command "python train_hf.py --preset medium --steps 48"

Without --preset the script is what a team already has; under a geotrain workspace it still calls
geotrain_loop.join() first, because there the workers meet in a private file store, not at a
MASTER_ADDR (under torchrun that line is not needed).
"""

from __future__ import annotations

import argparse
import json
import tempfile

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

import geotrain_loop
from train_plain import TEXTS, held_out_loss, tiny_gpt_neo


class ByteWindows(torch.utils.data.Dataset):
    def __init__(self, seq_len: int = 64) -> None:
        data = torch.tensor(list(b"\n".join(p.read_bytes() for p in TEXTS if p.exists())), dtype=torch.long)
        train = data[: len(data) * 9 // 10]
        self.windows = [train[i:i + seq_len] for i in range(0, len(train) - seq_len, seq_len // 2)]

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.windows[i], "labels": self.windows[i]}


class FirstStep(TrainerCallback):
    """The weights' sum after the first step: equal on every rank under DDP, each rank's own under DiLoCo."""

    checksum = None

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == 1:
            self.checksum = round(float(sum(p.detach().double().sum() for p in model.parameters())), 6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", help="geotrain's DiLoCo at this preset; none: the Trainer's own DDP")
    parser.add_argument("--steps", type=int, default=48)
    args = parser.parse_args()
    if args.preset:
        callback = geotrain_loop.huggingface(args.preset)  # the one line
    else:
        geotrain_loop.join()
    torch.manual_seed(0)
    model = tiny_gpt_neo()
    with tempfile.TemporaryDirectory() as scratch:
        training = TrainingArguments(output_dir=scratch, max_steps=args.steps, per_device_train_batch_size=16,
                                     learning_rate=3e-3, adam_beta2=0.95, warmup_steps=0, logging_steps=10,
                                     save_strategy="no", report_to=[], use_cpu=True, seed=0, max_grad_norm=1.0)
        first = FirstStep()
        trainer = Trainer(model=model, args=training, train_dataset=ByteWindows(), callbacks=[first])
        trainer.train()
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    numel = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # the Trainer's DDP: a ring all-reduce of the fp32 gradients every step, 2(N-1)/N of them per rank
    sent = callback.bytes_sent if args.preset else 2 * (world - 1) * numel * 4 // world * args.steps
    print("result " + json.dumps({"mode": "api" if args.preset else "ddp", "preset": args.preset or "ddp",
                                  "rank": rank, "steps": args.steps, "bytes_sent": sent, "first_step": first.checksum,
                                  "eval_loss": round(held_out_loss(model), 4)}), flush=True)


if __name__ == "__main__":
    main()
