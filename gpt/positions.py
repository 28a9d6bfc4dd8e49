"""The position encodings, one class each: what each adds to the input, what it does to queries and keys, what it
adds to the attention scores, how long a sequence it can place, and which parameters it has.

Every encoding answers the same questions (the base class answers "nothing" to each: that is NoPE), so model.py
asks the encoding and never compares the name. Each also says how its context can grow past the block_size it was
trained at (extensions, grow; position_scaling: docs/context_extension.md); extend.py applies that to a model.
Adding one = a subclass here + one line in ENCODINGS (docs/input_layer.md, "Adding a position encoding"). An
encoding's parameters are registered on the model's input layer under the names it gives (state-dict key
input_layer.<name>, e.g. input_layer.wpe): checkpoints keep their keys.

Imports nothing of this repo.
"""

import math

import torch
from torch import nn

# YaRN's ramp (Peng et al. 2023): dimensions turning more than BETA_FAST times over the trained length keep their
# frequency, fewer than BETA_SLOW times are interpolated; the paper's alpha=1, beta=32, transformers' defaults.
YARN_BETA_FAST, YARN_BETA_SLOW = 32.0, 1.0


class PositionEncoding:
    """No position signal at all (NoPE, Kazemnejad et al. 2023): only the causal mask tells tokens apart.

    An encoding holds no tensors of its own: `held`, the input layer, holds its parameters and buffers under the
    names it gives, so that their state-dict keys stay input_layer.<name> (docs/input_layer.md).
    """

    # How train.py --extend_positions may grow this encoding's block_size (extend.py): keep = positions as they are.
    # Every other method is also the position_scaling value that the extended config records.
    extensions: tuple[str, ...] = ("keep",)

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

    def grow(self, held: nn.Module, block_size: int, method: str) -> None:
        """Grow the parameters to block_size positions by one of extensions (extend.py, before the config grows)."""

    def reset_parameters(self, held: nn.Module) -> None:
        """Draw the parameters that `held` (the input layer) holds under new_parameters' names."""

    def input_term(self, held: nn.Module, positions: torch.Tensor) -> torch.Tensor | None:
        """(T, n_embd) added to the token embeddings at positions (T,), or None: nothing."""
        return None

    def rotary(self, held: nn.Module, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(cos, sin) that turn queries and keys at positions (T,) (see rotate), or None: they stay as they are."""
        return None

    def score_bias(self, held: nn.Module, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor | None:
        """(n_head, T, K) float added to the scaled scores q.k/sqrt(head_dim) of queries at query_pos (T,) over keys
        at key_pos (K,), or None. Only causal pairs (key <= query) are ever read: the model masks the rest."""
        return None


class Learned(PositionEncoding):
    """GPT-2's table: row p of wpe (block_size, n_embd) is added to the token at position p."""

    extensions = ("interpolate", "copy")  # the table needs rows for the new positions: grown_table makes them

    @classmethod
    def check_config(cls, config) -> None:
        if config.position_scaling != "none" and not config.trained_block_size:
            raise ValueError(f"position_scaling={config.position_scaling!r} on a learned table only records how "
                             "extend.py grew it (from trained_block_size rows), and trained_block_size=0 says it was "
                             "not grown; grow the table with train.py --extend_positions=interpolate|copy")

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

    def grow(self, held: nn.Module, block_size: int, method: str) -> None:
        held.wpe = nn.Parameter(grown_table(held.wpe.detach(), block_size, method))

    def reset_parameters(self, held: nn.Module) -> None:
        nn.init.normal_(held.wpe, mean=0.0, std=self.config.learned_init_std)

    def input_term(self, held: nn.Module, positions: torch.Tensor) -> torch.Tensor:
        return held.wpe[positions]


class Sinusoidal(PositionEncoding):
    """Vaswani et al. 2017: sin and cos of pos / 10000^(2i/n_embd), interleaved, scaled by sinusoidal_amplitude.
    position_scaling=interpolate reads position p as p / position_scale (position interpolation)."""

    extensions = ("keep", "interpolate")

    @classmethod
    def check_config(cls, config) -> None:
        if config.n_embd % 2:
            raise ValueError(f"pos_encoding='sinusoidal' needs an even n_embd, got {config.n_embd}")

    def new_buffers(self) -> dict[str, torch.Tensor]:
        n = self.config.n_embd
        inv_freq = 10000.0 ** (-torch.arange(0, n, 2, dtype=torch.float64) / n)
        # p * (inv_freq / s) = (p / s) * inv_freq; position_scale is 1.0 unless interpolating (check_position_scaling)
        return {"inv_freq": (inv_freq / self.config.position_scale).float()}

    def input_term(self, held: nn.Module, positions: torch.Tensor) -> torch.Tensor:
        angles = positions.float()[:, None] * held.inv_freq[None, :]
        # sin on even features, cos on odd ones, interleaved
        return self.config.sinusoidal_amplitude * torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(1)


class Rope(PositionEncoding):
    """Rotary embeddings (Su et al. 2021): queries and keys turned by angles proportional to their position; their
    frequencies scaled by position_scaling (rope_frequencies) where the context was extended."""

    extensions = ("keep", "interpolate", "ntk", "yarn")

    @classmethod
    def check_config(cls, config) -> None:
        head_dim = config.n_embd // config.n_head
        if head_dim % 2:
            raise ValueError(f"pos_encoding='rope' needs an even head_dim, got n_embd/n_head = {config.n_embd}/"
                             f"{config.n_head} = {head_dim}; change n_embd or n_head")
        if config.position_scaling == "ntk" and head_dim < 4:  # the base's exponent d/(d-2) needs d > 2
            raise ValueError(f"position_scaling='ntk' needs head_dim >= 4, got {head_dim}; change n_embd or n_head")

    def new_buffers(self) -> dict[str, torch.Tensor]:
        if self.config.position_scaling == "none":
            return {}  # unscaled angles are computed as they always were (rope_angles): old runs resume bit for bit
        return {"rope_inv_freq": rope_frequencies(self.config).float()}

    def rotary(self, held: nn.Module, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.config.position_scaling == "none":
            return rope_angles(positions, self.config.n_embd // self.config.n_head, self.config.rope_base)
        return rotary_cos_sin(positions, held.rope_inv_freq, yarn_attention_factor(self.config))


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
    check_position_scaling(config)
    ENCODINGS[config.pos_encoding].check_config(config)
    return ENCODINGS[config.pos_encoding](config)


def scalings_of(pos_encoding: str) -> tuple[str, ...]:
    """The position_scaling values an encoding takes: none, and each of its extensions but keep."""
    return ("none", *(m for m in ENCODINGS[pos_encoding].extensions if m != "keep"))


def check_position_scaling(config) -> None:
    """position_scaling applies to the encoding, position_scale is a factor > 0 (1.0 unless scaling), and
    trained_block_size (0: never extended) is not past block_size."""
    scalings = scalings_of(config.pos_encoding)
    if config.position_scaling not in scalings:
        raise ValueError(f"position_scaling={config.position_scaling!r} does not apply to pos_encoding="
                         f"{config.pos_encoding!r}, which takes {', '.join(scalings)}")
    if not 0 < config.position_scale < math.inf:  # also catches NaN
        raise ValueError(f"position_scale={config.position_scale} must be a finite factor > 0 (the factor the "
                         "context is extended by: 2.0 reads position p as p/2)")
    if config.position_scaling == "none" and config.position_scale != 1.0:
        raise ValueError(f"position_scale={config.position_scale} does nothing with position_scaling='none'; give "
                         f"position_scaling={'|'.join(scalings[1:]) or 'none'} too, or leave position_scale at 1.0")
    if not 0 <= config.trained_block_size <= config.block_size:
        raise ValueError(f"trained_block_size={config.trained_block_size} must be in [0, block_size="
                         f"{config.block_size}]: the block_size the model was trained at before its context grew "
                         "(0: it never grew)")


def rope_angles(positions: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, head_dim), float32, of the rotary angles at positions (T,), in the rotate-half layout:
    feature i and feature i + head_dim/2 form a pair, turned by pos * base^(-2i/head_dim)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    return rotary_cos_sin(positions, inv_freq)


def rotary_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor,
                   attention_factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, head_dim) of positions (T,) times inv_freq (head_dim/2,), float32, both multiplied by
    attention_factor: queries and keys both turned by them scale every score q.k by attention_factor^2."""
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    if attention_factor == 1.0:
        return angles.cos(), angles.sin()
    return angles.cos() * attention_factor, angles.sin() * attention_factor


def rope_frequencies(config) -> torch.Tensor:
    """rope's inv_freq (head_dim/2,), float64, under config.position_scaling with s = position_scale, d = head_dim,
    b = rope_base, theta_i = b^(-2i/d) (docs/context_extension.md):
      none         theta_i
      interpolate  theta_i / s: position p turns as p/s does unscaled (Chen et al. 2023)
      ntk          (b s^(d/(d-2)))^(-2i/d): the base grows, the lowest frequency is divided by s, the highest kept
      yarn         theta_i / s where dimension i turns fewer than YARN_BETA_SLOW times over the trained length L
                   (trained_block_size, else block_size), theta_i where more than YARN_BETA_FAST, linear in i
                   between (Peng et al. 2023, as their code and transformers' _compute_yarn_parameters do)
    """
    d, base, s = config.n_embd // config.n_head, config.rope_base, config.position_scale
    exponents = torch.arange(0, d, 2, dtype=torch.float64) / d
    theta = base ** -exponents
    if config.position_scaling == "interpolate":
        return theta / s
    if config.position_scaling == "ntk":
        return (base * s ** (d / (d - 2))) ** -exponents
    if config.position_scaling == "yarn":
        low, high = yarn_correction_range(d, base, config.trained_block_size or config.block_size)
        ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / max(high - low, 0.001)).clamp(0, 1)
        return theta / s * ramp + theta * (1 - ramp)  # ramp 0: extrapolated (kept), 1: interpolated
    return theta


def yarn_correction_range(head_dim: int, base: float, length: int) -> tuple[int, int]:
    """The dimensions where YaRN's ramp starts and ends: dimension i turns length * theta_i / (2 pi) times over
    the trained length; solved for YARN_BETA_FAST and YARN_BETA_SLOW turns, rounded outwards, within [0, d-1]."""
    def dimension(turns: float) -> float:
        return head_dim * math.log(length / (turns * 2 * math.pi)) / (2 * math.log(base))

    return max(math.floor(dimension(YARN_BETA_FAST)), 0), min(math.ceil(dimension(YARN_BETA_SLOW)), head_dim - 1)


def yarn_attention_factor(config) -> float:
    """What YaRN multiplies cos and sin by: sqrt(1/t) = 0.1 ln(s) + 1 for s > 1 (the paper's temperature t, on
    queries and keys both), 1 otherwise; 1 for every other scaling."""
    s = config.position_scale
    return 0.1 * math.log(s) + 1.0 if config.position_scaling == "yarn" and s > 1 else 1.0


def grown_table(table: torch.Tensor, rows: int, method: str) -> torch.Tensor:
    """A learned table (B, n_embd) grown to rows >= B rows, in its dtype (docs/context_extension.md):
      interpolate  row p is the table read at x = p * B / rows (position interpolation's p/s, s = rows / B),
                   linearly between trained rows floor(x) and floor(x)+1; past the last row (x > B-1) it is row B-1
      copy         row p is trained row p mod B: the table tiled, as Longformer grew RoBERTa's 512 positions
    Both keep row 0; for a whole s, interpolate's row s*k is trained row k.
    """
    old = table.size(0)
    if method == "copy":
        return table[torch.arange(rows, device=table.device) % old].clone()
    x = torch.arange(rows, dtype=torch.float64, device=table.device) * old / rows
    low = x.floor().long().clamp(max=old - 1)
    high = (low + 1).clamp(max=old - 1)  # past the last row both ends are the last row: it is held
    weight = (x - low)[:, None]
    return ((1 - weight) * table[low].double() + weight * table[high].double()).to(table.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Turn each pair (x_i, x_{i+head_dim/2}) of x (B, n_head, T, head_dim) by the angles of rope_angles."""
    half = x.size(-1) // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    # x * cos promotes bf16 (autocast) to float32: the rotation is computed in float32 and rounded once
    return (x * cos + turned * sin).to(x.dtype)


def alibi_slopes(n_head: int) -> list[float]:
    """ALiBi's slope m_h of each head, as in the paper's code: for n_head a power of two, 2^(-8(h+1)/n_head);
    otherwise those of the largest power of two c < n_head, then every other slope of 2c heads."""
    c = 1 << (n_head.bit_length() - 1)
    slopes_c = [2.0 ** (-8.0 * (h + 1) / c) for h in range(c)]
    slopes_2c = [2.0 ** (-8.0 * (h + 1) / (2 * c)) for h in range(2 * c)]
    return slopes_c + slopes_2c[0::2][:n_head - c]
