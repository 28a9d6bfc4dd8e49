"""GPT-2, top to bottom: the config, the input layer, attention with its KV cache, the MLP, the block, the model.

Imports only layers/positions.py and layers/kernels.py of this repo. The input layer is the official GPT-2 one,
    h = wte[X] + wpe[past_length + arange(T)],
with the position term given by the position encoding (layers/positions.py), which may instead turn queries and keys
(RoPE) or add a bias to the attention scores (ALiBi, T5), or do nothing at all (NoPE). The speed choices that are
not the textbook (the CPU's single-query attention, the compiled GELU, the cache's buffer reads) are
layers/kernels.py's.
Generation lives in gpt/generate.py (nanoGPT's model.generate is generate(model, idx, ...) there: the sampler
imports the model, so the model does not import it back), GPT-2's weights in gpt/gpt2_weights.py (from_pretrained,
export_hf).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from layers.bigram import BigramEmbedding
from layers.kernels import attend, gelu_tanh, read_buffer
from layers.positions import (
    ENCODINGS,
    Turns,
    cope_attention,
    derived_settings,
    encoding_of,
    forget_bias,
    log_forget_gates,
    random_positions,
    trained_length,
)
from layers.smear import Smear
from layers.value_embeddings import ValueEmbeddings

LOGIT_SOFTCAP_MIN = 1.0  # the smallest logit_softcap taken (see its field)


@dataclass
class GPTConfig:
    block_size: int = 1024  # training context length; rows of the learned position table
    vocab_size: int = 50304  # token ids are 0 .. vocab_size-1 (GPT-2: 50257, padded to 50304 for speed)
    n_layer: int = 12  # transformer blocks
    n_head: int = 12  # attention heads per block
    n_embd: int = 768  # residual stream width
    dropout: float = 0.0  # dropout on the input sum, attention weights and residual branches
    bias: bool = True  # biases in Linear and LayerNorm layers (GPT-2: True)
    pos_encoding: str = "learned"  # a name in layers/positions.py's ENCODINGS (docs/input_layer.md); learned: GPT-2
    learned_init_std: float = 0.01  # init std of the learned position table (GPT-2: 0.01; nanoGPT: 0.02)
    # Vaswani et al. add a unit-amplitude table to token embeddings scaled to std 1 (x sqrt(d)). GPT-2's token
    # embeddings have std 0.02 and no scaling, so 0.02 keeps the ratio of position to token signal. Unscaled,
    # the table drowns the tokens 50:1 at initialisation (amplitude 1 against the tokens' std 0.02).
    sinusoidal_amplitude: float = 0.02  # scale of the sinusoidal table (token table init std: Vaswani's ratio)
    rope_base: float = 10000.0  # rotary angle base: features i, i+head_dim/2 turn by pos * base^(-2i/head_dim)
    t5_num_buckets: int = 32  # t5: distance buckets, half exact distances, half log-spaced (T5's default)
    t5_max_distance: int = 128  # t5: distances from here on share the last bucket (T5's default)
    # The encodings of the length-generalisation papers (docs/input_layer.md); each default is the paper's or its
    # code's. Checkpoints and study records made before them lack them: they load, and match, at these defaults.
    partial_rope_fraction: float = 0.25  # partial_rope: share of each head's dimensions turned (GPT-NeoX's rotary_pct)
    p_rope_fraction: float = 0.75  # p_rope: share of rope's frequencies kept, the highest (Barbero et al. 2024)
    xpos_gamma: float = 0.4  # xpos: zeta_i = (2i/head_dim + gamma) / (1 + gamma) (Sun et al. 2022)
    xpos_scale_base: float = 512.0  # xpos: a score decays as zeta^(distance / xpos_scale_base)
    kerple_kernel: str = "log"  # kerple: log, -r1 log(1 + r2 d) | power, -r1 d^r2 (Chi et al. 2022)
    fire_width: int = 32  # fire: hidden units of the MLP that maps a normalised distance to each head's bias
    cope_positions: int = 0  # cope: rows of each layer's position table, counts clamped below; 0: trained length + 1
    rope_heads: int = 0  # head_rope: heads of each layer rope turns, the first ones, the others none; 0: n_head // 2
    nope_every: int = 4  # layer_rope: layers nope_every-1, 2*nope_every-1, ... (from 0) lack rope (HF Llama 4: 4)
    fox_bias_init: float = 0.0  # fox: the forget gates' bias at the start (the paper's code: 0; x-transformers: 5)
    dynamic_bias_depth: int = 2  # dynamic_bias: hidden layers of the MLP of the distance (x-transformers' default)
    dynamic_bias_log_distance: bool = True  # dynamic_bias: the MLP reads log(d + 1), not d (x-transformers: False)
    dynamic_bias_norm: bool = False  # dynamic_bias: a LayerNorm in each hidden layer (x-transformers' default: none)
    random_positions: int = 0  # training draws block_size sorted positions from 0..N-1 (Ruoss et al. 2023); 0: off
    gelu: str = "tanh"  # MLP activation: tanh (GPT-2's approximation) | erf (exact; nanoGPT's nn.GELU)
    # The pieces the speedruns use (modded-nanogpt, nanochat; docs/speedrun.md), each off by default: GPT-2's model.
    mlp_activation: str = "gelu"  # gelu (in the form `gelu` says) | relu2: relu(x)^2 (So et al. 2021's Primer)
    qk_norm: bool = False  # RMS-normalise each head's queries and keys (no gain) before the position turns them
    zero_init_proj: bool = False  # the blocks' output projections (attention's and the MLP's c_proj) start at zero
    # A cap c holds every logit in (-c, c): no token can be more than e^(2c) times as likely as another. Below
    # LOGIT_SOFTCAP_MIN (e^2 = 7.4 times) no model can predict and the loss stays near ln(vocab_size): refused.
    logit_softcap: float = 0.0  # logits become c * tanh(logits / c) (Gemma 2, nanochat: 15); 0: off; else c >= 1
    tie_head: bool = True  # the output head is the token table (GPT-2); False: a head of its own, drawn N(0, 0.02^2)
    # The speedruns' later pieces (modded-nanogpt's records, docs/training.md), each off by default; checkpoints and
    # study records made before them lack them: they load, and match, at these defaults.
    zero_init_head: bool = False  # tie_head=False: the head starts at zero (drawn first, so other weights stay)
    value_embeddings: int = 0  # K token tables added to the values of the first and last K layers; 0: off
    value_residual: bool = False  # each later layer's values become (1 - l) v + l v_first, l learnable from 0.5
    x0_shortcut: bool = False  # each block's input becomes a x + b x0 (x0: the input layer's), (a, b) from (1, 0)
    smear: bool = False  # each token's embedding takes in a gated share of the previous token's (layers/smear.py)
    bigram_embedding: int = 0  # rows of a (previous, token) table added to the input; >= vocab^2: one a pair; 0: off
    # Longer context than trained (docs/context_extension.md): train.py --extend_positions sets these three, or set
    # them by hand to scale rope at inference. Checkpoints written before them load with the defaults: no scaling.
    position_scaling: str = "none"  # none | interpolate (sinusoidal, rope, learned) | ntk, yarn (rope) | copy (learned)
    position_scale: float = 1.0  # s of position_scaling: the factor the context was extended by
    trained_block_size: int = 0  # block_size trained at, once it grew or was cropped (YaRN's, FIRE's L); 0: neither

    def __post_init__(self) -> None:
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "t5_max_distance"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}")
        encoding_of(self)  # the encoding's own checks
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout} must be in [0, 1)")
        for name in ("sinusoidal_amplitude", "rope_base"):
            if not getattr(self, name) > 0:  # also catches NaN
                raise ValueError(f"{name}={getattr(self, name)} must be > 0")
        for name in ("sinusoidal_amplitude", "rope_base", "learned_init_std"):
            if getattr(self, name) == math.inf:  # an inf table or angle base is a NaN loss later
                raise ValueError(f"{name}=inf must be finite")
        if self.gelu not in ("tanh", "erf"):
            raise ValueError(f"gelu={self.gelu!r} must be tanh or erf")
        if self.mlp_activation not in ("gelu", "relu2"):
            raise ValueError(f"mlp_activation={self.mlp_activation!r} must be gelu or relu2")
        if not (self.logit_softcap == 0 or LOGIT_SOFTCAP_MIN <= self.logit_softcap < math.inf):  # also catches NaN
            raise ValueError(f"logit_softcap={self.logit_softcap} must be 0 (off) or a finite cap >= "
                             f"{LOGIT_SOFTCAP_MIN:g} (nanochat: 15): every logit lies in (-cap, cap), so below "
                             f"{LOGIT_SOFTCAP_MIN:g} no token can be e^2 = 7.4 times as likely as another and the loss "
                             "stays near ln(vocab_size)")
        if not self.learned_init_std >= 0:
            raise ValueError(f"learned_init_std={self.learned_init_std} must be >= 0")
        if self.zero_init_head and self.tie_head:
            raise ValueError("zero_init_head=True needs tie_head=False: a tied head is the token table, which cannot "
                             "start at zero")
        if not 0 <= self.value_embeddings <= self.n_layer // 2:
            raise ValueError(f"value_embeddings={self.value_embeddings} must be in [0, n_layer // 2 = "
                             f"{self.n_layer // 2}]: table i feeds layers i and n_layer - value_embeddings + i")
        if self.value_residual and self.n_layer < 2:
            raise ValueError("value_residual=True needs n_layer >= 2: it mixes each later layer's values with the "
                             "first layer's, and this model has one layer")
        if self.bigram_embedding < 0:
            raise ValueError(f"bigram_embedding={self.bigram_embedding} must be >= 0 (rows of the table; 0: off; "
                             "vocab_size^2 or more: one row a pair)")


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


def check_starts(starts: torch.Tensor, batch_size: int) -> None:
    """starts must give each of the batch's rows the column its text begins at: int64, (batch_size,), >= 0."""
    if starts.dtype != torch.int64 or tuple(starts.shape) != (batch_size,):
        raise ValueError(f"starts must be an int64 tensor of shape ({batch_size},), one column per row; got "
                         f"{starts.dtype} {tuple(starts.shape)}")
    if starts.numel() and int(starts.min()) < 0:
        raise ValueError(f"starts {int(starts.min())} is negative: a row's text begins at a column >= 0")


