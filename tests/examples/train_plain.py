"""A plain PyTorch training loop of the kind a team already has, trained twice on 2 workers:
as plain DDP (torch's DistributedDataParallel, its bytes counted by a comm hook), and with
geotrain_loop at a preset (the only change: a Loop around the model and optimizer, loop.step()).

    geotrain workspaces deploy custom-training --workers 2 --workdir tests/examples \\
        --command "python train_plain.py --mode api --preset medium --steps 48"

Under any launcher that sets RANK/WORLD_SIZE (torchrun, a geotrain workspace) it joins the group
geotrain_loop.join() finds; alone it trains as one worker. The model is a tiny GPT-Neo (the
catalog's gpt-neo/tiny shape, so its bytes can be compared with the catalog recipe's) on byte
tokens of text shipped with geotrain (its README files).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from transformers import GPTNeoConfig, GPTNeoForCausalLM

import geotrain_loop

TEXTS = [Path(__file__).resolve().parents[2] / name for name in ("README.md", "recipes/README.md", "core/README.md")]


def tiny_gpt_neo() -> GPTNeoForCausalLM:
    config = GPTNeoConfig(vocab_size=256, max_position_embeddings=256, hidden_size=64, num_layers=2, num_heads=4,
                          attention_types=[[["global", "local"], 1]], window_size=64, intermediate_size=256,
                          embed_dropout=0.0, attention_dropout=0.0, resid_dropout=0.0, bos_token_id=255,
                          eos_token_id=255)
    return GPTNeoForCausalLM(config)


def batches(rank: int, batch_size: int = 16, seq_len: int = 64):
    """Random windows of byte tokens, a different stream per rank; the last tenth held out."""
    data = torch.tensor(list(b"\n".join(p.read_bytes() for p in TEXTS if p.exists())), dtype=torch.long)
    train = data[: len(data) * 9 // 10]
    rng = random.Random(rank)
    while True:
        starts = [rng.randrange(len(train) - seq_len) for _ in range(batch_size)]
        yield torch.stack([train[s:s + seq_len] for s in starts])


@torch.no_grad()
def held_out_loss(model, seq_len: int = 64) -> float:
    data = torch.tensor(list(b"\n".join(p.read_bytes() for p in TEXTS if p.exists())), dtype=torch.long)
    tail = data[len(data) * 9 // 10:]
    windows = torch.stack([tail[i:i + seq_len] for i in range(0, len(tail) - seq_len, seq_len)][:32])
    model.eval()
    return float(model(input_ids=windows, labels=windows).loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["ddp", "api"], default="api")
    parser.add_argument("--preset", default="medium")
    parser.add_argument("--steps", type=int, default=48)
    args = parser.parse_args()

    who = geotrain_loop.join()  # the group geotrain (or torchrun) set up; alone: one worker
    torch.manual_seed(0)
    model = tiny_gpt_neo()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
    sent = [0]
    if args.mode == "ddp":
        trained = torch.nn.parallel.DistributedDataParallel(model) if who.distributed else model
        if who.distributed:  # count what DDP's ring all-reduce sends per rank, then let it send it
            def counted(state, bucket):
                sent[0] += 2 * (who.world_size - 1) * bucket.buffer().numel() * bucket.buffer().element_size() \
                    // who.world_size
                return allreduce_hook(state, bucket)
            trained.register_comm_hook(None, counted)  # None: the default process group
    else:
        trained = model
        loop = geotrain_loop.Loop(model, optimizer, args.preset, steps=args.steps, config={"optim.grad_clip": 1.0})

    for step, ids in zip(range(1, args.steps + 1), batches(who.rank)):
        loss = trained(input_ids=ids, labels=ids).loss
        loss.backward()
        if args.mode == "api":
            loop.step(loss)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step % 10 == 0 or step == args.steps:
                print(f"[rank {who.rank}] step {step}/{args.steps} loss {float(loss):.4f}", flush=True)
    if args.mode == "api":
        loop.finish()
        sent[0] = loop.bytes_sent
    result = {"mode": args.mode, "preset": args.preset if args.mode == "api" else "ddp", "rank": who.rank,
              "steps": args.steps, "bytes_sent": sent[0], "eval_loss": round(held_out_loss(model), 4)}
    print("result " + json.dumps(result), flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
