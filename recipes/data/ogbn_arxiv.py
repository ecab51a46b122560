"""ogbn-arxiv from its OGB raw layout (no `ogb` package needed).

    <root>/raw/node-feat.csv.gz    169343 rows x 128 floats
    <root>/raw/node-label.csv.gz   one class (0..39) per row
    <root>/raw/edge.csv.gz         "src,dst" citation edges (made undirected here, as OGB's GCN does)
    <root>/split/time/{train,valid,test}.csv.gz   node indices
"""

from __future__ import annotations

from pathlib import Path

import pandas
import torch

from recipes.data.graphs import GraphData


def _read(path: Path, dtype) -> torch.Tensor:
    if not path.exists():
        raise FileNotFoundError(f"ogbn-arxiv file missing: {path} — set data.path to the dataset root "
                                "(the folder holding raw/ and split/)")
    return torch.from_numpy(pandas.read_csv(path, header=None).to_numpy(dtype=dtype).copy())


def OgbnArxiv(root: str | None, *, rank: int, world_size: int) -> GraphData:
    base = Path(root or "data/ogbn_arxiv")
    x = _read(base / "raw" / "node-feat.csv.gz", "float32")
    y = _read(base / "raw" / "node-label.csv.gz", "int64").flatten()
    edges = _read(base / "raw" / "edge.csv.gz", "int64").T
    split = base / "split" / "time"
    train_idx = _read(split / "train.csv.gz", "int64").flatten()
    valid_idx = _read(split / "valid.csv.gz", "int64").flatten()
    edge_index = torch.cat([edges, edges.flip(0)], dim=1)
    return GraphData(x=x, edge_index=edge_index, y=y, train_idx=train_idx, valid_idx=valid_idx,
                     rank=rank, world_size=world_size)