def row_positions(slots: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """(B, T) positions of the cache columns slots (T,) in rows whose text begins at columns starts (B,): the
    padding before a row's start at position 0 (the mask hides it)."""
    return (slots[None, :] - starts[:, None]).clamp(min=0)


class InputLayer(nn.Module):
    """The token table and everything positional: the term added to the token embedding (the only place where
    positions enter the residual stream), and what attention needs of the positions (rope's angles, the score
    bias). It holds the encoding's parameters, under the names the encoding gives (input_layer.wpe)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.encoding = encoding_of(config)
        # A plain Parameter (not nn.Embedding) so that building the model draws no random numbers: two variants
        # built under one seed then get identical shared weights.
        self.wte = nn.Parameter(torch.empty(config.vocab_size, config.n_embd))
        for name, parameter in self.encoding.new_parameters().items():
            self.register_parameter(name, parameter)
        for name, buffer in self.encoding.new_buffers().items():
            self.register_buffer(name, buffer, persistent=False)
        # The terms from the previous token (GPT.previous_tokens), where they are on; both start at zero.
        self.smear = Smear(config.n_embd) if config.smear else None
        self.bigram = BigramEmbedding(config.bigram_embedding, config.vocab_size,
                                      config.n_embd) if config.bigram_embedding else None
        self.drop = nn.Dropout(config.dropout)

    def reset_token_table(self, generator: torch.Generator) -> None:
        """wte ~ N(0, 0.02^2), drawn on the CPU from generator: any device gets the same table. On meta (shapes
        only, as the checks before loading build a model) nothing is drawn: the table may be too large to hold."""
        if self.wte.is_meta:
            return
        with torch.no_grad():
            self.wte.copy_(torch.randn(self.wte.shape, generator=generator, device="cpu") * 0.02)

    def reset_position_table(self) -> None:
        self.encoding.reset_parameters(self)

    def forward(self, idx: torch.Tensor, positions: torch.Tensor,
                previous: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """(B, T) token ids at positions (T,), past_length .. past_length+T-1 -> (B, T, n_embd). The caller checks
        the positions (GPT.check_positions) and builds them once per forward, for attention too: unchecked, this runs
        in the compiled decode step as well. previous: GPT.previous_tokens' (ids, present), where smear or the
        bigram embedding is on."""
        # h = wte[X] + wpe[past_length + arange(T)]: the token's row, plus the encoding's term at its position
        # (learned: the row of wpe; sinusoidal: the fixed table's; None where the encoding acts in attention)
        h = F.embedding(idx, self.wte)
        if previous is not None:
            previous_ids, present = previous
            if self.smear is not None:
                h = self.smear(h, F.embedding(previous_ids, self.wte), present)
            if self.bigram is not None:
                h = h + self.bigram(previous_ids, idx, present)
        position_term = self.encoding.input_term(self, positions)
        if position_term is not None:
            h = h + position_term.to(h.dtype)
        return self.drop(h)

    def attention_inputs(self, positions: torch.Tensor, key_length: int, cached: bool,
                         starts: torch.Tensor | None = None, slots: torch.Tensor | None = None,
                         ) -> tuple[torch.Tensor | None, Turns | None, torch.Tensor | None]:
        """(mask, rope, cope) of queries at positions (T,) over keys at 0 .. key_length-1, shared by every layer.

        Without a cache the keys are the queries' own tokens and SDPA's is_causal is right: mask None. With a
        cache, the queries attend to the whole preallocated cache (fixed shapes for the compiled decode step),
        and a bool mask hides every key after the query: those not written yet, or left from an earlier window.
        An encoding with a score bias gets a float mask instead (n_head, T, key_length), -inf after the query, or
        (n_layer, n_head, T, key_length) where each layer has its own bias.
        rope: the encoding's turns of the queries and the keys, or None. cope: CoPE's tables, or None.
        A left-padded batch (starts, see GPT.forward) has positions (B, T), its queries in the cache's columns
        slots (T,), and a mask per row, (B, 1, T, K).
        """
        if starts is not None:
            return self.padded_attention_inputs(positions, key_length, cached, slots, starts)
        # Uncached, the keys are the queries' own tokens (random_positions draws them in training)
        key_pos = torch.arange(key_length, device=positions.device) if cached else positions
        bias = self.encoding.score_bias(self, positions, key_pos)
        if bias is not None:
            mask = bias.masked_fill(key_pos[None, :] > positions[:, None], float("-inf"))
        else:
            mask = key_pos[None, :] <= positions[:, None] if cached else None
        return mask, self.encoding.rotary(self, positions), self.encoding.contextual(self)

    def padded_attention_inputs(self, positions: torch.Tensor, key_length: int, cached: bool, slots: torch.Tensor,
                                starts: torch.Tensor) -> tuple[torch.Tensor, Turns | None, torch.Tensor | None]:
        """attention_inputs for rows whose tokens start at column starts[r] (B,), positions (B, T) counted from
        there: a query sees the keys from its row's start to its own column. A padding query sees itself alone,
        so that its softmax has a key (all -inf would be NaN, and its value would reach the real tokens' sums)."""
        key_slots = torch.arange(key_length, device=slots.device) if cached else slots
        key_pos = (key_slots[None, :] - starts[:, None]).clamp(min=0)  # (B, K); padding at 0: it is hidden
        padding = (key_slots[None, None, :] < starts[:, None, None]) & (key_slots[None, :] != slots[:, None])
        hidden = ((key_slots[None, :] > slots[:, None]) | padding)[:, None]  # (B, 1, T, K)
        bias = self.encoding.score_bias(self, positions, key_pos)
        mask = ~hidden if bias is None else bias.masked_fill(hidden, float("-inf"))
        rope = self.encoding.rotary(self, positions)  # (B, T, head_dim) each: one per row, for all heads
        rope = None if rope is None else tuple(  # or (B, n_head, T, head_dim), one per head already
            (cos, sin) if cos.dim() == 4 else (cos[:, None], sin[:, None]) for cos, sin in rope)
        return mask, rope, self.encoding.contextual(self)

    def crop(self, block_size: int) -> None:
        self.encoding.crop(self, block_size)

    def num_position_params(self) -> int:
        return sum(p.numel() for name, p in self.named_parameters()
                   if name != "wte" and not name.startswith(("smear.", "bigram.")))


def write_at(cache_k: torch.Tensor, cache_v: torch.Tensor, positions: torch.Tensor, k: torch.Tensor,
             v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's cache, cache_k and cache_v (B, n_head, max_length, head_dim), with its new keys and values k, v
    (B, n_head, T, head_dim) written in at positions (T,), in place."""
    # Written by position, not by a slice of Python ints: the shapes stay the same at every step.
    cache_k.index_copy_(2, positions, k.to(cache_k.dtype))
    cache_v.index_copy_(2, positions, v.to(cache_v.dtype))
    return cache_k, cache_v


def write_tokens_at(cache_tokens: torch.Tensor, positions: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """The cache's token ids (B, max_length) with idx (B, T) written in at positions (T,), in place."""
    return cache_tokens.index_copy_(1, positions, idx.to(cache_tokens.dtype))


def write_gates_at(cache_sums: torch.Tensor, positions: torch.Tensor,
                   log_gates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FoX's running sums: one layer's cache (B, n_head, max_length) of c_t = sum_{s<=t} log f_s, continued over
    the new tokens' log-gates (B, n_head, T) at positions (T,) from the sum before the first of them (none before
    column 0), written in place. Returns the new tokens' sums and the whole cache."""
    first = positions[:1]
    before = cache_sums.index_select(2, (first - 1).clamp(min=0))  # (B, n_head, 1), no host sync
    sums = log_gates.cumsum(-1) + torch.where(first > 0, before, torch.zeros_like(before))
    return sums, cache_sums.index_copy_(2, positions, sums)


class KVCache(nn.Module):
    """Keys and values of the tokens seen so far, preallocated for max_length positions in every layer.

    A module only so that its tensors are buffers: torch.compile takes buffers for static addresses, which CUDA
    graphs need, since the compiled decode step writes them in place.
    """

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], tokens: torch.Tensor | None = None,
                 gate_sums: list[torch.Tensor] | None = None):
        super().__init__()
        # One (batch_size, n_head, max_length, head_dim) tensor per layer: the compiled decode step then writes
        # each in place (a slice of one tensor for all layers was copied whole at every step: measured).
        for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
            self.register_buffer(f"k{layer}", k, persistent=False)
            self.register_buffer(f"v{layer}", v, persistent=False)
        # The token ids (batch_size, max_length), where the model reads the previous token (smear, bigram)
        self.register_buffer("tokens", tokens, persistent=False)
        # FoX's running sums of log-gates (batch_size, n_head, max_length) per layer, float32: write_gates_at
        self.fox = gate_sums is not None
        for layer, sums in enumerate(gate_sums or ()):
            self.register_buffer(f"g{layer}", sums, persistent=False)
        self.n_layer = len(keys)
        self.batch_size, self.max_length = keys[0].size(0), keys[0].size(2)
        self.length = 0  # past_length: positions already cached

    def update(self, layer: int, positions: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one layer's new keys and values k, v (B, n_head, T, head_dim) at positions (T,); that layer's whole
        cache, (B, n_head, max_length, head_dim) each."""
        return write_at(read_buffer(self, f"k{layer}"), read_buffer(self, f"v{layer}"), positions, k, v)

    def write_tokens(self, positions: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Write the token ids idx (B, T) at positions (T,); every cached token id, (B, max_length)."""
        return write_tokens_at(read_buffer(self, "tokens"), positions, idx)

    def write_gates(self, layer: int, positions: torch.Tensor,
                    log_gates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """FoX: continue one layer's running sums over the log-gates (B, n_head, T) at positions (T,) (see
        write_gates_at); the new tokens' sums and the whole layer's."""
        return write_gates_at(read_buffer(self, f"g{layer}"), positions, log_gates)

    @property
    def gate_sums(self) -> list[torch.Tensor] | None:
        return [read_buffer(self, f"g{layer}") for layer in range(self.n_layer)] if self.fox else None

    @property
    def keys(self) -> list[torch.Tensor]:
        return [read_buffer(self, f"k{layer}") for layer in range(self.n_layer)]

    @property
    def values(self) -> list[torch.Tensor]:
        return [read_buffer(self, f"v{layer}") for layer in range(self.n_layer)]

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
        tokens, sums = read_buffer(self, "tokens"), self.gate_sums
        row = KVCache([k[:1] for k in self.keys], [v[:1] for v in self.values], None if tokens is None else tokens[:1],
                      None if sums is None else [g[:1] for g in sums])
        row.length = self.length
        return row

    def copy_first_row(self, length: int) -> None:
        """Give every row the first row's cache: one prompt run once for all samples of a batch."""
        for tensor in (*self.keys, *self.values, *(self.gate_sums or ())):
            tensor[1:, :, :length] = tensor[:1, :, :length]
        tokens = read_buffer(self, "tokens")
        if tokens is not None:
            tokens[1:, :length] = tokens[:1, :length]
        self.length = length


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        self.layer = layer  # which of the cache's layers holds this one's keys and values
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)
        self.qk_norm = config.qk_norm
        self.turn = ENCODINGS[config.pos_encoding].turn  # how rotary's turns apply: rope's rotation, PoPE's polar
        # value_residual: this layer's share of the first layer's values, l (modded-nanogpt's self.lamb, 0.5 at the
        # start: its record of 10 November 2024, @Grad62304977 after Zhou et al. 2024's value residual learning)
        self.value_mix = nn.Parameter(torch.full((1,), 0.5)) if config.value_residual and layer > 0 else None

    def forward(self, x: torch.Tensor, slots: torch.Tensor, cache: KVCache | None = None,
                mask: torch.Tensor | None = None, rope: Turns | None = None, cope: torch.Tensor | None = None,
                value_embedding: torch.Tensor | None = None, first_values: torch.Tensor | None = None,
                forget: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, C) in the cache's columns slots (T,); mask (this layer's), rope and cope from
        InputLayer.attention_inputs (None: causal; None: no rotation; None: no CoPE). With a cache, attends to the
        whole cache after writing k and v in those columns. value_embedding (B, T, C): added to the values;
        first_values (B, n_head, T, head_dim): the first layer's, mixed in (value_residual); forget: this layer's
        FoX gate (weight, bias), whose bias of x joins the mask. Returns the output and the values attention used
        for these tokens."""
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if value_embedding is not None:  # cast: under autocast v is bfloat16, and SDPA wants one dtype
            v = v + value_embedding.view(B, T, self.n_head, C // self.n_head).transpose(1, 2).to(v.dtype)
        if self.value_mix is not None:
            mix = self.value_mix.to(v.dtype)
            v = (1 - mix) * v + mix * first_values.to(v.dtype)
        values = v
        if self.qk_norm:
            q, k = rms_norm(q), rms_norm(k)
        if rope is not None:  # before caching: the cache holds turned keys
            (q_cos, q_sin), (k_cos, k_sin) = rope
            q, k = self.turn(q, q_cos, q_sin), self.turn(k, k_cos, k_sin)
        if cache is not None:
            k, v = cache.update(self.layer, slots, k, v)
        if forget is not None:
            mask = self.forget_mask(x, forget, mask, slots, cache)
        if cope is not None:
            y = cope_attention(q, k, v, mask, cope[self.layer], self.dropout if self.training else 0.0)
        else:
            y = attend(q, k, v, mask, self.dropout, self.training, cached=cache is not None)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y)), values

    def forget_mask(self, x: torch.Tensor, forget: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor | None,
                    slots: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        """FoX's float mask (B, n_head, T, K) for the input x (B, T, C): the gates' running sums of these tokens,
        continued from the cache's and written into it, against those of every key, -inf where the bool mask
        (None: causal over these tokens) hides the key."""
        log_gates = log_forget_gates(x, *forget)
        if cache is None:
            query_sums = key_sums = log_gates.cumsum(-1)
        else:
            query_sums, key_sums = cache.write_gates(self.layer, slots, log_gates)
        if mask is None:
            mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool, device=x.device).tril()
        return forget_bias(query_sums, key_sums, mask)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.activation = relu_squared if config.mlp_activation == "relu2" else (
            gelu_tanh if config.gelu == "tanh" else F.gelu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.activation(self.c_fc(x))))


def relu_squared(x: torch.Tensor) -> torch.Tensor:
    return F.relu(x).square()


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dimension, no gain: F.rms_norm's default (torch >= 2.4) written out,
    so that the torch floor stays where it is."""
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + torch.finfo(x.dtype).eps)


