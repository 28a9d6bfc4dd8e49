"""GPT-2, top to bottom: the input layer, positions inside attention, attention with its KV cache, the MLP, the
block, the model.

Imports nothing of this repo. The input layer is the official GPT-2 one,
    h = wte[X] + wpe[past_length + arange(T)],
and can be swapped for a sinusoidal table or for no position signal at all (NoPE). Two encodings act inside
attention instead: rotary embeddings (RoPE) turn queries and keys, ALiBi adds a distance penalty to the scores.
"""

import itertools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

POS_ENCODINGS = ("learned", "sinusoidal", "rope", "alibi", "none")
GPT2_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")  # the OpenAI checkpoints from_pretrained knows


@dataclass
class GPTConfig:
    block_size: int = 1024  # training context length; rows of the learned position table
    vocab_size: int = 50304  # token ids are 0 .. vocab_size-1 (GPT-2: 50257, padded to 50304 for speed)
    n_layer: int = 12  # transformer blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # residual stream width
    dropout: float = 0.0  # dropout on the input sum, attention weights and residual branches
    bias: bool = True  # biases in Linear and LayerNorm layers (GPT-2: True)
    pos_encoding: str = "learned"  # position signal: learned | sinusoidal | rope | alibi | none (see README)
    learned_init_std: float = 0.01  # init std of the learned position table (GPT-2: 0.01; nanoGPT: 0.02)
    # Vaswani et al. add a unit-amplitude table to token embeddings scaled to std 1 (x sqrt(d)). GPT-2's token
    # embeddings have std 0.02 and no scaling, so 0.02 keeps the ratio of position to token signal. Unscaled,
    # the table drowns the tokens 50:1 at initialisation (see README).
    sinusoidal_amplitude: float = 0.02  # scale of the sinusoidal table (token table init std: Vaswani's ratio)
    rope_base: float = 10000.0  # rotary angle base: features i, i+head_dim/2 turn by pos * base^(-2i/head_dim)
    gelu: str = "tanh"  # MLP activation: tanh (GPT-2's approximation) | erf (exact; nanoGPT's nn.GELU)

    def __post_init__(self) -> None:
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        if self.pos_encoding not in POS_ENCODINGS:
            raise ValueError(f"pos_encoding={self.pos_encoding!r} is not one of {', '.join(POS_ENCODINGS)}")
        if self.pos_encoding == "sinusoidal" and self.n_embd % 2:
            raise ValueError(f"pos_encoding='sinusoidal' needs an even n_embd, got {self.n_embd}")
        if self.pos_encoding == "rope" and (self.n_embd // self.n_head) % 2:
            raise ValueError(f"pos_encoding='rope' needs an even head_dim, got n_embd/n_head = {self.n_embd}/"
                             f"{self.n_head} = {self.n_embd // self.n_head}; change n_embd or n_head")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout} must be in [0, 1)")
        for name in ("sinusoidal_amplitude", "rope_base"):
            if not getattr(self, name) > 0:  # also catches NaN
                raise ValueError(f"{name}={getattr(self, name)} must be > 0")
        if self.gelu not in ("tanh", "erf"):
            raise ValueError(f"gelu={self.gelu!r} must be tanh or erf")
        if not self.learned_init_std >= 0:
            raise ValueError(f"learned_init_std={self.learned_init_std} must be >= 0")


