"""A small decoder-only transformer language model and a learnable synthetic token stream."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.n_heads, d // self.n_heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(
        self, vocab: int = 128, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, seq_len: int = 64
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class SyntheticTokens(torch.utils.data.Dataset):
    """Sequences x[t+1] = (a * x[t] + b) mod vocab with (a, b) from a small set: learnable."""

    def __init__(self, n: int, seq_len: int, vocab: int, seed: int) -> None:
        self.n, self.seq_len, self.vocab, self.seed = n, seq_len, vocab, seed
        self.rules = [(3, 1), (5, 7), (7, 3), (1, 11)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        a, b = self.rules[int(torch.randint(len(self.rules), (1,), generator=g))]
        x0 = int(torch.randint(self.vocab, (1,), generator=g))
        seq = [x0]
        for _ in range(self.seq_len):
            seq.append((a * seq[-1] + b) % self.vocab)
        s = torch.tensor(seq)
        return s[:-1], s[1:]
