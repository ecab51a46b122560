"""The inner optimizer: AdamW, or Muon for the hidden layers' weight matrices with AdamW for the rest.

Muon (Jordan et al. 2024, github.com/KellerJordan/Muon) keeps SGD momentum per weight matrix and
steps along its nearest semi-orthogonal matrix, found by five Newton-Schulz iterations. Its step
is scaled by 0.2 * sqrt(max(rows, cols)) (Liu et al. 2025, "Muon is scalable for LLM training") so
that its update has AdamW's size and `optim.lr` serves both optimizers. Embeddings, the output
layer, biases and norms stay on AdamW, as in the reference implementation.
"""

from __future__ import annotations

import math

import torch

# The quintic's coefficients from the reference implementation: the slope at zero is as steep as
# possible, so five iterations bring every singular value into about [0.7, 1.2].
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
_LINEAR_NAMES = ("Linear", "Conv1D")  # torch_geometric's Linear and transformers' Conv1D are linear maps too
# Output heads that `get_output_embeddings()` does not name, by their full module names: wav2vec2
# pre-training's two sides of the contrastive logits and the quantizer's logits over its codebooks.
OUTPUT_LAYERS = ("project_hid", "project_q", "quantizer.weight_proj")


def orthogonalize(matrix: torch.Tensor, steps: int = NS_STEPS) -> torch.Tensor:
    """About U V^T for matrix = U S V^T (a 2-D view of the weight's gradient).

    bf16 on GPUs that have it, as in the reference; fp32 elsewhere (bf16 matrix products are slow on the CPU).
    """
    a, b, c = NS_COEFFICIENTS
    fast = matrix.is_cuda and torch.cuda.is_bf16_supported()
    x = matrix.to(torch.bfloat16 if fast else torch.float32)
    wide = x.size(0) <= x.size(1)
    if not wide:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x if wide else x.T).to(matrix.dtype)


def _layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The linear and convolution layers with a trainable weight matrix (or kernel), in order."""
    return [(name, m) for name, m in model.named_modules()
            if (isinstance(m, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)) or type(m).__name__ in _LINEAR_NAMES)
            and isinstance(getattr(m, "weight", None), torch.nn.Parameter) and m.weight.ndim >= 2
            and m.weight.requires_grad]


def muon_parameters(model: torch.nn.Module) -> list[torch.Tensor]:
    """The weights Muon trains: those of the hidden linear and convolution layers.

    AdamW keeps, as the reference implementation advises, the layers at either end:
    - the output layer (`get_output_embeddings()`, else the model's last layer, and the output
      heads named in OUTPUT_LAYERS);
    - the input: embedding tables, or where a model has none (images, audio, graph features) its
      first layer.
    """
    layers = _layers(model)
    if not layers:
        return []
    kept = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}  # and heads tied to them
    if not kept:
        kept.add(id(layers[0][1].weight))
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    kept.add(id(output.weight) if output is not None else id(layers[-1][1].weight))
    kept |= {id(m.weight) for name, m in layers if name in OUTPUT_LAYERS}
    chosen, seen = [], set(kept)
    for _, m in layers:
        if id(m.weight) not in seen:
            seen.add(id(m.weight))
            chosen.append(m.weight)
    return chosen


class MuonAdamW(torch.optim.Optimizer):
    """One optimizer with two kinds of parameter group (`muon: True` or False), so that one
    learning-rate schedule, one state dict and one `param_groups` list cover both."""

    def __init__(self, muon_params, adamw_params, lr: float, momentum: float, betas, weight_decay: float,
                 eps: float = 1e-8) -> None:
        groups = [dict(params=list(muon_params), muon=True), dict(params=list(adamw_params), muon=False)]
        super().__init__([g for g in groups if g["params"]],
                         dict(lr=lr, momentum=momentum, betas=tuple(betas), weight_decay=weight_decay, eps=eps))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    (self._muon if group["muon"] else self._adamw)(p, group)
        return loss

    def _muon(self, p: torch.Tensor, group: dict) -> None:
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p)
        buf = state["momentum_buffer"]
        buf.lerp_(p.grad, 1 - group["momentum"])
        update = p.grad.lerp(buf, group["momentum"])  # Nesterov
        rows = update.size(0)
        cols = update.numel() // rows
        update = orthogonalize(update.reshape(rows, cols)).view_as(p)
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.add_(update, alpha=-group["lr"] * 0.2 * math.sqrt(max(rows, cols)))

    def _adamw(self, p: torch.Tensor, group: dict) -> None:
        state = self.state[p]
        if not state:
            state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
        beta1, beta2 = group["betas"]
        state["step"] += 1
        t = state["step"]
        state["exp_avg"].lerp_(p.grad, 1 - beta1)
        state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
        denom = (state["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** t)).add_(group["eps"])
        p.mul_(1 - group["lr"] * group["weight_decay"])
        p.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / (1 - beta1 ** t))


def build_optimizer(model: torch.nn.Module, optim) -> torch.optim.Optimizer:
    """The inner optimizer that `optim` (the config's OptimConfig) names."""
    if optim.name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=optim.lr, betas=tuple(optim.betas),
                                 weight_decay=optim.weight_decay)
    hidden = muon_parameters(model)
    ids = {id(p) for p in hidden}
    rest = [p for p in model.parameters() if id(p) not in ids]
    return MuonAdamW(hidden, rest, lr=optim.lr, momentum=optim.muon_momentum, betas=optim.betas,
                     weight_decay=optim.weight_decay)