class InputLayer(nn.Module):
    """Token embedding plus one additive position encoding: the only place where positions enter the residual
    stream (rope and alibi act inside attention instead, and add nothing here)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        # Plain Parameters (not nn.Embedding) so that building the position table draws no random numbers:
        # two variants built under one seed then get identical shared weights.
        self.wte = nn.Parameter(torch.empty(config.vocab_size, config.n_embd))
        if config.pos_encoding == "learned":
            self.wpe = nn.Parameter(torch.empty(config.block_size, config.n_embd))
        elif config.pos_encoding == "sinusoidal":
            inv_freq = 10000.0 ** (-torch.arange(0, config.n_embd, 2, dtype=torch.float64) / config.n_embd)
            self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        self.drop = nn.Dropout(config.dropout)

    def reset_token_table(self) -> None:
        nn.init.normal_(self.wte, mean=0.0, std=0.02)

    def reset_position_table(self) -> None:
        if self.config.pos_encoding == "learned":
            nn.init.normal_(self.wpe, mean=0.0, std=self.config.learned_init_std)

    def position_encoding(self, positions: torch.Tensor) -> torch.Tensor | None:
        """(T,) absolute positions -> (T, n_embd), or None when nothing is added to the token embedding."""
        if self.config.pos_encoding == "learned":
            return self.wpe[positions]
        if self.config.pos_encoding == "sinusoidal":
            angles = positions.float()[:, None] * self.inv_freq[None, :]
            # Vaswani et al.: sin on even features, cos on odd ones, interleaved.
            return self.config.sinusoidal_amplitude * torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)
        return None

    def forward(self, idx: torch.Tensor, past_length: int = 0) -> torch.Tensor:
        check_positions(self.config, idx.size(1), past_length)
        return self.embed(idx, torch.arange(past_length, past_length + idx.size(1), device=idx.device))

    def embed(self, idx: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """forward at positions (T,) given as a tensor, unchecked: the entry of the compiled decode step."""
        h = F.embedding(idx, self.wte)
        pe = self.position_encoding(positions)
        if pe is not None:
            h = h + pe.to(h.dtype)
        return self.drop(h)


def check_positions(config: GPTConfig, seq_len: int, past_length: int) -> None:
    if seq_len < 1:
        raise ValueError("empty sequence: idx has T=0 tokens; give at least one token")
    if past_length < 0:
        raise ValueError(f"past_length={past_length} must be >= 0")
    if config.pos_encoding == "learned" and past_length + seq_len > config.block_size:
        raise ValueError(
            f"position {past_length + seq_len - 1} is out of range: T={seq_len} new tokens after "
            f"past_length={past_length} cached ones need positions up to {past_length + seq_len - 1}, but the "
            f"learned position table has block_size={config.block_size} rows (0..{config.block_size - 1}). "
            "Crop the context to block_size tokens; the other pos_encodings have no such cap."
        )


def check_token_ids(idx: torch.Tensor, vocab_size: int, what: str = "token id", ignore: int | None = None) -> None:
    # Skipped while compiling: the check needs a device sync, and compiled training reads data checked on the
    # CPU as it is batched (dataset.get_batch). An empty idx has no ids to check; the input layer reports it.
    if torch.compiler.is_compiling() or idx.numel() == 0:
        return
    if idx.dtype not in (torch.int64, torch.int32):  # what the embedding (and cross_entropy) can index with
        raise ValueError(f"{what}s must be an int64 or int32 tensor, got dtype {idx.dtype}")
    if ignore is not None:
        idx = torch.where(idx == ignore, 0, idx)
    low, high = int(idx.min()), int(idx.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"{what} {bad} is outside [0, vocab_size={vocab_size})")


# ----------------------------------------------------------------------------------------------------------
# Positions inside attention: rotary embeddings (Su et al. 2021) and linear biases (Press et al. 2022)


def rope_angles(positions: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, head_dim), float32, of the rotary angles at positions (T,), in the rotate-half layout:
    feature i and feature i + head_dim/2 form a pair, turned by pos * base^(-2i/head_dim)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Turn each pair (x_i, x_{i+head_dim/2}) of x (B, n_head, T, head_dim) by the angles of rope_angles."""
    half = x.size(-1) // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    # x * cos promotes bf16 (autocast) to float32: the rotation is computed in float32 and rounded once
    return (x * cos + turned * sin).to(x.dtype)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding of x (B, n_head, T, head_dim) at absolute positions (T,)."""
    return rotate(x, *rope_angles(positions, x.size(-1), base))


def alibi_slopes(n_head: int) -> list[float]:
    """ALiBi's slope m_h of each head, as in the paper's code: for n_head a power of two, 2^(-8(h+1)/n_head);
    otherwise those of the largest power of two c < n_head, then every other slope of 2c heads."""
    c = 1 << (n_head.bit_length() - 1)
    slopes_c = [2.0 ** (-8.0 * (h + 1) / c) for h in range(c)]
    slopes_2c = [2.0 ** (-8.0 * (h + 1) / (2 * c)) for h in range(2 * c)]
    return slopes_c + slopes_2c[0::2][:n_head - c]


def attention_mask(config: GPTConfig, positions: torch.Tensor, key_length: int, cached: bool) -> torch.Tensor | None:
    """The mask of queries at positions (T,) over the keys at positions 0 .. key_length-1, shared by every layer.

    Without a cache the keys are the queries' own tokens (positions 0 .. T-1) and SDPA's is_causal is right:
    None. With a cache, the queries attend to the whole preallocated cache (fixed shapes for the compiled decode
    step), and the mask hides every key after the query: those not written yet, or left from an earlier window.
    With alibi, a float bias (n_head, T, key_length): -m_h * (query_pos - key_pos), -inf after the query.
    """
    key_pos = torch.arange(key_length, device=positions.device)
    if config.pos_encoding == "alibi":
        slopes = torch.tensor(alibi_slopes(config.n_head), device=positions.device)
        distance = (positions[:, None] - key_pos[None, :]).float()
        # added after SDPA's 1/sqrt(head_dim) scaling of q.k, and not scaled itself, as in the paper
        return (-slopes[:, None, None] * distance).masked_fill(distance < 0, float("-inf"))
    return key_pos[None, :] <= positions[:, None] if cached else None


class KVCache:
    """Keys and values of the tokens seen so far, preallocated for max_length positions in every layer."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        # One (batch_size, n_head, max_length, head_dim) tensor per layer: the compiled decode step then writes
        # each in place (a slice of one tensor for all layers was copied whole at every step: measured).
        self.keys, self.values = keys, values
        self.batch_size, self.max_length = keys[0].size(0), keys[0].size(2)
        self.length = 0  # past_length: positions already cached

    def reset(self) -> None:
        self.length = 0

    def check_room(self, batch_size: int, seq_len: int) -> None:
        """Refuse seq_len more tokens of batch_size rows that this cache cannot hold."""
        if batch_size != self.batch_size:
            raise ValueError(f"idx has batch size {batch_size} but the KV cache holds {self.batch_size}")
        if self.length + seq_len > self.max_length:
            raise ValueError(f"KV cache overflow: past_length={self.length} + T={seq_len} exceeds the cache's "
                             f"max_length={self.max_length}")

    def first_row(self) -> "KVCache":
        """A batch-1 cache that writes into row 0 of this one (a view: no copy)."""
        row = KVCache([k[:1] for k in self.keys], [v[:1] for v in self.values])
        row.length = self.length
        return row

    def copy_first_row(self, length: int) -> None:
        """Give every row the first row's cache: one prompt run once for all samples of a batch."""
        for tensor in (*self.keys, *self.values):
            tensor[1:, :, :length] = tensor[:1, :, :length]
        self.length = length


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, positions: torch.Tensor,
                kv_cache: tuple[torch.Tensor, torch.Tensor] | None = None, mask: torch.Tensor | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """x (B, T, C) at positions (T,); mask from attention_mask (None: causal), rope the (cos, sin) of
        rope_angles or None. With kv_cache, attends to the whole cache after writing k and v at positions."""
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)  # before caching: the cache holds rotated keys
        if kv_cache is not None:
            cache_k, cache_v = kv_cache
            # Written by position, not by a slice of Python ints: the shapes stay the same at every step.
            cache_k.index_copy_(2, positions, k.to(cache_k.dtype))
            cache_v.index_copy_(2, positions, v.to(cache_v.dtype))
            k, v = cache_k, cache_v
        if mask is not None and mask.is_floating_point():
            mask = mask.to(q.dtype)  # SDPA wants a float mask in the query's dtype (bf16 under autocast)
        if T == 1 and kv_cache is not None and q.device.type == "cpu" and not self.training:
            y = attend_one_query(q, k, v, mask)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None and T > 1,
                                               dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


