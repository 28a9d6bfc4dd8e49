"""The model's speed choices that are not the textbook, each measured: model.py calls these where GPT-2 has SDPA,
the tanh GELU and a read of the cache, as nanochat keeps its choice of attention kernel in flash_attention.py. Each
computes what the textbook line would; where it takes another path, the tests check it against that line.

Imports nothing of this repo.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout: float,
           training: bool, cached: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim) + mask) v, of queries q (B, n_head, T, head_dim) over keys and values k, v
    (B, n_head, K, head_dim), with dropout on the weights while training: SDPA's attention.

    mask: None (causal, K = T), bool (True: attend) or float (added to the scaled scores). cached: k and v are the
    whole KV cache. One cached query at inference on the CPU (every decode step there) takes attend_one_query.
    """
    if mask is not None and mask.is_floating_point():
        mask = mask.to(q.dtype)  # SDPA wants a float mask in the query's dtype (bf16 under autocast)
    if q.size(2) == 1 and cached and q.device.type == "cpu" and not training:
        return attend_one_query(q, k, v, mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None and q.size(2) > 1,
                                          dropout_p=dropout if training else 0.0)


def attend_one_query(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SDPA for one query per row (B, n_head, 1, head_dim) over the whole cache, written out.

    On the CPU, compiled, these two matrix-vector products and softmax made the decode step 7% faster than SDPA's
    flash kernel, which is built for blocks of queries; eager, they are as fast (measured). Every cached forward of
    one token on the CPU takes it, eager ones too (a prompt of one token, sample.py --compile=False): SDPA in its
    place there would move their last bits.
    """
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    scores = scores + mask if mask.is_floating_point() else scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GPT-2's GELU, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    Compiled, it is written with a sigmoid instead (1 + tanh z = 2 sigmoid(2z): the same function), in float32:
    torch.compile's CPU tanh made the baby model's training step 4% slower than with the sigmoid (measured).
    Eager, torch's own kernel is the fastest.
    """
    if not torch.compiler.is_compiling():
        return F.gelu(x, approximate="tanh")
    x32 = x.float()
    return (x32 * torch.sigmoid(2 * math.sqrt(2 / math.pi) * (x32 + 0.044715 * x32 * x32 * x32))).to(x.dtype)


def read_buffer(module: nn.Module, name: str) -> torch.Tensor:
    """module's buffer `name`, read from its _buffers: as an attribute it goes through Module.__getattr__, and the
    KV cache's reads of the 6-layer baby model's decode step took 20 us instead of 3 (measured; the step: 3-5 ms)."""
    return module._buffers[name]
