"""Graph data for node classification: a synthetic planted-partition graph, and the shared batch shape.

A GCN trains full-batch: every step sees the whole graph, and each worker's loss
covers its own shard of the training nodes (`train_idx[rank::world_size]`).
"""

from __future__ import annotations

import torch


class GraphData:
    """A graph in memory; `next_batch` returns it with this rank's training nodes."""

    def __init__(self, *, x: torch.Tensor, edge_index: torch.Tensor, y: torch.Tensor, train_idx: torch.Tensor,
                 valid_idx: torch.Tensor, rank: int, world_size: int) -> None:
        self.x, self.edge_index, self.y = x, edge_index, y
        self.train_idx = train_idx[rank::world_size]
        self.valid_idx = valid_idx
        self.position = 0  # full-batch epochs done

    def _batch(self, idx: torch.Tensor) -> dict:
        return {"x": self.x, "edge_index": self.edge_index, "y": self.y, "train_idx": idx}

    def next_batch(self) -> dict:
        self.position += 1
        return self._batch(self.train_idx)

    def eval_batches(self, count: int) -> list[dict]:
        return [self._batch(self.valid_idx)] if count > 0 else []

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


def SyntheticGraph(spec: dict, *, seed: int, rank: int, world_size: int, nodes: int = 600) -> GraphData:
    """Planted partition: nodes link mostly within their class; features are noisy class means."""
    gen = torch.Generator().manual_seed(seed)
    classes, features = spec["num_classes"], spec["in_channels"]
    y = torch.randint(0, classes, (nodes,), generator=gen)
    means = torch.randn(classes, features, generator=gen)
    x = means[y] + 2.0 * torch.randn(nodes, features, generator=gen)
    src = torch.randint(0, nodes, (nodes * 8,), generator=gen)
    dst = torch.randint(0, nodes, (nodes * 8,), generator=gen)
    keep = (y[src] == y[dst]) | (torch.rand(src.numel(), generator=gen) < 0.2)
    edges = torch.stack([src[keep], dst[keep]])
    edge_index = torch.cat([edges, edges.flip(0)], dim=1)
    perm = torch.randperm(nodes, generator=gen)
    split = int(0.6 * nodes)
    return GraphData(x=x, edge_index=edge_index, y=y, train_idx=perm[:split], valid_idx=perm[split:],
                     rank=rank, world_size=world_size)