class Block(nn.Module):
    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config, layer)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)
        # x0_shortcut: the block's input becomes a x + b x0 (modded-nanogpt's Block.lambdas, (1, 0) at the start:
        # its record of 10 November 2024)
        self.x0_mix = nn.Parameter(torch.tensor([1.0, 0.0])) if config.x0_shortcut else None

    def forward(self, x: torch.Tensor, slots: torch.Tensor, cache: KVCache | None = None,
                mask: torch.Tensor | None = None, rope: Turns | None = None, cope: torch.Tensor | None = None,
                x0: torch.Tensor | None = None, value_embedding: torch.Tensor | None = None,
                first_values: torch.Tensor | None = None,
                forget: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The block's output, and its attention's values (the first layer's feed value_residual's later ones);
        x0, value_embedding, first_values and forget where x0_shortcut, value_embeddings, value_residual and fox
        are on."""
        if self.x0_mix is not None:
            x = self.x0_mix[0] * x + self.x0_mix[1] * x0
        attended, values = self.attn(self.ln_1(x), slots, cache, mask, rope, cope, value_embedding, first_values,
                                     forget)
        x = x + attended
        return x + self.mlp(self.ln_2(x)), values


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.input_layer = InputLayer(config)
        self.blocks = nn.ModuleList(Block(config, layer) for layer in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        # Made on meta (nn.Linear would draw a (vocab_size, n_embd) init from torch's stream, then lose it to the tie:
        # the blocks' initial weights would depend on the vocabulary).
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False, device="meta")
        if config.tie_head:
            self.lm_head.weight = self.input_layer.wte  # weight tying: one Parameter, both uses add to its grad
        else:  # drawn with the token table, from its stream (reset_parameters)
            self.lm_head.weight = nn.Parameter(torch.empty(config.vocab_size, config.n_embd))
        self.value_embeddings = ValueEmbeddings(config.value_embeddings, config.vocab_size, config.n_embd,
                                                config.n_layer) if config.value_embeddings else None
        # A training setting, not part of the architecture (train.py sets it): keep only each Block's input for the
        # backward pass and recompute the Block there, trading about a third more compute for far less memory.
        self.activation_checkpointing = False
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # The token table from a stream of its own and the position parameters last: the blocks' weights then do
        # not depend on the vocabulary's size (a tokenizer cell's) or on the position encoding (a position cell's),
        # nor the token table on the encoding, so the cells of a study really start from the same shared weights.
        token_table_seed = int(torch.randint(2**62, (), device="cpu"))
        for name, p in self.blocks.named_parameters():
            if name.endswith("c_proj.weight"):  # residual projections, scaled as in GPT-2
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.config.n_layer))
                if self.config.zero_init_proj:  # drawn first all the same: the other weights stay as they were
                    nn.init.zeros_(p)
            elif p.dim() == 2:
                nn.init.normal_(p, mean=0.0, std=0.02)
            elif name.endswith("x0_mix"):  # (a, b) of x0_shortcut: the block's input as it was
                with torch.no_grad():
                    p.copy_(torch.tensor([1.0, 0.0]))
            elif name.endswith("value_mix"):  # value_residual's l: half the first layer's values
                nn.init.constant_(p, 0.5)
            elif name.endswith("weight"):  # LayerNorm gain
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)
        nn.init.ones_(self.ln_f.weight)
        if self.ln_f.bias is not None:
            nn.init.zeros_(self.ln_f.bias)
        self.input_layer.reset_position_table()
        token_stream = torch.Generator().manual_seed(token_table_seed)
        self.input_layer.reset_token_table(token_stream)
        if not self.config.tie_head and not self.lm_head.weight.is_meta:  # after the token table: it stays as it was
            with torch.no_grad():
                self.lm_head.weight.copy_(torch.randn(self.lm_head.weight.shape, generator=token_stream) * 0.02)
                if self.config.zero_init_head:  # drawn first all the same: the value embeddings stay as they were
                    self.lm_head.weight.zero_()
        if self.value_embeddings is not None:  # after the head: the token table and the head stay as they were
            self.value_embeddings.reset(token_stream)

    def get_num_params(self, non_embedding: bool = False) -> int:
        """Parameters, the tied head counted once; non_embedding=True leaves out the position parameters (nanoGPT
        leaves out its position table) and the tables that are only looked up, no product (value embeddings,
        bigram, and the token table when the head is a matrix of its own): flops_per_token counts the rest."""
        n_params = sum(p.numel() for p in self.parameters())
        if not non_embedding:
            return n_params
        lookups = [t.weight for t in (self.value_embeddings, self.input_layer.bigram) if t is not None]
        if not self.config.tie_head:  # tied, the table is the head's product too; untied, the head is counted
            lookups.append(self.input_layer.wte)
        return n_params - self.input_layer.num_position_params() - sum(t.numel() for t in lookups)

    def make_cache(self, batch_size: int, max_length: int | None = None, dtype: torch.dtype | None = None) -> KVCache:
        """An empty KV cache for batch_size sequences of up to max_length (default block_size) positions."""
        c, weight = self.config, self.lm_head.weight
        shape = (batch_size, c.n_head, max_length or c.block_size, c.n_embd // c.n_head)
        key_shape = (*shape[:3], self.input_layer.encoding.key_width())  # PoPE's keys are twice as wide
        tokens = torch.zeros(shape[0], shape[2], dtype=torch.long, device=weight.device) if (
            c.smear or c.bigram_embedding) else None  # what the terms from the previous token read
        gate_sums = [torch.zeros(shape[:3], device=weight.device) for _ in range(c.n_layer)] if (
            self.input_layer.encoding.forget_gates(self.input_layer) is not None) else None  # FoX's, float32
        return KVCache(*([torch.zeros(size, device=weight.device, dtype=dtype or weight.dtype)
                          for _ in range(c.n_layer)] for size in (key_shape, shape)), tokens, gate_sums)

    def check_positions(self, seq_len: int, past_length: int) -> None:
        """Raise ValueError for seq_len tokens after past_length cached ones that this model cannot place."""
        if seq_len < 1:
            raise ValueError("empty sequence: idx has T=0 tokens; give at least one token")
        if past_length < 0:
            raise ValueError(f"past_length={past_length} must be >= 0")
        self.input_layer.encoding.check_length(seq_len, past_length)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None,
                starts: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits (B, T, vocab_size) for idx (B, T), and the mean cross-entropy if targets are given.

        With a cache, idx holds the new tokens only: they get positions cache.length .. cache.length+T-1,
        attend to every cached token, and are appended to the cache.
        starts (B,): prompts of different lengths in one batch, left-padded: row r's text begins at column
        starts[r], its token in column c gets position c - starts[r] (as it would alone), and no token attends to
        the padding before it. None: every row starts at column 0.
        """
        if idx.dim() != 2:
            raise ValueError(f"idx must have shape (batch, T), got {tuple(idx.shape)}")
        check_token_ids(idx, self.config.vocab_size)
        past_length = 0 if cache is None else cache.length
        if cache is not None:
            cache.check_room(idx.size(0), idx.size(1))
        self.check_positions(idx.size(1), past_length)
        slots = torch.arange(past_length, past_length + idx.size(1), device=idx.device)  # the cache's columns
        if starts is not None:
            check_starts(starts, idx.size(0))
            positions = row_positions(slots, starts)
        elif self.training and cache is None and self.config.random_positions:
            positions = random_positions(idx.size(1), self.config.random_positions, idx.device)
        else:
            positions = slots
        logits = self.embed_and_run(idx, positions, cache, slots, starts)
        if cache is not None:
            cache.length += idx.size(1)
        loss = None
        if targets is not None:
            check_token_ids(targets, self.config.vocab_size, "target", ignore=-1)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def embed_and_run(self, idx: torch.Tensor, positions: torch.Tensor, cache: KVCache | None, slots: torch.Tensor,
                      starts: torch.Tensor | None) -> torch.Tensor:
        """Logits (B, T, vocab_size) of the tokens idx (B, T) in the cache's columns slots (T,) at positions (T,;
        (B, T) with starts): the input layer, with the previous tokens where it reads them, then blocks_and_head."""
        x = self.input_layer(idx, positions, self.previous_tokens(idx, slots, cache, starts))
        value_embeddings = None if self.value_embeddings is None else self.value_embeddings(idx)
        return self.blocks_and_head(x, positions, cache, slots, starts, value_embeddings)

    def previous_tokens(self, idx: torch.Tensor, slots: torch.Tensor, cache: KVCache | None,
                        starts: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """What smear and the bigram embedding read (None when both are off): the id of the token before each of
        idx (B, T), in the cache's columns slots (T,), (B, T), and whether there is one, (B or 1, T, 1): not for a
        row's first token, in column 0 or, left-padded, at its start. With a cache, idx is written into it first,
        and the token before the first new one is read from it."""
        if self.input_layer.smear is None and self.input_layer.bigram is None:
            return None
        tokens = idx if cache is None else cache.write_tokens(slots, idx)  # uncached, slots are 0 .. T-1
        previous = tokens.index_select(1, (slots - 1).clamp(min=0))
        present = slots[None, :] > (0 if starts is None else starts[:, None])
        return previous, present[..., None]

    def blocks_and_head(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache | None,
                        slots: torch.Tensor | None = None, starts: torch.Tensor | None = None,
                        value_embeddings: list[torch.Tensor | None] | None = None) -> torch.Tensor:
        """Logits (B, T, vocab_size) of the embedded x (B, T, n_embd) at positions (T,), or (B, T) with starts;
        with a cache, writes its keys and values in the columns slots (T,; default: the positions) (the caller
        counts cache.length). value_embeddings: each layer's rows (ValueEmbeddings), where the option is on."""
        slots = positions if slots is None else slots
        key_length = x.size(1) if cache is None else cache.max_length
        mask, rope, cope = self.input_layer.attention_inputs(positions, key_length, cache is not None, starts, slots)
        encoding = self.input_layer.encoding
        per_layer = mask is not None and encoding.per_layer_bias  # FIRE: a bias of each layer's
        gates = encoding.forget_gates(self.input_layer)  # FoX: each layer's gate
        recompute = self.activation_checkpointing and self.training and torch.is_grad_enabled() and cache is None
        x0 = x if self.config.x0_shortcut else None
        first_values = None  # the first layer's values, where value_residual mixes them into the later layers'
        for layer, block in enumerate(self.blocks):
            layer_mask = mask[layer] if per_layer else mask
            layer_rope = rope if encoding.rotates_layer(layer) else None  # layer_rope's NoPE layers: none
            value_embedding = None if value_embeddings is None else value_embeddings[layer]
            forget = None if gates is None else (gates[0][layer], gates[1][layer])
            if recompute:  # non-reentrant: works with autocast, compile and FSDP, and replays the dropout masks
                x, values = checkpoint(block, x, slots, None, layer_mask, layer_rope, cope, x0, value_embedding,
                                       first_values, forget, use_reentrant=False)
            else:
                x, values = block(x, slots, cache, layer_mask, layer_rope, cope, x0, value_embedding, first_values,
                                  forget)
            if layer == 0 and self.config.value_residual:
                first_values = values
        logits = self.lm_head(self.ln_f(x))
        if self.config.logit_softcap:
            return self.config.logit_softcap * torch.tanh(logits / self.config.logit_softcap)
        return logits

    def decode_step(self, token: torch.Tensor, position: torch.Tensor, cache: KVCache,
                    starts: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, vocab_size) of token (B, 1) in the cache's column position (1,), its keys and values written
        there; with starts (B,) (see forward) row r's token is at position - starts[r].

        Fixed shapes, no checks and no host sync, so that it compiles to one graph (fast_decode.compiled_decode_step);
        the caller checks the position and counts cache.length.
        """
        positions = position if starts is None else row_positions(position, starts)
        return self.embed_and_run(token, positions, cache, position, starts)[:, -1]

    def crop_block_size(self, block_size: int, cache: KVCache | None = None) -> None:
        """Shrink the context length, e.g. to finetune GPT-2 (1024) with a smaller block_size; a cache that will
        go on being used must not hold positions the shrunk model no longer has. (extend.py grows it.)"""
        if not 0 < block_size <= self.config.block_size:
            raise ValueError(f"block_size={block_size} must be in [1, {self.config.block_size}]")
        if cache is not None and cache.length > block_size:
            raise ValueError(f"block_size={block_size} is below the {cache.length} positions already cached (0.."
                             f"{cache.length - 1}); crop to at least {cache.length}, or reset the cache first")
        # CoPE's table keeps its rows, and the length trained at is recorded (FIRE's threshold and YaRN's original
        # length read it, not block_size): the cropped model is the same model on the windows it still takes
        kept = {**derived_settings(self.config), "trained_block_size": trained_length(self.config)}
        for name, value in kept.items():
            setattr(self.config, name, value)
        self.config.block_size = block_size
        self.input_layer.crop(block_size)

    def configure_optimizers(self, weight_decay: float, learning_rate: float, betas: tuple[float, float],
                             device_type: str, fused: bool | None = None, params: list[nn.Parameter] | None = None,
                             head_learning_rate: float = 0.0) -> torch.optim.AdamW:
        """AdamW with weight decay on matrices (embeddings included) and none on biases and LayerNorm gains.

        fused: one fused kernel per step; None uses it where this torch has it for device_type, False is foreach.
        params: the parameters it trains; None: all of them (--optimizer=muon gives it those Muon does not train:
        training/optimizers.py). head_learning_rate: an untied head's own rate, in a group of its own named "head"
        (set_learning_rates schedules it); 0: the head is one of the matrices.
        """
        params = [p for p in (self.parameters() if params is None else params) if p.requires_grad]
        head = self.lm_head.weight if head_learning_rate and not self.config.tie_head else None
        groups = [{"params": [p for p in params if p.dim() >= 2 and p is not head], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        if any(p is head for p in params):  # the untied head at its own rate (modded-nanogpt's head group)
            groups.append({"params": [head], "weight_decay": weight_decay, "lr": head_learning_rate, "name": "head"})
        # One fused kernel per step where torch has it for the device (CUDA; CPU and MPS since torch 2.4): on the
        # CPU baby model its step is 2.3x faster than foreach (bench.py's optimizer column). Elsewhere foreach.
        fused = has_fused_adamw(device_type) if fused is None else fused
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused, foreach=None if fused else True)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs (forward + backward) per token at context seq_len, as in the PaLM appendix: 6 per
        parameter, and per layer 6 per width of the scores' product (queries by keys) and of the values' (scores
        by values) at each of seq_len positions. PaLM's 12 n_layer n_embd seq_len where the keys are as wide as the
        values; PoPE's keys (and queries) are twice as wide (key_width), so its scores cost twice theirs.

        Plus the encoding's own products (extra_flops_per_token), its parameters being outside get_num_params:
        CoPE 6 n_layer n_embd cope_positions (each query against every row of its layer's table), FoX 6 n_layer
        n_head (n_embd + 1) (the forget gates' projection). Not counted, as PaLM counts no softmax: work of the
        size of the scores that is not a product (CoPE's gates, their sums and the interpolation; FoX's running
        sums and their differences; a score bias's gather and sum), and the biases computed once per forward pass
        for the whole batch, whose share of a token depends on the batch's sequences (B), which this count does not
        know: the dynamic bias's MLP at seq_len distances, 6/B times its multiply-adds at one distance a token
        (width n_embd/4, depth 2: about 1/(192 n_layer B) of the rest), and FIRE's in every layer at every pair of
        positions, 6 n_layer seq_len fire_width (n_head + 1) / B. For the baby model (config/baby_cpu.py: B = 12,
        seq_len 64) they are 0.01% and 0.4% of this count."""
        n_params = self.get_num_params(non_embedding=True)
        encoding = self.input_layer.encoding
        scores = self.config.n_head * encoding.key_width()
        attention = 6 * self.config.n_layer * (scores + self.config.n_embd) * seq_len
        return 6 * n_params + attention + encoding.extra_flops_per_token()


def has_fused_adamw(device_type: str) -> bool:
    """Whether this torch has a fused AdamW kernel for device_type (CUDA; the CPU and MPS from torch 2.4 on).

    Asked of AdamW itself, which refuses fused=True for a device without one when it is built.
    """
    try:
        torch.optim.AdamW([torch.zeros(1, device=device_type, requires_grad=True)], fused=True)
    except RuntimeError:
        return False
    return True
