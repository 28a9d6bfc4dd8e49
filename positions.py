"""The position encodings, one class each: what each adds to the input, what it does to queries and keys, what it
adds to the attention scores, how long a sequence it can place, and which parameters it has.

Every encoding answers the same questions (the base class answers "nothing" to each: that is NoPE), so model.py
asks the encoding and never compares the name. Adding one = a subclass here + one line in ENCODINGS (README,
"Adding a position encoding"). An encoding's parameters are registered on the model's input layer under the names
it gives (state-dict key input_layer.<name>, e.g. input_layer.wpe): checkpoints keep their keys.

Imports nothing of this repo.
"""

import math

import torch
from torch import nn


class PositionEncoding:
    """No position signal at all (NoPE, Kazemnejad et al. 2023): only the causal mask tells tokens apart."""

    def __init__(self, config):
        self.config = config  # a model.GPTConfig, shared with the model (crop_block_size changes it)

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ValueError for settings this encoding cannot work with."""

    def max_length(self) -> int | None:
        """Positions 0 .. max_length-1 can be placed; None: any position."""
        return None

    def check_length(self, seq_len: int, past_length: int) -> None:
        """Raise ValueError when seq_len tokens after past_length cached ones reach past max_length."""

    def new_parameters(self) -> dict[str, nn.Parameter]:
        """Learned tensors, uninitialised (reset_parameters draws them), registered on the input layer."""
        return {}

    def new_buffers(self) -> dict[str, torch.Tensor]:
        """Constant tensors that move with the model (not saved: built again from the config)."""
        return {}

    def crop(self, held: nn.Module, block_size: int) -> None:
        """Shrink the parameters to a block_size that config.block_size already holds (GPT.crop_block_size)."""

    def reset_parameters(self, held: nn.Module) -> None:
        """Draw the parameters that `held` (the input layer) holds under new_parameters' names."""

    def input_term(self, held: nn.Module, positions: torch.Tensor) -> torch.Tensor | None:
        """(T, n_embd) added to the token embeddings at positions (T,), or None: nothing."""
        return None

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(cos, sin) that turn queries and keys at positions (T,) (see rotate), or None: they stay as they are."""
        return None

    def score_bias(self, held: nn.Module, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor | None:
        """(n_head, T, K) float added to the scaled scores q.k/sqrt(head_dim) of queries at query_pos (T,) over keys
        at key_pos (K,), or None. Only causal pairs (key <= query) are ever read: the model masks the rest."""
        return None


class Learned(PositionEncoding):
    """GPT-2's table: row p of wpe (block_size, n_embd) is added to the token at position p."""

    def max_length(self) -> int:
        return self.config.block_size

    def check_length(self, seq_len: int, past_length: int) -> None:
        if past_length + seq_len > self.config.block_size:
            raise ValueError(
                f"position {past_length + seq_len - 1} is out of range: T={seq_len} new tokens after "
                f"past_length={past_length} cached ones need positions up to {past_length + seq_len - 1}, but the "
                f"learned position table has block_size={self.config.block_size} rows (0..{self.config.block_size - 1})"
                ". Crop the context to block_size tokens; the other pos_encodings have no such cap.")

    def new_parameters(self) -> dict[str, nn.Parameter]:
        # A plain Parameter (not nn.Embedding) so that building it draws no random numbers.
        return {"wpe": nn.Parameter(torch.empty(self.config.block_size, self.config.n_embd))}

    def crop(self, held: nn.Module, block_size: int) -> None:
        held.wpe = nn.Parameter(held.wpe[:block_size].detach().clone())

    def reset_parameters(self, held: nn.Module) -> None:
        nn.init.normal_(held.wpe, mean=0.0, std=self.config.learned_init_std)

    def input_term(self, held: nn.Module, positions: torch.Tensor) -> torch.Tensor:
        return held.wpe[positions]


class Sinusoidal(PositionEncoding):
    """Vaswani et al. 2017: sin and cos of pos / 10000^(2i/n_embd), interleaved, scaled by sinusoidal_amplitude."""

    @classmethod
    def check_config(cls, config) -> None:
        if config.n_embd % 2:
            raise ValueError(f"pos_encoding='sinusoidal' needs an even n_embd, got {config.n_embd}")

    def new_buffers(self) -> dict[str, torch.Tensor]:
        n = self.config.n_embd
        return {"inv_freq": (10000.0 ** (-torch.arange(0, n, 2, dtype=torch.float64) / n)).float()}

    def input_term(self, held: nn.Module, positions: torch.Tensor) -> torch.Tensor:
        angles = positions.float()[:, None] * held.inv_freq[None, :]
        # sin on even features, cos on odd ones, interleaved
        return self.config.sinusoidal_amplitude * torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)