def attend_one_query(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SDPA for one query per row (B, n_head, 1, head_dim) over the whole cache, written out.

    On the CPU, compiled, these two matrix-vector products and softmax made the decode step 7% faster than SDPA's
    flash kernel, which is built for blocks of queries; eager, they are as fast (measured).
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


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.gelu = gelu_tanh if config.gelu == "tanh" else F.gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, kv_cache=None, mask: torch.Tensor | None = None,
                rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), positions, kv_cache, mask, rope)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.input_layer = InputLayer(config)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.input_layer.wte  # weight tying: one Parameter, both uses add to its grad
        # A training setting, not part of the architecture (train.py sets it): keep only each Block's input for the
        # backward pass and recompute the Block there, trading about a third more compute for far less memory.
        self.activation_checkpointing = False
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Position table last, so the shared weights do not depend on which position encoding is used.
        self.input_layer.reset_token_table()
        for name, p in self.blocks.named_parameters():
            if name.endswith("c_proj.weight"):  # residual projections, scaled as in GPT-2
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))
            elif p.dim() == 2:
                nn.init.normal_(p, mean=0.0, std=0.02)
            elif name.endswith("weight"):  # LayerNorm gain
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)
        nn.init.ones_(self.ln_f.weight)
        if self.ln_f.bias is not None:
            nn.init.zeros_(self.ln_f.bias)
        self.input_layer.reset_position_table()

    def get_num_params(self, non_embedding: bool = False) -> int:
        """Parameters, the tied head counted once; non_embedding=True leaves out the position table (nanoGPT)."""
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding and self.config.pos_encoding == "learned":
            n_params -= self.input_layer.wpe.numel()
        return n_params

    def make_cache(self, batch_size: int, max_length: int | None = None, dtype: torch.dtype | None = None) -> KVCache:
        """An empty KV cache for batch_size sequences of up to max_length (default block_size) positions."""
        c, wte = self.config, self.input_layer.wte
        shape = (batch_size, c.n_head, max_length or c.block_size, c.n_embd // c.n_head)
        return KVCache(*([torch.zeros(shape, device=wte.device, dtype=dtype or wte.dtype) for _ in range(c.n_layer)]
                         for _ in range(2)))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                cache: KVCache | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits (B, T, vocab_size) for idx (B, T), and the mean cross-entropy if targets are given.

        With a cache, idx holds the new tokens only: they get positions cache.length .. cache.length+T-1,
        attend to every cached token, and are appended to the cache.
        """
        if idx.dim() != 2:
            raise ValueError(f"idx must have shape (batch, T), got {tuple(idx.shape)}")
        check_token_ids(idx, self.config.vocab_size)
        past_length = 0 if cache is None else cache.length
        if cache is not None:
            cache.check_room(idx.size(0), idx.size(1))
        x = self.input_layer(idx, past_length)
        logits = self.blocks_and_head(x, torch.arange(past_length, past_length + idx.size(1), device=idx.device),
                                      cache)
        if cache is not None:
            cache.length += idx.size(1)
        loss = None
        if targets is not None:
            check_token_ids(targets, self.config.vocab_size, "target", ignore=-1)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def blocks_and_head(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        """Logits (B, T, vocab_size) of the embedded x (B, T, n_embd) at positions (T,); with a cache, writes
        its keys and values at those positions (the caller counts cache.length)."""
        c = self.config
        # Built once for all layers: the mask (alibi's bias) and rope's cos and sin at the positions in use.
        key_length = x.size(1) if cache is None else cache.max_length
        mask = attention_mask(c, positions, key_length, cached=cache is not None)
        rope = rope_angles(positions, c.n_embd // c.n_head, c.rope_base) if c.pos_encoding == "rope" else None
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled() and cache is None
        for layer, block in enumerate(self.blocks):
            kv = None if cache is None else (cache.keys[layer], cache.values[layer])
            if recompute:  # non-reentrant: works with autocast, compile and FSDP, and replays the dropout masks
                x = checkpoint(block, x, positions, kv, mask, rope, use_reentrant=False)
            else:
                x = block(x, positions, kv, mask, rope)
        return self.lm_head(self.ln_f(x))

    def decode_step(self, token: torch.Tensor, position: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits (B, vocab_size) of token (B, 1) at position (1,), its keys and values written into the cache.

        Fixed shapes, no checks and no host sync, so that it compiles to one graph (compiled_decode_step); the
        caller checks the position and counts cache.length.
        """
        return self.blocks_and_head(self.input_layer.embed(token, position), position, cache)[:, -1]

    def crop_block_size(self, block_size: int) -> None:
        """Shrink the context length, e.g. to finetune GPT-2 (1024) with a smaller block_size."""
        if not 0 < block_size <= self.config.block_size:
            raise ValueError(f"block_size={block_size} must be in [1, {self.config.block_size}]")
        self.config.block_size = block_size
        if self.config.pos_encoding == "learned":
            self.input_layer.wpe = nn.Parameter(self.input_layer.wpe[:block_size].detach().clone())

    def configure_optimizers(self, weight_decay: float, learning_rate: float, betas: tuple[float, float],
                             device_type: str, fused: bool | None = None) -> torch.optim.AdamW:
        """AdamW with weight decay on matrices (embeddings included) and none on biases and LayerNorm gains.

        fused: one fused kernel per step; None uses it where this torch has it for device_type, False is foreach.
        """
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        # One fused kernel per step where torch has it for the device (CUDA; CPU and MPS since torch 2.4): on the
        # CPU baby model its step is 2.3x faster than foreach (bench.py's optimizer column). Elsewhere foreach.
        fused = device_type in fused_adamw_devices() if fused is None else fused
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused, foreach=None if fused else True)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs (forward + backward) per token at context seq_len, as in the PaLM appendix."""
        n_params = self.get_num_params(non_embedding=True)
        return 6 * n_params + 12 * self.config.n_layer * self.config.n_embd * seq_len

    @torch.no_grad()
    def generate_stream(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                        top_k: int | None = None, top_p: float | None = None, slide: int | None = None,
                        use_cache: bool = True, generator: torch.Generator | list[torch.Generator] | None = None,
                        vocab_size: int | None = None, compile: bool = False):
        """Yield max_new_tokens tokens, each (B, 1), continuing idx (B, T).

        The context window holds at most block_size tokens. When it is full, the oldest `slide` tokens
        (default block_size // 2) are dropped and the rest is run again from position 0: cached keys and
        values carry their positions and cannot be shifted. slide=1 is nanoGPT's crop-every-step.
        use_cache=False runs the whole window every step (the slow reference) under the same policy.
        vocab_size limits sampling to ids below it: the rows that pad a vocabulary (50257 -> 50304) are no tokens.
        compile=True runs each new token through the compiled decode step (compiled_decode_step); the prompt
        and the re-runs after a slide, whose lengths vary, stay eager. generator: see sample_next_token.
        """
        block_size = self.config.block_size
        slide = block_size // 2 if slide is None else slide
        if not 1 <= slide <= block_size:
            raise ValueError(f"slide={slide} must be in [1, block_size={block_size}]")
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 0")
        context = idx[:, -block_size:]
        cache = None if not use_cache else self.static_cache(idx.size(0)) if compile else self.make_cache(idx.size(0))
        decode_step = compiled_decode_step(self) if compile and use_cache else self.decode_step
        logits = self.prefill(context, cache)
        for step in range(max_new_tokens):
            next_token = sample_next_token(logits[:, :vocab_size], temperature, top_k, top_p, generator)
            yield next_token
            if step == max_new_tokens - 1:
                break
            if context.size(1) == block_size:
                context = torch.cat((context[:, slide:], next_token), dim=1)
                if cache is not None:
                    cache.reset()
                logits = self.prefill(context, cache)
            else:
                context = torch.cat((context, next_token), dim=1)
                logits = self(context)[0][:, -1] if cache is None else self.decode(next_token, cache, decode_step)

    def decode(self, token: torch.Tensor, cache: KVCache, decode_step=None) -> torch.Tensor:
        """Logits (B, vocab_size) of one new token (B, 1) per row after the cache, through decode_step (default
        self.decode_step; or its compiled form); the checks run here, on the host, with no device sync."""
        cache.check_room(token.size(0), 1)
        check_positions(self.config, 1, cache.length)
        position = torch.full((1,), cache.length, dtype=torch.long, device=token.device)
        logits = (decode_step or self.decode_step)(token, position, cache)
        cache.length += 1
        return logits

    def static_cache(self, batch_size: int) -> KVCache:
        """An empty cache for the compiled decode step, kept on the model and reused by later calls.

        With CUDA graphs the step writes the cache at fixed addresses, marked static; a new cache each call
        would record a new graph and recompile.
        """
        cache, wte = getattr(self, "_static_cache", None), self.input_layer.wte
        if cache is None or (cache.batch_size, cache.max_length, cache.keys[0].device, cache.keys[0].dtype) != (
                batch_size, self.config.block_size, wte.device, wte.dtype):
            cache = self.make_cache(batch_size)
            if wte.is_cuda:
                for tensor in (*cache.keys, *cache.values):
                    torch._dynamo.mark_static_address(tensor)
            self._static_cache = cache
        cache.reset()
        return cache

    def prefill(self, context: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        """Last-position logits (B, vocab_size) of context (B, T), cached; a prompt shared by all rows runs once."""
        shared = cache is not None and context.size(0) > 1 and torch.equal(context, context[:1].expand_as(context))
        if not shared:
            return self(context, cache=cache)[0][:, -1]
        logits = self(context[:1], cache=cache.first_row())[0][:, -1]
        cache.copy_first_row(context.size(1))
        return logits.expand(context.size(0), -1)

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 **kwargs) -> torch.Tensor:
        """idx (B, T) followed by max_new_tokens sampled tokens (nanoGPT's signature; see generate_stream)."""
        new_tokens = list(self.generate_stream(idx, max_new_tokens, temperature, top_k, **kwargs))
        return torch.cat([idx, *new_tokens], dim=1)

    @classmethod
    def from_pretrained(cls, name_or_dir: str, dropout: float = 0.0) -> "GPT":
        """GPT-2 weights from a local Hugging Face directory, or by name (gpt2, gpt2-medium, ...) with network."""
        directory = Path(name_or_dir)
        if not directory.is_dir():
            directory = download_hf_gpt2(name_or_dir)
        hf_config = json.loads((directory / "config.json").read_text())
        if hf_config.get("activation_function", "gelu_new") != "gelu_new" or hf_config.get("n_inner") not in (
                None, 4 * hf_config["n_embd"]):
            raise ValueError(f"{directory} is not a GPT-2 architecture this model can hold (activation, n_inner)")
        config = GPTConfig(block_size=hf_config["n_positions"], vocab_size=hf_config["vocab_size"],
                           n_layer=hf_config["n_layer"], n_head=hf_config["n_head"], n_embd=hf_config["n_embd"],
                           dropout=dropout, bias=True, pos_encoding="learned")
        model = cls(config)
        model.load_state_dict(hf_to_ours(read_hf_weights(directory)))
        return model

    def export_hf(self, directory: str | os.PathLike) -> None:
        """Write config.json + model.safetensors that transformers' GPT2LMHeadModel.from_pretrained loads."""
        from safetensors.torch import save_file

        if self.config.pos_encoding != "learned":
            raise ValueError(f"GPT-2 in transformers has a learned position table; this model has "
                             f"pos_encoding={self.config.pos_encoding!r}: only 'learned' models can be exported")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        c = self.config
        hf_config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": c.vocab_size,
                     "n_positions": c.block_size, "n_ctx": c.block_size, "n_embd": c.n_embd, "n_layer": c.n_layer,
                     "n_head": c.n_head, "n_inner": None,
                     "activation_function": "gelu_new" if c.gelu == "tanh" else "gelu",  # gelu: transformers' erf
                     "resid_pdrop": c.dropout, "embd_pdrop": c.dropout, "attn_pdrop": c.dropout,
                     "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, "tie_word_embeddings": True,
                     # GPT-2's <|endoftext|>, where the vocabulary has it
                     "bos_token_id": 50256 if c.vocab_size > 50256 else None,
                     "eos_token_id": 50256 if c.vocab_size > 50256 else None}
        (directory / "config.json").write_text(json.dumps(hf_config, indent=2))
        save_file(ours_to_hf(self.state_dict(), c), str(directory / "model.safetensors"), metadata={"format": "pt"})


# Hugging Face's GPT-2 stores these Linear layers as Conv1D, whose weight is the transpose of ours.
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def hf_to_ours(hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    state = {}
    for key, tensor in hf_state.items():
        key = key.removeprefix("transformer.")
        if key.endswith((".attn.bias", ".attn.masked_bias")) or key == "lm_head.weight":
            continue  # causal-mask buffers of old checkpoints; the head is tied to wte
        if key in ("wte.weight", "wpe.weight"):
            key = "input_layer." + key.removesuffix(".weight")
        elif key.startswith("h."):
            key = "blocks." + key.removeprefix("h.")
        if key.endswith(_CONV1D):
            tensor = tensor.t()
        state[key] = tensor.contiguous()
    state["lm_head.weight"] = state["input_layer.wte"]
    return state


def ours_to_hf(state: dict[str, torch.Tensor], config: GPTConfig) -> dict[str, torch.Tensor]:
    hf_state = {}
    for key, tensor in state.items():
        if key == "lm_head.weight":
            continue  # tied to wte; transformers ties it again on load
        if key.endswith(_CONV1D):
            tensor = tensor.t()
        if key.startswith("input_layer."):
            key = key.removeprefix("input_layer.") + ".weight"
        elif key.startswith("blocks."):
            key = "h." + key.removeprefix("blocks.")
        hf_state["transformer." + key] = tensor.detach().cpu().contiguous()
    if not config.bias:  # transformers' GPT-2 always has biases; zeros are the same function
        for key in [k for k in hf_state if k.startswith(("transformer.h.", "transformer.ln_f"))]:
            # a Conv1D weight is (in, out) and a LayerNorm gain (width,): the bias is as long as the last dim
            hf_state[key.removesuffix("weight") + "bias"] = torch.zeros(hf_state[key].shape[-1])
    return hf_state


def read_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / "model.safetensors").exists():
        from safetensors.torch import load_file

        return load_file(str(directory / "model.safetensors"))
    if (directory / "pytorch_model.bin").exists():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{directory} has neither model.safetensors nor pytorch_model.bin")


def download_hf_gpt2(name: str) -> Path:
    """Fetch config.json and the weights of a GPT-2 from the Hugging Face hub (or its local cache)."""
    if name.removeprefix("openai-community/") not in GPT2_NAMES:
        raise ValueError(f"{name!r} is neither a local directory nor one of {GPT2_NAMES}")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:
        raise ImportError(f"loading {name!r} by name needs `pip install transformers`; or pass a local "
                           "directory with config.json and model.safetensors") from e
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
    try:
        return Path(snapshot_download(name, allow_patterns=["config.json", "model.safetensors"]))
    except Exception as e:
        raise ConnectionError(f"could not download {name!r} from the Hugging Face hub ({type(e).__name__}); offline, "
                           "pass a local directory holding config.json and model.safetensors instead") from e


def compiled_decode_step(model: GPT):
    """model.decode_step compiled to one graph with fixed shapes; the first call per batch size compiles.

    On CUDA with CUDA graphs (reduce-overhead), which replay the step's hundred small kernels as one launch. On the
    CPU under no_grad, the weights are frozen into the graph (inductor's freezing) and packed for MKL's
    matrix-vector products, which then beat plain F.linear (README, Speed). A frozen graph holds the weights it was
    compiled with, so when this model's weights have changed since, every compiled graph is dropped
    (torch.compiler.reset) and the step compiles again.
    """
    if model.input_layer.wte.device.type != "cpu":
        mode = "reduce-overhead" if model.input_layer.wte.is_cuda else "default"
        return torch.compile(model.decode_step, mode=mode, fullgraph=True, dynamic=False)
    weights = [(t.data_ptr(), t._version) for t in itertools.chain(model.parameters(), model.buffers())]
    if getattr(model, "_frozen_weights", weights) != weights:
        torch.compiler.reset()
    model._frozen_weights = weights
    step = torch.compile(model.decode_step, fullgraph=True, dynamic=False)
    from torch._inductor import config as inductor_config  # imported with the compiler, not with the model

    def frozen_step(token: torch.Tensor, position: torch.Tensor, cache: KVCache) -> torch.Tensor:
        # freezing is read when a graph compiles, on the first call: a config patch, not a global setting
        with inductor_config.patch(freezing=True):
            return step(token, position, cache)

    return frozen_step


def fused_adamw_devices() -> tuple[str, ...]:
    """Device types for which this torch has a fused AdamW kernel."""
    from torch.utils import _foreach_utils

    # Private, but what torch itself checks `fused=True` against (it lists the CPU from torch 2.4 on); a torch
    # without it gets the CUDA-only answer of its time.
    return tuple(getattr(_foreach_utils, "_get_fused_kernels_supported_devices", lambda: ["cuda"])())


def sample_next_token(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                      top_p: float | None = None,
                      generator: torch.Generator | list[torch.Generator] | None = None) -> torch.Tensor:
    """(B, vocab) logits -> (B, 1) token ids. temperature 0 is greedy.

    generator: one for the batch (its rows draw one after the other), or a list of one per row, so that a row
    draws the same numbers whatever the batch holds.
    """
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature={temperature} must be a finite number >= 0 (0 means greedy)")
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = F.softmax(filter_logits(logits.float() / temperature, top_k, top_p), dim=-1)
    if not isinstance(generator, list):
        return torch.multinomial(probs, num_samples=1, generator=generator)
    if len(generator) != probs.size(0):
        raise ValueError(f"{len(generator)} generators for a batch of {probs.size(0)} rows; give one per row")
    return torch.cat([torch.multinomial(row, num_samples=1, generator=g)
                      for row, g in zip(probs.split(1), generator, strict=True)])


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """Set to -inf every logit outside the top_k, and outside the smallest set whose probability reaches top_p."""
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k={top_k} must be >= 1")
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p={top_p} must be in (0, 1]")
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = F.softmax(sorted_logits, dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # a token stays while the tokens above it fall short of p
        drop_sorted = mass_before >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits
