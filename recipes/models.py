"""Build the six models from `recipes.catalog` (random init, never downloaded weights).

Each builder returns a module and a loss function `loss(model, batch) -> (loss, items)`
where `items` counts what the batch trained on (tokens, images, nodes, audio frames),
so that the training loop stays one loop for every model.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from recipes.catalog import MODEL_SIZES

LossFn = Callable[[torch.nn.Module, dict], tuple[torch.Tensor, int]]


def build_model(model: str, size: str) -> tuple[torch.nn.Module, LossFn]:
    """The module and its loss for a catalog entry."""
    spec = dict(MODEL_SIZES[model][size])
    builders = {"gpt-neo": _gpt_neo, "gpt-neo-x": _gpt_neo_x, "gcn": _gcn, "resnet50": _resnet,
                "resnet101": _resnet, "wav2vec2": _wav2vec2}
    return builders[model](spec)


def count_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _lm_loss(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, int]:
    ids = batch["input_ids"]
    out = model(input_ids=ids, labels=ids)
    return out.loss, ids.numel()


def _gpt_neo(spec: dict):
    from transformers import GPTNeoConfig, GPTNeoForCausalLM

    layers, vocab = spec["num_layers"], spec["vocab_size"]
    config = GPTNeoConfig(
        vocab_size=vocab, max_position_embeddings=spec["max_position_embeddings"],
        hidden_size=spec["hidden_size"], num_layers=layers, num_heads=spec["num_heads"],
        attention_types=[[["global", "local"], layers // 2]], window_size=spec["window_size"],
        intermediate_size=4 * spec["hidden_size"], embed_dropout=0.0, attention_dropout=0.0,
        resid_dropout=0.0, bos_token_id=vocab - 1, eos_token_id=vocab - 1)
    return GPTNeoForCausalLM(config), _lm_loss


def _gpt_neo_x(spec: dict):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    vocab = spec["vocab_size"]
    config = GPTNeoXConfig(
        vocab_size=vocab, hidden_size=spec["hidden_size"], num_hidden_layers=spec["num_layers"],
        num_attention_heads=spec["num_heads"], intermediate_size=spec["intermediate_size"],
        max_position_embeddings=spec["max_position_embeddings"], bos_token_id=vocab - 1,
        eos_token_id=vocab - 1, hidden_dropout=0.0, attention_dropout=0.0)
    return GPTNeoXForCausalLM(config), _lm_loss


class GCN(torch.nn.Module):
    """Kipf & Welling GCN for node classification (the ogbn-arxiv baseline shape)."""

    def __init__(self, in_channels: int, hidden_channels: int, num_classes: int, num_layers: int,
                 dropout: float) -> None:
        super().__init__()
        from torch_geometric.nn import GCNConv

        dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [num_classes]
        self.convs = torch.nn.ModuleList(GCNConv(a, b, cached=False) for a, b in zip(dims, dims[1:]))
        self.norms = torch.nn.ModuleList(torch.nn.BatchNorm1d(d) for d in dims[1:-1])
        self.dropout = dropout

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for conv, norm in zip(self.convs[:-1], self.norms):
            x = F.relu(norm(conv(x, edge_index)))
            x = F.dropout(x, p=self.dropout, training=self.training)
        return self.convs[-1](x, edge_index)


def _gcn_loss(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, int]:
    logits = model(batch["x"], batch["edge_index"])
    idx = batch["train_idx"]
    return F.cross_entropy(logits[idx], batch["y"][idx]), int(idx.numel())


def _gcn(spec: dict):
    return GCN(spec["in_channels"], spec["hidden_channels"], spec["num_classes"], spec["num_layers"],
               spec["dropout"]), _gcn_loss


def _image_loss(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, int]:
    out = model(pixel_values=batch["pixel_values"], labels=batch["labels"])
    return out.loss, batch["labels"].numel()


def _resnet(spec: dict):
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(layer_type="bottleneck", depths=spec["depths"], hidden_sizes=spec["hidden_sizes"],
                          embedding_size=spec["embedding_size"], num_labels=spec["num_labels"])
    return ResNetForImageClassification(config), _image_loss


def _wav2vec2(spec: dict):
    from transformers import Wav2Vec2Config, Wav2Vec2ForPreTraining

    conv = spec["conv_dim"]
    config = Wav2Vec2Config(
        hidden_size=spec["hidden_size"], num_hidden_layers=spec["num_hidden_layers"],
        num_attention_heads=spec["num_attention_heads"], intermediate_size=spec["intermediate_size"],
        conv_dim=conv, conv_kernel=spec["conv_kernel"], conv_stride=spec["conv_stride"],
        num_codevectors_per_group=spec["num_codevectors_per_group"], codevector_dim=spec["codevector_dim"],
        proj_codevector_dim=spec["proj_codevector_dim"], num_conv_pos_embeddings=spec["num_conv_pos_embeddings"],
        num_conv_pos_embedding_groups=spec["num_conv_pos_embedding_groups"], mask_time_prob=0.65,
        mask_time_length=2 if len(conv) < 4 else 10, num_negatives=10 if len(conv) < 4 else 100,
        feat_extract_norm="layer", do_stable_layer_norm=True, hidden_dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0)
    return Wav2Vec2ForPreTraining(config), _wav2vec2_loss


def _wav2vec2_loss(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, int]:
    """Contrastive + diversity loss over masked frames (the wav2vec 2.0 pre-training objective)."""
    from transformers.models.wav2vec2.modeling_wav2vec2 import (_compute_mask_indices,
                                                               _sample_negative_indices)

    audio = batch["input_values"]
    config = model.config
    frames = int(model._get_feat_extract_output_lengths(audio.shape[1]))
    shape = (audio.shape[0], frames)
    generator_state = torch.random.get_rng_state()  # masks come from numpy; keep torch RNG untouched
    mask = _compute_mask_indices(shape, mask_prob=config.mask_time_prob, mask_length=config.mask_time_length,
                                 min_masks=2)
    negatives = _sample_negative_indices(shape, config.num_negatives, mask_time_indices=mask)
    torch.random.set_rng_state(generator_state)
    out = model(input_values=audio, mask_time_indices=torch.tensor(mask, device=audio.device),
                sampled_negative_indices=torch.tensor(negatives, device=audio.device))
    return out.loss / max(1, int(mask.sum())), int(mask.sum())
