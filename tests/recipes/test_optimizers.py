"""The inner optimizers: Muon's orthogonalized step against hand-computed values, its AdamW half
against torch's AdamW, which weights each model gives Muon, and a state dict that resumes."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from recipes.config import ConfigError, parse_config
from recipes.models import build_model
from recipes.optimizers import NS_COEFFICIENTS, MuonAdamW, build_optimizer, muon_parameters, orthogonalize


def _quintic(s: float, steps: int = 5) -> float:
    """What the Newton-Schulz iteration does to one singular value, written out by hand."""
    a, b, c = NS_COEFFICIENTS
    for _ in range(steps):
        s = a * s + b * s ** 3 + c * s ** 5
    return s


def test_orthogonalize_maps_each_singular_value_through_the_quintic():
    # diag(3, 4) has Frobenius norm 5, so the iteration starts from singular values 0.6 and 0.8
    got = orthogonalize(torch.tensor([[3.0, 0.0], [0.0, 4.0]]))
    want = torch.tensor([[_quintic(0.6), 0.0], [0.0, _quintic(0.8)]])
    assert torch.allclose(got, want, atol=1e-5)
    assert 0.6 < _quintic(0.6) < 1.3 and 0.6 < _quintic(0.8) < 1.3  # near 1: about U V^T


def test_orthogonalize_tall_and_wide_alike():
    g = torch.randn(12, 5, generator=torch.Generator().manual_seed(0))
    tall, wide = orthogonalize(g), orthogonalize(g.T)
    assert tall.shape == (12, 5) and torch.allclose(tall, wide.T, atol=1e-6)
    singular = torch.linalg.svdvals(tall)
    assert singular.min() > 0.6 and singular.max() < 1.3
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    assert (tall * (u @ vh)).sum() / (u @ vh).norm() ** 2 > 0.8  # points along U V^T


def test_one_muon_step_by_hand():
    w = torch.nn.Parameter(torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    opt = MuonAdamW([w], [], lr=0.1, momentum=0.95, betas=(0.9, 0.95), weight_decay=0.5)
    w.grad = torch.tensor([[3.0, 0.0, 0.0], [0.0, 4.0, 0.0]])  # singular values 3 and 4
    opt.step()
    # momentum buffer 0.05 g, Nesterov input 0.0975 g: the same direction, so the same orthogonal
    # factor; decay 1 - 0.1 * 0.5, step 0.1 * 0.2 * sqrt(max(2, 3)) (AdamW's update size)
    step = 0.1 * 0.2 * math.sqrt(3)
    want = 0.95 * torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    want[0, 0] -= step * _quintic(0.6)
    want[1, 1] -= step * _quintic(0.8)
    assert torch.allclose(w.detach(), want, atol=1e-5)
    assert torch.allclose(opt.state[w]["momentum_buffer"], 0.05 * w.grad)


def test_muon_steps_match_torch_muon(monkeypatch):
    """Several steps with changing gradients (so momentum and Nesterov matter), against torch's own Muon
    (torch 2.9+) with AdamW-matched step sizes; its iteration, in bf16, is swapped for ours (tested above)."""
    if not hasattr(torch.optim, "Muon"):
        pytest.skip("torch.optim.Muon needs torch 2.9 or newer")
    import torch.optim._muon as reference

    def fp32(grad, coefficients, steps, eps):
        assert tuple(coefficients) == NS_COEFFICIENTS and steps == 5
        return orthogonalize(grad, steps)

    monkeypatch.setattr(reference, "_zeropower_via_newtonschulz", fp32)
    gen = torch.Generator().manual_seed(3)
    for shape in [(12, 5), (5, 12), (4, 3, 3, 3)]:  # tall, wide, a convolution kernel as 4 x 27
        start = torch.randn(shape, generator=gen)
        ours = torch.nn.Parameter(start.clone())
        theirs = torch.nn.Parameter(start.reshape(shape[0], -1).clone())
        a = MuonAdamW([ours], [], lr=0.02, momentum=0.9, betas=(0.9, 0.95), weight_decay=0.1)
        b = torch.optim.Muon([theirs], lr=0.02, momentum=0.9, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
        for _ in range(5):
            g = torch.randn(shape, generator=gen)
            ours.grad, theirs.grad = g.clone(), g.reshape(shape[0], -1).clone()
            a.step()
            b.step()
        assert torch.allclose(ours.detach().reshape(shape[0], -1), theirs.detach(), atol=1e-5), shape
        assert not torch.allclose(ours.detach(), start, atol=1e-3)


@pytest.mark.parametrize("scale", [1.0, 1e-9])  # at 1e-9 the gradients are as small as eps
def test_the_adamw_half_matches_torch_adamw(scale):
    gen = torch.Generator().manual_seed(1)
    start = [torch.randn(7, generator=gen), torch.randn(3, 4, generator=gen)]
    ours = [torch.nn.Parameter(t.clone()) for t in start]
    theirs = [torch.nn.Parameter(t.clone()) for t in start]
    a = MuonAdamW([], ours, lr=0.01, momentum=0.95, betas=(0.9, 0.95), weight_decay=0.1)
    b = torch.optim.AdamW(theirs, lr=0.01, betas=(0.9, 0.95), weight_decay=0.1)
    for _ in range(4):
        grads = [scale * torch.randn(t.shape, generator=gen) for t in start]
        for p, q, g in zip(ours, theirs, grads):
            p.grad, q.grad = g.clone(), g.clone()
        a.step()
        b.step()
    for p, q in zip(ours, theirs):
        assert torch.allclose(p, q, atol=1e-6)


@pytest.mark.parametrize("model,size,muon,kept", [
    ("gpt-neo", "tiny", 12, {"transformer.wte.weight", "transformer.wpe.weight"}),  # the head is tied to wte
    ("gpt-neo-x", "tiny", 8, {"gpt_neox.embed_in.weight", "lm_head.weight"}),
    ("resnet50", "tiny", 16, {"resnet.embedder.embedder.convolution.weight", "classifier.1.weight"}),
    ("resnet101", "tiny", 19, {"resnet.embedder.embedder.convolution.weight", "classifier.1.weight"}),
    ("gcn", "tiny", 0, {"convs.0.lin.weight", "convs.1.lin.weight"}),  # two layers: input and output
    ("gcn", "arxiv", 1, {"convs.0.lin.weight", "convs.2.lin.weight"}),
    ("wav2vec2", "tiny", 14, {"wav2vec2.feature_extractor.conv_layers.0.conv.weight", "quantizer.codevectors",
                              "quantizer.weight_proj.weight", "project_hid.weight", "project_q.weight",
                              "wav2vec2.encoder.pos_conv_embed.conv.parametrizations.weight.original0",
                              "wav2vec2.encoder.pos_conv_embed.conv.parametrizations.weight.original1"}),
])
def test_muon_trains_the_hidden_matrices_only(model, size, muon, kept):
    module, _ = build_model(model, size)
    chosen = {id(p) for p in muon_parameters(module)}
    names = [n for n, p in module.named_parameters() if id(p) in chosen]
    assert len(names) == muon and all(p.ndim >= 2 for p in muon_parameters(module))
    assert {n for n, p in module.named_parameters() if p.ndim >= 2 and id(p) not in chosen} == kept


def test_state_dict_resumes_and_the_schedule_reaches_both_kinds_of_group():
    cfg = parse_config({"model": "gpt-neo", "size": "tiny"}, ["optim.name=muon", "optim.lr=0.01"])
    torch.manual_seed(0)
    model, loss_fn = build_model("gpt-neo", "tiny")
    opt = build_optimizer(model, cfg.optim)
    assert [g["muon"] for g in opt.param_groups] == [True, False]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5)
    assert [g["lr"] for g in opt.param_groups] == [0.005, 0.005]
    batch = {"input_ids": torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(2))}

    def step(m, o):
        o.zero_grad()
        loss_fn(m, batch)[0].backward()
        o.step()

    step(model, opt)
    sched.step()
    saved_model = {k: v.clone() for k, v in model.state_dict().items()}
    saved_opt = copy.deepcopy(opt.state_dict())  # as a checkpoint file holds it
    step(model, opt)
    again, _ = build_model("gpt-neo", "tiny")
    again.load_state_dict(saved_model)
    opt2 = build_optimizer(again, cfg.optim)
    opt2.load_state_dict(saved_opt)
    step(again, opt2)
    for (name, p), q in zip(model.named_parameters(), again.parameters()):
        assert torch.equal(p, q), name


def test_an_unknown_optimizer_is_refused_with_the_choices():
    with pytest.raises(ConfigError) as exc:
        parse_config({"model": "gpt-neo", "size": "tiny"}, ["optim.name=sgd"])
    [err] = exc.value.errors
    assert err["path"] == "optim.name" and "adamw" in err["message"] and "muon" in err["message"]
    with pytest.raises(ConfigError) as exc:
        parse_config({"model": "gpt-neo", "size": "tiny"}, ["optim.muon_momentum=1"])
    assert [e["path"] for e in exc.value.errors] == ["optim.muon_momentum"]


@pytest.mark.parametrize("state,name", [
    ({"config": {"optim": {"name": "muon"}}}, "muon"),
    ({"config": {"optim": {"lr": 0.003}}}, "adamw"),  # written before optim.name existed
    ({"config": {"optim": {"name": "sgd"}}}, None),
    ({"config": {"optim": {"name": ["muon"]}}}, None),
    ({"config": {"optim": None}}, None),
    ({"config": "optim"}, None),
    ({}, None),
])
def test_the_optimizer_a_checkpoint_names(state, name):
    """What the resume check reads from a checkpoint file; anything but a known name is refused with the
    one-line message (the two-worker run of that is in test_training.py)."""
    from recipes.train import _optimizer_of

    assert _optimizer_of(state) == name
