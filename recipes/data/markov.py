"""Synthetic text: a seeded Markov chain whose entropy floor is known exactly.

The chain has order `order` over `vocab` tokens; each context's next-token law is
Dirichlet(alpha). Sequences start from the stationary law of contexts, so the best
possible mean next-token loss of a sequence is computable (`entropy_floor`), and
"excess loss" = loss - floor measures how far training is from perfect.
Batch i of rank r is a pure function of (seed, r, i): the data position is one integer.
"""

from __future__ import annotations

import numpy
import torch

from recipes.data.synthetic import IndexedStream


class MarkovChain:
    """Transition table, stationary law of contexts and entropy rate (nats)."""

    def __init__(self, vocab: int, order: int, alpha: float, seed: int) -> None:
        self.vocab, self.order = vocab, order
        rng = numpy.random.default_rng(seed)
        draws = torch.from_numpy(rng.dirichlet(numpy.full(vocab, alpha), size=vocab ** order)).clamp_min(1e-30)
        self.probs = draws / draws.sum(dim=1, keepdim=True)
        self.cdf = self.probs.cumsum(dim=1).float()
        self.cdf[:, -1] = 1.0 + 1e-6
        self.stationary = self._stationary()
        self.entropy_rate = float((self.stationary * _entropy(self.probs)).sum())

    def next_context(self, ctx: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        return (ctx % (self.vocab ** (self.order - 1))) * self.vocab + token

    def _stationary(self) -> torch.Tensor:
        contexts = self.probs.shape[0]
        ctx = torch.arange(contexts).unsqueeze(1).expand(contexts, self.vocab)
        tok = torch.arange(self.vocab).unsqueeze(0).expand(contexts, self.vocab)
        target = self.next_context(ctx, tok).flatten()
        pi = torch.full((contexts,), 1.0 / contexts, dtype=torch.float64)
        for _ in range(2000):
            new = torch.zeros_like(pi).index_add_(0, target, (pi.unsqueeze(1) * self.probs).flatten())
            if (new - pi).abs().max() < 1e-13:
                return new
            pi = new
        return pi

    def entropy_floor(self, seq_len: int) -> float:
        """Exact expected mean loss of an ideal predictor over positions 1..seq_len-1."""
        joint = self.stationary.view(*([self.vocab] * self.order))
        prefix_entropy = [0.0]
        for j in range(1, self.order + 1):
            marginal = joint.sum(dim=tuple(range(j, self.order))) if j < self.order else joint
            prefix_entropy.append(float(_entropy(marginal.flatten())))
        first = [prefix_entropy[j + 1] - prefix_entropy[j] for j in range(1, min(self.order, seq_len))]
        rest = max(0, seq_len - self.order) * self.entropy_rate
        return (sum(first) + rest) / (seq_len - 1)

    def ideal_loss(self, tokens: torch.Tensor) -> float:
        """Mean loss of the true chain on these very tokens (positions 1..L-1): the paired floor.

        The first `order - 1` positions see an incomplete context and use the stationary
        conditional, exactly as `entropy_floor` does in expectation.
        """
        batch, seq_len = tokens.shape
        joint = self.stationary.view(*([self.vocab] * self.order))
        nll = []
        for t in range(1, seq_len):
            if t < self.order:
                prefix = joint.sum(dim=tuple(range(t + 1, self.order))) if t + 1 < self.order else joint
                prefix = prefix.reshape(-1, self.vocab)
                flat = torch.zeros(batch, dtype=torch.long)
                for j in range(t):
                    flat = flat * self.vocab + tokens[:, j]
                cond = prefix[flat] / prefix[flat].sum(dim=1, keepdim=True)
                nll.append(-torch.log(cond.gather(1, tokens[:, t:t + 1]).squeeze(1)))
                continue
            ctx = torch.zeros(batch, dtype=torch.long)
            for j in range(t - self.order, t):
                ctx = ctx * self.vocab + tokens[:, j]
            nll.append(-torch.log(self.probs[ctx, tokens[:, t]]))
        return float(torch.stack(nll).mean())

    def sample(self, batch: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
        ctx = torch.multinomial(self.stationary.float(), batch, replacement=True, generator=gen)
        tokens = [((ctx // self.vocab ** (self.order - 1 - j)) % self.vocab) for j in range(self.order)]
        uniforms = torch.rand(seq_len, batch, 1, generator=gen)
        for t in range(self.order, seq_len):
            nxt = torch.searchsorted(self.cdf[ctx], uniforms[t]).squeeze(1)
            tokens.append(nxt)
            ctx = self.next_context(ctx, nxt)
        return torch.stack(tokens[:seq_len], dim=1)


def _entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * torch.log(p.clamp_min(1e-300))).sum(dim=-1)


class MarkovData(IndexedStream):
    """Per-rank stream of token batches; `position` is the next batch index."""

    def __init__(self, *, vocab: int, order: int, alpha: float, seed: int, rank: int,
                 batch_size: int, seq_len: int) -> None:
        super().__init__(seed, rank)
        self.chain = MarkovChain(vocab, order, alpha, seed)
        self.batch_size, self.seq_len = batch_size, seq_len

    @property
    def entropy_floor(self) -> float:
        return self.chain.entropy_floor(self.seq_len)

    def batch_at(self, index: int, stream: int) -> dict:
        return {"input_ids": self.chain.sample(self.batch_size, self.seq_len, self.generator(index, stream))}

    def ideal_loss(self, batches: list[dict]) -> float:
        """The true chain's loss on the held-out batches, so excess loss is measured on the same tokens."""
        return sum(self.chain.ideal_loss(b["input_ids"]) for b in batches) / len(batches)
