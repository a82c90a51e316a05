"""A small decoder-only transformer language model and a learnable synthetic token stream, read from
a file on disk."""

from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np
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


class TokenShard(torch.utils.data.Dataset):
    """Learnable sequences x[t+1] = (a * x[t] + b) mod vocab, (a, b) from a small set, written once to a
    file, dropped from the page cache, and read back batch by batch in order: the kernel reads it from
    storage once, a read-ahead of some pages at a time (counted in ``io.read_bytes``), and most batches
    find their pages already read. The file holds at most ``MAX_ITEMS`` items (about 8.5 MB at the demo's
    sizes): a longer job reads it again from the start, from the page cache then (no storage bytes), so
    that a job of 100,000 steps does not write gigabytes before its first step. ``slow(first_item)`` > 1:
    that read takes that many times as long, at least 1 ms x (factor - 1) more (a slower disk; the wait is
    I/O, not CPU)."""

    MAX_ITEMS = 16384

    def __init__(
        self, path: str, n: int, seq_len: int, vocab: int, seed: int, slow: Callable[[int], float] | None = None
    ) -> None:
        rng = np.random.default_rng(seed)
        m = min(n, self.MAX_ITEMS)
        rules = np.array([(3, 1), (5, 7), (7, 3), (1, 11)], dtype=np.int64)[rng.integers(4, size=m)]
        x = np.empty((m, seq_len + 1), dtype=np.int64)
        x[:, 0] = rng.integers(vocab, size=m)
        for t in range(seq_len):
            x[:, t + 1] = (rules[:, 0] * x[:, t] + rules[:, 1]) % vocab
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as f:
            f.write(x.tobytes())
            f.flush()
            os.fsync(f.fileno())  # clean pages: the cache may drop them
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # so the first read is from storage
        self.path, self.n, self.m, self.width, self.slow = path, n, m, seq_len + 1, slow
        self._fd: int | None = None

    def __len__(self) -> int:
        return self.n

    def _read(self, first: int, count: int) -> np.ndarray:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        t0 = time.perf_counter()
        at, left, parts = first % self.m, count, []
        while left:  # past the file's end: from its start again
            take = min(left, self.m - at)
            parts.append(os.pread(self._fd, 8 * self.width * take, 8 * self.width * at))
            at, left = 0, left - take
        raw = b"".join(parts)
        factor = self.slow(first) if self.slow is not None else 1.0
        if factor > 1:
            time.sleep((factor - 1) * max(time.perf_counter() - t0, 0.001))
        return np.frombuffer(raw, dtype=np.int64).reshape(count, self.width)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = torch.from_numpy(self._read(i, 1)[0].copy())
        return s[:-1], s[1:]

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if list(indices) != list(range(indices[0], indices[0] + len(indices))):
            return [self[i] for i in indices]
        rows = torch.from_numpy(self._read(indices[0], len(indices)).copy())
        return [(r[:-1], r[1:]) for r in rows]