class Rope(PositionEncoding):
    """Rotary embeddings (Su et al. 2021): queries and keys turned by angles proportional to their position."""

    @classmethod
    def check_config(cls, config) -> None:
        if (config.n_embd // config.n_head) % 2:
            raise ValueError(f"pos_encoding='rope' needs an even head_dim, got n_embd/n_head = {config.n_embd}/"
                             f"{config.n_head} = {config.n_embd // config.n_head}; change n_embd or n_head")

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return rope_angles(positions, self.config.n_embd // self.config.n_head, self.config.rope_base)


class Alibi(PositionEncoding):
    """Linear biases (Press et al. 2022): head h's score drops by m_h per token of distance."""

    def score_bias(self, held: nn.Module, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        slopes = torch.tensor(alibi_slopes(self.config.n_head), device=query_pos.device)
        # not scaled by 1/sqrt(head_dim), as in the paper
        return -slopes[:, None, None] * (query_pos[:, None] - key_pos[None, :]).float()


class T5Bias(PositionEncoding):
    """T5's relative position bias (Raffel et al. 2020): one learned scalar per head per distance bucket.

    Distances below num_buckets/2 get a bucket each; longer ones share log-spaced buckets up to max_distance,
    beyond which all fall in the last. Causal: only the distance back to the key counts (T5's decoder). The table
    is shared by all layers, as in T5, and drawn from N(0, n_embd^-1/2), as transformers' T5 does (factor 1).
    """

    @classmethod
    def check_config(cls, config) -> None:
        if not 2 <= config.t5_num_buckets < 2 * config.t5_max_distance:
            raise ValueError(f"t5_num_buckets={config.t5_num_buckets} must be in [2, 2 * t5_max_distance = "
                             f"{2 * config.t5_max_distance}): half the buckets are exact distances below max_distance")

    def new_parameters(self) -> dict[str, nn.Parameter]:
        return {"relative_bias": nn.Parameter(torch.empty(self.config.t5_num_buckets, self.config.n_head))}

    def reset_parameters(self, held: nn.Module) -> None:
        nn.init.normal_(held.relative_bias, mean=0.0, std=self.config.n_embd ** -0.5)

    def score_bias(self, held: nn.Module, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        buckets = t5_bucket(query_pos[:, None] - key_pos[None, :], self.config.t5_num_buckets,
                            self.config.t5_max_distance)
        return held.relative_bias[buckets].permute(2, 0, 1)  # (T, K, n_head) -> (n_head, T, K)


def t5_bucket(distance: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's causal bucket (int64) of each distance query_pos - key_pos; a key after the query counts as 0.

    0 .. exact-1 (exact = num_buckets // 2) are buckets of their own; d >= exact falls in bucket
    exact + floor(log(d / exact) / log(max_distance / exact) * (num_buckets - exact)), at most num_buckets - 1.
    """
    exact = num_buckets // 2
    distance = distance.clamp(min=0)
    # float32, in transformers' order of operations, so that the bucket edges round as theirs do
    log_ratio = torch.log(distance.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
    far = (exact + (log_ratio * (num_buckets - exact)).long()).clamp(max=num_buckets - 1)
    return torch.where(distance < exact, distance, far)


ENCODINGS: dict[str, type[PositionEncoding]] = {
    "learned": Learned, "sinusoidal": Sinusoidal, "rope": Rope, "alibi": Alibi, "none": PositionEncoding,
    "t5": T5Bias,
}
POS_ENCODINGS = tuple(ENCODINGS)  # the names GPTConfig.pos_encoding takes


def encoding_of(config) -> PositionEncoding:
    """The position encoding that config.pos_encoding names, checked against the rest of config."""
    if config.pos_encoding not in ENCODINGS:
        raise ValueError(f"pos_encoding={config.pos_encoding!r} is not one of {', '.join(POS_ENCODINGS)}")
    ENCODINGS[config.pos_encoding].check_config(config)
    return ENCODINGS[config.pos_encoding](config)


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
