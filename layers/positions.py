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

Turns = tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

# YaRN's ramp (Peng et al. 2023): dimensions turning more than BETA_FAST times over the trained length keep their
# frequency, fewer than BETA_SLOW times are interpolated; the paper's alpha=1, beta=32, transformers' defaults.
YARN_BETA_FAST, YARN_BETA_SLOW = 32.0, 1.0
# KERPLE's parameters are drawn from U(0, top) and held at least KERPLE_EPS, as the paper's code does (chijames/KERPLE,
# megatron/mpu/layers.py): the log kernel's r1 ~ U(0, 2), r2 ~ U(0, 1); the power kernel's r1 ~ U(0, 1), r2 ~ U(0, 2).
KERPLE_TOPS = {"log": (2.0, 1.0), "power": (1.0, 2.0)}
KERPLE_EPS = 1e-2
FIRE_C_INIT = 0.1  # FIRE's c in psi(x) = log(c x + 1) at initialisation (the paper's listing)
# random_positions' largest range: float32 (rope's and sinusoidal's angles) holds whole numbers exactly up to 2^24,
# and each training step draws a permutation of the whole range (random_positions): at most 128 MiB of int64 here.
RANDOM_POSITIONS_MAX = 2**24


class PositionEncoding:
    """No position signal at all (NoPE, Kazemnejad et al. 2023): only the causal mask tells tokens apart.

    An encoding holds no tensors of its own: `held`, the input layer, holds its parameters and buffers under the
    names it gives, so that their state-dict keys stay input_layer.<name> (docs/input_layer.md).
    """

    # How train.py --extend_positions may grow this encoding's block_size (extend.py): keep = positions as they are.
    # Every other method is also the position_scaling value that the extended config records.
    extensions: tuple[str, ...] = ("keep",)
    settings: tuple[str, ...] = ()  # the GPTConfig fields this encoding reads (any other encoding's do nothing here)
    randomizable = False  # whether random_positions (Ruoss et al. 2023) applies: positions enter as absolute ones
    per_layer_bias = False  # whether score_bias gives each layer its own bias (n_layer first)

    def __init__(self, config):
        self.config = config  # a model.GPTConfig, shared with the model (crop_block_size changes it)

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ValueError for settings this encoding cannot work with."""

    @classmethod
    def derived_settings(cls, config) -> dict[str, object]:
        """The settings whose 0 stands for a length derived from the block_size, as that length: written out before
        the block_size changes (extend.py, GPT.crop_block_size) and in a checkpoint, so that the model keeps its
        shape and function whatever block_size it is given later."""
        return {}

    @classmethod
    def check_random_positions(cls, config) -> None:
        """random_positions is 0 (off) or a range of at least block_size, for an encoding it applies to."""
        if config.random_positions and not cls.randomizable:
            raise ValueError(f"random_positions={config.random_positions} does not apply to pos_encoding="
                             f"{config.pos_encoding!r} (it takes learned, sinusoidal and the rotary encodings); "
                             "give random_positions=0")
        if config.random_positions > RANDOM_POSITIONS_MAX:  # was an allocator's traceback at the first step
            raise ValueError(f"random_positions={config.random_positions} is past 2**24 = {RANDOM_POSITIONS_MAX:,}: "
                             "rope's and sinusoidal's angles take positions as float32, exact only up to there, and "
                             "each step draws a permutation of the whole range ("
                             f"{8 * config.random_positions / 1e9:,.1f} GB of int64); give random_positions <= "
                             f"{RANDOM_POSITIONS_MAX}")
        if config.random_positions and config.random_positions < config.block_size:
            raise ValueError(f"random_positions={config.random_positions} must be at least block_size="
                             f"{config.block_size}: training draws block_size distinct positions from "
                             f"0..random_positions-1; give 0 (off) or a range >= {config.block_size}")

    @classmethod
    def reach(cls, config) -> int:
        """The length the model's positions cover, which an extension's factor is relative to (extend.py): its
        block_size, or, where it was cropped, the length it had before: the one trained at (trained_length) times
        the factor it already grew by. A crop keeps every position these encodings compute, so a cropped model
        extended is the uncropped one extended."""
        return max(config.block_size, round(config.position_scale * trained_length(config)))

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
        """(T, n_embd) added to the token embeddings at positions (T,), or None: nothing. Positions (B, T), one row
        per prompt of a left-padded batch, give (B, T, n_embd); so for every method below."""
        return None

    def rotary(self, held: nn.Module, positions: torch.Tensor) -> Turns | None:
        """((cos, sin) of the queries, (cos, sin) of the keys) at positions (T,), each (T, head_dim), or
        (n_head, T, head_dim) where the heads turn apart (head_rope, pope's keys), that turn them (turn); or None:
        they stay as they are."""
        return None

    @staticmethod
    def turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Queries or keys x (B, n_head, T, head_dim) turned by their side of rotary: rope's rotation (rotate)."""
        return rotate(x, cos, sin)

    def rotates_layer(self, layer: int) -> bool:
        """Whether attention layer `layer` (from 0) turns its queries and keys by rotary."""
        return True

    def key_width(self) -> int:
        """The width of a head's queries and keys once turned, as attention reads them and the KV cache holds the
        keys: head_dim."""
        return self.config.n_embd // self.config.n_head

    def extra_flops_per_token(self) -> int:
        """Training FLOPs a token spends in this encoding's own products, in GPT.flops_per_token's convention (6
        per multiply-add: 2 forward, 4 backward), beside those flops_per_token counts already (the blocks'
        parameters, the scores and values of attention; the encoding's parameters are not among them): 0. Products
        run once per forward pass whatever its batch and elementwise work (gates, sums, gathers, the softmax's
        kin) are not counted (flops_per_token says why)."""
        return 0

    def contextual(self, held: nn.Module) -> torch.Tensor | None:
        """CoPE's position embeddings (n_layer, head_dim, positions), which attention reads with the scores
        (cope_scores); None: attention is SDPA's."""
        return None

    def forget_gates(self, held: nn.Module) -> tuple[torch.Tensor, torch.Tensor] | None:
        """FoX's gate projections, weights (n_layer, n_head, n_embd) and biases (n_layer, n_head), that each
        attention layer applies to its own input for a bias of the tokens (log_forget_gates); None: no gate."""
        return None

    def score_bias(self, held: nn.Module, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor | None:
        """(n_head, T, K) float added to the scaled scores q.k/sqrt(head_dim) of queries at query_pos (T,) over keys
        at key_pos (K,), or (n_layer, n_head, T, K) where each layer has its own (per_layer_bias); or None; (B, T) and
        (B, K) positions give (B, n_head, T, K) and (n_layer, B, n_head, T, K). Only causal pairs (key <= query) are
        ever read: the model masks the rest."""
        return None


class Learned(PositionEncoding):
    """GPT-2's table: row p of wpe (block_size, n_embd) is added to the token at position p. Trained with
    random_positions=N, the table has N rows, and places positions 0..N-1."""

    extensions = ("interpolate", "copy")  # the table needs rows for the new positions: grown_table makes them
    settings = ("learned_init_std",)
    randomizable = True

    @classmethod
    def check_config(cls, config) -> None:
        if config.position_scaling != "none" and not config.trained_block_size:
            raise ValueError(f"position_scaling={config.position_scaling!r} on a learned table only records how "
                             "extend.py grew it (from trained_block_size rows), and trained_block_size=0 says it was "
                             "not grown; grow the table with train.py --extend_positions=interpolate|copy")

    @classmethod
    def reach(cls, config) -> int:
        # the table's rows: a crop cut the others, and grow interpolates or tiles the rows it has
        return config.block_size

    def max_length(self) -> int:
        return max(self.config.block_size, self.config.random_positions)

    def check_length(self, seq_len: int, past_length: int) -> None:
        rows, what = self.max_length(), ("random_positions" if self.config.random_positions else "block_size")
        if past_length + seq_len > rows:
            raise ValueError(
                f"position {past_length + seq_len - 1} is out of range: T={seq_len} new tokens after "
                f"past_length={past_length} cached ones need positions up to {past_length + seq_len - 1}, but the "
                f"learned position table has {what}={rows} rows (0..{rows - 1}). Crop the context to {rows} tokens; "
                "the other pos_encodings have no such cap.")

    def new_parameters(self) -> dict[str, nn.Parameter]:
        # A plain Parameter (not nn.Embedding) so that building it draws no random numbers.
        return {"wpe": nn.Parameter(torch.empty(self.max_length(), self.config.n_embd))}

    def crop(self, held: nn.Module, block_size: int) -> None:
        held.wpe = nn.Parameter(held.wpe[:max(block_size, self.config.random_positions)].detach().clone())

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
    settings = ("sinusoidal_amplitude",)
    randomizable = True

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
        angles = positions.float()[..., None] * held.inv_freq
        # sin on even features, cos on odd ones, interleaved
        return self.config.sinusoidal_amplitude * torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)


class Rope(PositionEncoding):
    """Rotary embeddings (Su et al. 2021): queries and keys turned by angles proportional to their position; their
    frequencies scaled by position_scaling (rope_frequencies) where the context was extended."""

    extensions = ("keep", "interpolate", "ntk", "yarn")
    settings = ("rope_base",)
    randomizable = True

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

    def rotary(self, held: nn.Module, positions: torch.Tensor) -> Turns:
        if not hasattr(held, "rope_inv_freq"):  # unscaled rope (new_buffers)
            turn = rope_angles(positions, self.config.n_embd // self.config.n_head, self.config.rope_base)
        else:  # scaled rope, or a subclass's own frequencies (their position_scaling is none: a factor of 1)
            turn = rotary_cos_sin(positions, held.rope_inv_freq, yarn_attention_factor(self.config))
        return turn, turn  # queries and keys turn alike


class PartialRope(Rope):
    """Partial rotary (GPT-NeoX's rotary_pct): r = head_dim * partial_rope_fraction of each head's dimensions turned
    as rope over r dimensions (frequencies base^(-2i/r)); the others carry no position. NeoX turns features
    0..r-1 in pairs (i, i + r/2); here the turned pairs are (i, i + head_dim/2) for i < r/2: the same model up to
    a fixed order of each head's features, which the learned projections absorb."""

    extensions = ("keep",)
    settings = ("rope_base", "partial_rope_fraction")

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        head_dim = config.n_embd // config.n_head
        turned = head_dim * config.partial_rope_fraction
        if not (0 < config.partial_rope_fraction <= 1 and turned == int(turned) and int(turned) % 2 == 0):
            raise ValueError(f"partial_rope_fraction={config.partial_rope_fraction} must turn an even number of each "
                             f"head's {head_dim} dimensions, at least 2 (0.25 turns {head_dim / 4:g})")

    def new_buffers(self) -> dict[str, torch.Tensor]:
        head_dim = self.config.n_embd // self.config.n_head
        turned = round(head_dim * self.config.partial_rope_fraction)
        inv_freq = torch.zeros(head_dim // 2, dtype=torch.float64)
        inv_freq[:turned // 2] = self.config.rope_base ** (-torch.arange(0, turned, 2, dtype=torch.float64) / turned)
        return {"rope_inv_freq": inv_freq.float()}


class PRope(Rope):
    """p-RoPE (Barbero et al. 2024, section 6): rope's p_rope_fraction highest frequencies, base^(-2i/head_dim) for
    i < p_rope_fraction * head_dim/2, kept; the lowest ones set to 0, so that their pairs carry no position."""

    extensions = ("keep",)
    settings = ("rope_base", "p_rope_fraction")

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        pairs = config.n_embd // config.n_head // 2
        if not (0 < config.p_rope_fraction <= 1 and pairs * config.p_rope_fraction >= 1):
            raise ValueError(f"p_rope_fraction={config.p_rope_fraction} must keep at least one of each head's {pairs} "
                             "frequencies and at most all: a fraction in (0, 1]")

    def new_buffers(self) -> dict[str, torch.Tensor]:
        inv_freq = rope_frequencies(self.config)  # rope's own, position_scaling being none
        inv_freq[p_rope_kept(self.config):] = 0.0
        return {"rope_inv_freq": inv_freq.float()}


def p_rope_kept(config) -> int:
    """How many of each head's head_dim/2 frequencies p-RoPE keeps: the fraction's share, rounded down."""
    return math.floor(config.n_embd // config.n_head // 2 * config.p_rope_fraction)


class XPos(Rope):
    """xPos (Sun et al. 2022, section 3.2): rope with queries also scaled by zeta^(n / xpos_scale_base) and keys by
    zeta^(-m / xpos_scale_base) at positions n and m, so that a score decays as zeta^((n - m) / scale_base) with the
    distance; zeta_i = (2i/head_dim + gamma) / (1 + gamma) per turned pair i. The positions are absolute ones, the
    same for a token whether it was cached or not (torchscale centres them on each sequence's middle, which a
    cache cannot do); so the keys' scale grows with the position, and max_length is where it passes 2^32."""

    extensions = ("keep",)
    settings = ("rope_base", "xpos_gamma", "xpos_scale_base")

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        for name in ("xpos_gamma", "xpos_scale_base"):
            if not 0 < getattr(config, name) < math.inf:
                raise ValueError(f"{name}={getattr(config, name)} must be a finite number > 0")
        trained = max(config.block_size, config.random_positions)  # the positions training places
        if xpos_max_length(config) < trained:  # was the first evaluation's traceback
            ratio = math.log((1 + config.xpos_gamma) / config.xpos_gamma) / (32 * math.log(2))
            raise ValueError(f"xpos_scale_base={config.xpos_scale_base:g} lets xPos place {xpos_max_length(config)} "
                             f"positions (max_length: past it the keys' scale passes 2^32, xpos_gamma="
                             f"{config.xpos_gamma:g}), fewer than "
                             f"{'random_positions' if config.random_positions else 'block_size'}={trained}; give "
                             f"xpos_scale_base >= {math.ceil(trained * ratio)} (the paper's: 512)")

    def new_buffers(self) -> dict[str, torch.Tensor]:
        head_dim, gamma = self.config.n_embd // self.config.n_head, self.config.xpos_gamma
        zeta = (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim + gamma) / (1 + gamma)
        return {"rope_inv_freq": rope_frequencies(self.config).float(), "xpos_log_zeta": zeta.log().float()}

    def max_length(self) -> int:
        return xpos_max_length(self.config)

    def check_length(self, seq_len: int, past_length: int) -> None:
        if past_length + seq_len > self.max_length():
            raise ValueError(f"position {past_length + seq_len - 1} is past xPos's max_length={self.max_length()}: "
                             f"there its keys' scale passes 2^32 (xpos_scale_base={self.config.xpos_scale_base:g}, "
                             f"xpos_gamma={self.config.xpos_gamma:g}); crop the context or raise xpos_scale_base")

    def rotary(self, held: nn.Module, positions: torch.Tensor) -> Turns:
        cos, sin = rotary_cos_sin(positions, held.rope_inv_freq)
        scale = (positions.float()[..., None] / self.config.xpos_scale_base * held.xpos_log_zeta).exp()
        scale = torch.cat((scale, scale), dim=-1)
        return (cos * scale, sin * scale), (cos / scale, sin / scale)


def xpos_max_length(config) -> int:
    """The positions xPos places, 0 .. max_length-1: there the keys' scale 1/zeta^(n / xpos_scale_base) of the
    smallest zeta, gamma / (1 + gamma) (the one that grows fastest), passes 2^32."""
    gamma = config.xpos_gamma
    return math.floor(32 * math.log(2) * config.xpos_scale_base / math.log((1 + gamma) / gamma))


# ---- the encodings x-transformers and HF transformers added: rope on some heads, NoPE layers, PoPE -----------------


class HeadRope(Rope):
    """Rope on some heads (x-transformers' rotate_num_heads): the first rope_heads heads of every layer turned as rope
    turns them, the others not at all (NoPE heads: only the causal mask orders their tokens). x-transformers turns
    the last ones: the same model up to the order of the heads, which the projections absorb."""

    settings = ("rope_base", "rope_heads")

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        if not 0 <= config.rope_heads < config.n_head or rope_heads_turned(config) < 1:
            raise ValueError(f"rope_heads={config.rope_heads} must be in [1, n_head={config.n_head}) or 0 (n_head // 2 "
                             f"= {config.n_head // 2}): the heads of each layer rope turns, the others none; all of "
                             "them is pos_encoding=rope, none pos_encoding=none")

    def rotary(self, held: nn.Module, positions: torch.Tensor) -> Turns:
        """Rope's turns (T, head_dim) made one per head, (n_head, T, head_dim): cos 1 and sin 0, which leave x as it
        is exactly (rotate), on the heads past rope_heads."""
        (cos, sin), _ = super().rotary(held, positions)
        turned = (torch.arange(self.config.n_head, device=positions.device) < rope_heads_turned(self.config))
        turned = turned[:, None, None]
        cos, sin = torch.where(turned, cos.unsqueeze(-3), 1.0), torch.where(turned, sin.unsqueeze(-3), 0.0)
        return (cos, sin), (cos, sin)


def rope_heads_turned(config) -> int:
    """How many heads of each layer head_rope turns: rope_heads, or n_head // 2 for 0."""
    return config.rope_heads or config.n_head // 2


class LayerRope(Rope):
    """Rope with NoPE layers (HF's no_rope_layers: Llama 4, SmolLM3): layers nope_every - 1, 2 nope_every - 1, ...
    (counted from 0) turn nothing, the others turn as rope. HF's default no_rope_layers[i] = int((i + 1) %
    no_rope_layer_interval != 0), 1 for a rope layer, makes the same layers NoPE (interval 4: layers 3, 7, 11, ...)."""

    settings = ("rope_base", "nope_every")

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        if not 2 <= config.nope_every <= config.n_layer:
            raise ValueError(f"nope_every={config.nope_every} must be in [2, n_layer={config.n_layer}]: every "
                             "nope_every-th layer has no rope (HF's no_rope_layer_interval: 4); 1 (every layer) is "
                             "pos_encoding=none, past n_layer (none) pos_encoding=rope")

    def rotates_layer(self, layer: int) -> bool:
        return (layer + 1) % self.config.nope_every != 0


def polar(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """PoPE's queries or keys (B, n_head, T, 2 head_dim) of x (B, n_head, T, head_dim): component c of a head a
    complex number of magnitude softplus(x_c) and phase angle_c, given by its cosine and sine (each (T, head_dim) or
    (n_head, T, head_dim)), as real parts then imaginary parts. Computed in float32 and rounded once, as rotate."""
    magnitude = nn.functional.softplus(x.float())
    return torch.cat((magnitude * cos, magnitude * sin), dim=-1).to(x.dtype)


class Pope(PositionEncoding):
    """PoPE (Gopalakrishnan et al. 2025): content sets the magnitude, position the phase. Component c of a head's
    query at position n is softplus(q_c) e^(i n theta_c), of its key at m softplus(k_c) e^(i (m theta_c + delta_c)),
    theta_c = rope_base^(-c/head_dim) for c < head_dim (head_dim frequencies, not rope's head_dim/2 pairs); the
    score is Re(q^H k) / sqrt(head_dim) = sum_c softplus(q_c) softplus(k_c) cos((m - n) theta_c + delta_c) /
    sqrt(head_dim). delta (n_head, head_dim) is learned from 0 and read clamped to [-2 pi, 0], one for all layers,
    as x-transformers' polar_pos_emb. Attention reads the queries and keys as real vectors of 2 head_dim (polar), so
    the KV cache holds keys twice as wide as the values; SDPA's 1/sqrt(2 head_dim) becomes the paper's
    1/sqrt(head_dim) by the queries' factor sqrt(2)."""

    settings = ("rope_base",)
    randomizable = True
    turn = staticmethod(polar)

    def key_width(self) -> int:
        return 2 * (self.config.n_embd // self.config.n_head)

    def new_parameters(self) -> dict[str, nn.Parameter]:
        return {"pope_bias": nn.Parameter(torch.empty(self.config.n_head, self.config.n_embd // self.config.n_head))}

    def reset_parameters(self, held: nn.Module) -> None:
        nn.init.zeros_(held.pope_bias)  # as x-transformers: the keys' phase is the position's alone at first

    def new_buffers(self) -> dict[str, torch.Tensor]:
        head_dim = self.config.n_embd // self.config.n_head
        inv_freq = self.config.rope_base ** (-torch.arange(head_dim, dtype=torch.float64) / head_dim)
        return {"pope_inv_freq": inv_freq.float()}

    def rotary(self, held: nn.Module, positions: torch.Tensor) -> Turns:
        """The queries' (T, head_dim), times sqrt(2) (the score's scale), and the keys' (n_head, T, head_dim), their
        phase moved by each head's delta; (B, T, ...) and (B, n_head, T, ...) for positions (B, T)."""
        angles = positions.float()[..., None] * held.pope_inv_freq
        key_angles = angles.unsqueeze(-3) + held.pope_bias.clamp(-2 * math.pi, 0.0)[:, None, :]
        return (angles.cos() * math.sqrt(2), angles.sin() * math.sqrt(2)), (key_angles.cos(), key_angles.sin())


class Alibi(PositionEncoding):
    """Linear biases (Press et al. 2022): head h's score drops by m_h per token of distance."""

    def score_bias(self, held: nn.Module, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        slopes = torch.tensor(alibi_slopes(self.config.n_head), device=query_pos.device)
        # not scaled by 1/sqrt(head_dim), as in the paper
        return -slopes[:, None, None] * distances(query_pos, key_pos).unsqueeze(-3).float()


class T5Bias(PositionEncoding):
    """T5's relative position bias (Raffel et al. 2020): one learned scalar per head per distance bucket.

    Distances below num_buckets/2 get a bucket each; longer ones share log-spaced buckets up to max_distance,
    beyond which all fall in the last. Causal: only the distance back to the key counts (T5's decoder). The table
    is shared by all layers, as in T5, and drawn from N(0, n_embd^-1/2), as transformers' T5 does (factor 1).
    """

    settings = ("t5_num_buckets", "t5_max_distance")

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
        buckets = t5_bucket(distances(query_pos, key_pos), self.config.t5_num_buckets, self.config.t5_max_distance)
        return held.relative_bias[buckets].movedim(-1, -3)  # (T, K, n_head) -> (n_head, T, K)


class Kerple(PositionEncoding):
    """KERPLE (Chi et al. 2022, section 4): a learned conditionally positive definite kernel of the distance d = n - m
    per head, added to the scaled scores: kerple_kernel=log, -r1 log(1 + r2 d); power, -r1 d^r2 (0 < r2 <= 2).
    One set for all layers, as the paper's code builds one and gives it to every layer; r1 and r2 are held at
    least KERPLE_EPS (and r2 at most 2), as that code clamps them in each forward."""

    settings = ("kerple_kernel",)

    @classmethod
    def check_config(cls, config) -> None:
        if config.kerple_kernel not in ("log", "power"):
            raise ValueError(f"kerple_kernel={config.kerple_kernel!r} must be log or power")

    def new_parameters(self) -> dict[str, nn.Parameter]:
        n_head = self.config.n_head
        return {"kerple_r1": nn.Parameter(torch.empty(n_head)), "kerple_r2": nn.Parameter(torch.empty(n_head))}

    def reset_parameters(self, held: nn.Module) -> None:
        top_r1, top_r2 = KERPLE_TOPS[self.config.kerple_kernel]
        nn.init.uniform_(held.kerple_r1, 0.0, top_r1)
        nn.init.uniform_(held.kerple_r2, 0.0, top_r2)

    def score_bias(self, held: nn.Module, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        r1, r2 = kerple_parameters(held, self.config.kerple_kernel)
        distance = distances(query_pos, key_pos).clamp(min=0).unsqueeze(-3).float()
        if self.config.kerple_kernel == "log":
            return -r1[:, None, None] * torch.log1p(r2[:, None, None] * distance)
        return -r1[:, None, None] * distance ** r2[:, None, None]


def kerple_parameters(held: nn.Module, kernel: str) -> tuple[torch.Tensor, torch.Tensor]:
    """KERPLE's r1 and r2 (n_head,) as the bias reads them: at least KERPLE_EPS, r2 at most 2 for the power
    kernel. While training, the parameters themselves are clamped in place, as the paper's code does, so that a
    parameter pushed below its floor stays there and keeps its gradient."""
    high = 2.0 if kernel == "power" else None
    if held.training and torch.is_grad_enabled():
        with torch.no_grad():
            held.kerple_r1.clamp_(min=KERPLE_EPS)
            held.kerple_r2.clamp_(min=KERPLE_EPS, max=high)
        return held.kerple_r1, held.kerple_r2
    return held.kerple_r1.clamp(min=KERPLE_EPS), held.kerple_r2.clamp(min=KERPLE_EPS, max=high)


class Fire(PositionEncoding):
    """FIRE (Li et al. 2023, section 3.2): a learned bias b(i, j) = f(psi(i - j) / psi(max(L, i))) per head,
    psi(x) = log(c x + 1), f an MLP 1 -> fire_width -> n_head with a ReLU; c and the threshold L are learned, and
    each layer has its own f, c and L. Dividing by psi(i) maps every query's distances into [0, 1], so a longer
    sequence reads f on the range it was trained on; L (block_size at first) keeps short prefixes from being
    stretched. As the paper's listing: |c x|, L = |a| block_size with a learned from 1, psi(max(L, i)) + 1e-6; the
    block_size is the one trained at (trained_length): extended by keep, the model is the same at every position it
    was trained on, as the paper's L is (a longer sequence reads max(L, i) = i past L)."""

    settings = ("fire_width",)
    per_layer_bias = True

    @classmethod
    def check_config(cls, config) -> None:
        if config.fire_width < 1:
            raise ValueError(f"fire_width={config.fire_width} must be at least 1 (the MLP's hidden units)")

    def new_parameters(self) -> dict[str, nn.Parameter]:
        layers, width, n_head = self.config.n_layer, self.config.fire_width, self.config.n_head
        shapes = {"fire_c": (layers,), "fire_threshold": (layers,), "fire_w1": (layers, width),
                  "fire_b1": (layers, width), "fire_w2": (layers, n_head, width), "fire_b2": (layers, n_head)}
        return {name: nn.Parameter(torch.empty(shape)) for name, shape in shapes.items()}

    def reset_parameters(self, held: nn.Module) -> None:
        nn.init.constant_(held.fire_c, FIRE_C_INIT)
        nn.init.ones_(held.fire_threshold)  # L's multiplier of the trained length
        for name, fan_in in (("fire_w1", 1), ("fire_b1", 1), ("fire_w2", self.config.fire_width),
                             ("fire_b2", self.config.fire_width)):  # as nn.Linear draws its weights and biases
            nn.init.uniform_(getattr(held, name), -fan_in ** -0.5, fan_in ** -0.5)

    def score_bias(self, held: nn.Module, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """(n_layer, n_head, T, K): a bias for each layer; (n_layer, B, n_head, T, K) for positions of B rows."""
        if query_pos.dim() == 2:  # a row's normaliser psi(max(L, i)) reads its own positions
            return torch.stack([self.score_bias(held, q, k) for q, k in zip(query_pos, key_pos, strict=True)], 1)
        c = held.fire_c[:, None, None]
        threshold = held.fire_threshold.abs()[:, None] * trained_length(self.config)  # (n_layer, 1)
        distance = (query_pos[:, None] - key_pos[None, :]).clamp(min=0).float()
        norm = torch.log((c[:, :, 0] * torch.maximum(query_pos.float()[None, :], threshold)).abs() + 1) + 1e-6
        x = torch.log((c * distance).abs() + 1) / norm[:, :, None]  # (n_layer, T, K)
        hidden = torch.relu(x[..., None] * held.fire_w1[:, None, None, :] + held.fire_b1[:, None, None, :])
        bias = hidden @ held.fire_w2[:, None].transpose(-1, -2) + held.fire_b2[:, None, None, :]  # (L, T, K, H)
        return bias.permute(0, 3, 1, 2)


class Cope(PositionEncoding):
    """CoPE (Golovneva et al. 2024, section 3): a query counts the keys back to key j by gates g_it =
    sigmoid(q_i.k_t / sqrt(head_dim)), p_ij = sum_{t=j..i} g_it, and its score over key j is q_i.(k_j + e[p_ij]) /
    sqrt(head_dim), e interpolated between the integer positions around p_ij, p clamped to the table's last row
    (cope_positions rows; 0: the trained length + 1, every count training can make; derived_settings writes it out).
    Each layer has its own table e
    (head_dim, positions), shared by its heads and zero at first, as the paper's code (facebookresearch/RAM,
    projects/cope). Attention needs the scores themselves: it is written out (cope_attention), not SDPA's fused
    kernels, and costs more per token (docs/input_layer.md)."""

    settings = ("cope_positions",)

    @classmethod
    def check_config(cls, config) -> None:
        if config.cope_positions < 0:
            raise ValueError(f"cope_positions={config.cope_positions} must be >= 0 (0: block_size + 1)")

    @classmethod
    def derived_settings(cls, config) -> dict[str, object]:
        # trained_length: a checkpoint extended by keep before cope_positions was written out holds 0, and its
        # table the trained block_size + 1 rows
        return {"cope_positions": config.cope_positions or trained_length(config) + 1}

    def new_parameters(self) -> dict[str, nn.Parameter]:
        c = self.config
        positions = self.derived_settings(c)["cope_positions"]
        return {"cope_table": nn.Parameter(torch.empty(c.n_layer, c.n_embd // c.n_head, positions))}

    def reset_parameters(self, held: nn.Module) -> None:
        nn.init.zeros_(held.cope_table)  # as the paper's code: every position starts with no effect

    def extra_flops_per_token(self) -> int:
        """cope_scores' q @ table: each query of each head against each of the table's rows, head_dim wide, in
        every layer: n_layer n_embd cope_positions multiply-adds, whatever the sequence's length."""
        c = self.config
        return 6 * c.n_layer * c.n_embd * self.derived_settings(c)["cope_positions"]

    def contextual(self, held: nn.Module) -> torch.Tensor:
        return held.cope_table


def cope_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                   table: torch.Tensor, dropout_p: float) -> torch.Tensor:
    """softmax(s + q.e[p] / sqrt(head_dim)) v with s = q k^T / sqrt(head_dim), masked: CoPE's attention of queries q
    (B, n_head, T, head_dim) over keys and values (B, n_head, K, head_dim), mask None (causal, K = T) or bool
    (True: attend), table one layer's (head_dim, positions)."""
    scale = 1.0 / math.sqrt(q.size(-1))
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is None:
        mask = torch.ones(q.size(2), k.size(2), dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores + cope_scores(q, scores, table) * scale, dim=-1)
    return torch.nn.functional.dropout(weights, dropout_p) @ v


def cope_scores(q: torch.Tensor, scores: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """q . e[p_ij] (B, n_head, T, K) for the masked scaled scores (B, n_head, T, K), -inf off the causal pairs:
    gates sigmoid(score), each key's position the sum of the gates from it to the query (its own included),
    clamped to the table's last row, its embedding interpolated linearly between the rows on either side."""
    gates = torch.sigmoid(scores)  # 0 where masked
    position = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=table.size(-1) - 1)
    low, high = position.floor(), position.ceil()
    by_row = q @ table.to(q.dtype)  # (B, n_head, T, positions): each query against every row of the table
    weight = (position - low).to(by_row.dtype)
    return by_row.gather(-1, high.long()) * weight + by_row.gather(-1, low.long()) * (1 - weight)


def distances(query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
    """query - key position (T, K) of queries at query_pos (T,) and keys at key_pos (K,); (B, T, K) for each row's."""
    return query_pos[..., :, None] - key_pos[..., None, :]


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


# ---- x-transformers' data-dependent and dynamic biases: the Forgetting Transformer's gate, the dynamic position bias

class Fox(PositionEncoding):
    """The Forgetting Transformer (Lin et al. 2025, section 2; x-transformers' data_dependent_alibi): no position
    signal but a forget gate per head, f_t = sigmoid(w . x_t + b), from each attention layer's own input x_t (the
    block's normed hidden state), and the bias D_ij = sum_{t=j+1..i} log f_t on the scaled score of query i over key
    j: a key fades by the gates of every token after it. Each layer has its own w (n_head, n_embd) and b (n_head,),
    w ~ N(0, 0.02^2) and b = fox_bias_init, as the paper's code (zhixuan-lin/forgetting-transformer) initialises
    its fgate_proj (b = 0: every gate 1/2 at first; x-transformers' bias_init is 5). The bias depends on the tokens,
    not on the positions: attention computes it (forget_bias); the KV cache keeps each position's running sum
    sum_{t<=j} log f_t, per layer and head, which is all a later query needs of a cached key."""

    settings = ("fox_bias_init",)

    @classmethod
    def check_config(cls, config) -> None:
        if not -math.inf < config.fox_bias_init < math.inf:  # also catches NaN
            raise ValueError(f"fox_bias_init={config.fox_bias_init} must be a finite number (the paper's code: 0, "
                             "x-transformers: 5)")

    def new_parameters(self) -> dict[str, nn.Parameter]:
        c = self.config
        return {"fox_weight": nn.Parameter(torch.empty(c.n_layer, c.n_head, c.n_embd)),
                "fox_bias": nn.Parameter(torch.empty(c.n_layer, c.n_head))}

    def reset_parameters(self, held: nn.Module) -> None:
        nn.init.normal_(held.fox_weight, mean=0.0, std=0.02)  # the paper's code: its initializer_range
        nn.init.constant_(held.fox_bias, self.config.fox_bias_init)

    def forget_gates(self, held: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        return held.fox_weight, held.fox_bias

    def extra_flops_per_token(self) -> int:
        """The gates' projection w . x_t + b of every token, in each layer and head: 6 per parameter, as
        flops_per_token counts a Linear's."""
        c = self.config
        return 6 * c.n_layer * c.n_head * (c.n_embd + 1)


def log_forget_gates(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """log f_t = log sigmoid(w . x_t + b) (B, n_head, T), float32, of one layer's gates, weight (n_head, n_embd) and
    bias (n_head,), at its input x (B, T, n_embd): in float32 under autocast too, as the paper's code computes them
    (summed over thousands of tokens, bf16's rounding of each would add up)."""
    with torch.autocast(x.device.type, enabled=False):
        logits = torch.nn.functional.linear(x.float(), weight.float(), bias.float())
    return torch.nn.functional.logsigmoid(logits).transpose(1, 2)


def forget_bias(query_sums: torch.Tensor, key_sums: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """FoX's float mask (B, n_head, T, K): D_ij = c_i - c_j of the running sums c_t = sum_{s<=t} log f_s of the
    queries (B, n_head, T) and of the keys (B, n_head, K), -inf where allowed (bool, broadcast to it) is False."""
    bias = query_sums[..., :, None] - key_sums[..., None, :]
    return bias.masked_fill(~allowed, float("-inf"))


class DynamicBias(PositionEncoding):
    """x-transformers' dynamic position bias (DynamicPositionBias, after Swin v2's log-spaced continuous bias): an
    MLP of the distance d = i - j gives each head's bias on the scaled scores, one MLP shared by all layers, as
    x-transformers builds one and hands it to every layer. Input d, or sign(d) log(|d| + 1) with
    dynamic_bias_log_distance; then dynamic_bias_depth layers of Linear (to width n_embd // 4, x-transformers'
    dim // 4) and SiLU, each with a LayerNorm before the SiLU where dynamic_bias_norm (the first one with a gain
    alone, the later ones with a gain and a bias: x-transformers' own LayerNorm, then nn.LayerNorm); then a Linear
    to n_head. Every Linear drawn as nn.Linear draws it, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), its bias too."""

    settings = ("dynamic_bias_depth", "dynamic_bias_log_distance", "dynamic_bias_norm")

    @classmethod
    def check_config(cls, config) -> None:
        if config.dynamic_bias_depth < 1:
            raise ValueError(f"dynamic_bias_depth={config.dynamic_bias_depth} must be at least 1 (the MLP's hidden "
                             "layers; x-transformers: 2)")
        if config.n_embd < 4:
            raise ValueError(f"pos_encoding='dynamic_bias' needs n_embd >= 4: its MLP is n_embd // 4 = "
                             f"{config.n_embd // 4} wide")

    def new_parameters(self) -> dict[str, nn.Parameter]:
        c = self.config
        width, hidden = c.n_embd // 4, c.dynamic_bias_depth - 1
        shapes = {"dynamic_bias_w_in": (width,), "dynamic_bias_b_in": (width,),
                  "dynamic_bias_w_hidden": (hidden, width, width), "dynamic_bias_b_hidden": (hidden, width),
                  "dynamic_bias_w_out": (c.n_head, width), "dynamic_bias_b_out": (c.n_head,)}
        if c.dynamic_bias_norm:
            shapes.update(dynamic_bias_norm_gain=(hidden + 1, width), dynamic_bias_norm_bias=(hidden, width))
        return {name: nn.Parameter(torch.empty(shape)) for name, shape in shapes.items()}

    def reset_parameters(self, held: nn.Module) -> None:
        width = self.config.n_embd // 4
        for name, fan_in in (("dynamic_bias_w_in", 1), ("dynamic_bias_b_in", 1), ("dynamic_bias_w_hidden", width),
                             ("dynamic_bias_b_hidden", width), ("dynamic_bias_w_out", width),
                             ("dynamic_bias_b_out", width)):
            nn.init.uniform_(getattr(held, name), -fan_in ** -0.5, fan_in ** -0.5)
        if self.config.dynamic_bias_norm:
            nn.init.ones_(held.dynamic_bias_norm_gain)
            nn.init.zeros_(held.dynamic_bias_norm_bias)

    def score_bias(self, held: nn.Module, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """The MLP is read at the distances 0 .. K-1 (K keys) and gathered: in the model every causal pair's
        distance is below K, since the queries are among the keys, which start at position 0 (row_positions of a
        padded row too); a larger distance reads the bias of K-1."""
        keys = key_pos.size(-1)
        table = self.mlp(held, torch.arange(keys, device=key_pos.device, dtype=torch.float32))  # (K, n_head)
        distance = distances(query_pos, key_pos).clamp(0, keys - 1)
        return table[distance].movedim(-1, -3)  # (..., T, K, n_head) -> (..., n_head, T, K)

    def mlp(self, held: nn.Module, distance: torch.Tensor) -> torch.Tensor:
        """The bias (N, n_head) of each head at the distances (N,)."""
        c = self.config
        x = torch.sign(distance) * torch.log1p(distance.abs()) if c.dynamic_bias_log_distance else distance
        x = x[:, None] * held.dynamic_bias_w_in + held.dynamic_bias_b_in  # Linear(1, width)
        for layer in range(c.dynamic_bias_depth):
            if layer:
                x = x @ held.dynamic_bias_w_hidden[layer - 1].T + held.dynamic_bias_b_hidden[layer - 1]
            if c.dynamic_bias_norm:
                x = torch.nn.functional.layer_norm(x, (x.size(-1),), held.dynamic_bias_norm_gain[layer],
                                                   held.dynamic_bias_norm_bias[layer - 1] if layer else None)
            x = torch.nn.functional.silu(x)
        return x @ held.dynamic_bias_w_out.T + held.dynamic_bias_b_out


ENCODINGS: dict[str, type[PositionEncoding]] = {
    "learned": Learned, "sinusoidal": Sinusoidal, "rope": Rope, "alibi": Alibi, "none": PositionEncoding,
    "t5": T5Bias, "partial_rope": PartialRope, "p_rope": PRope, "xpos": XPos, "kerple": Kerple, "fire": Fire,
    "cope": Cope,
    "head_rope": HeadRope, "layer_rope": LayerRope, "pope": Pope,
    "fox": Fox, "dynamic_bias": DynamicBias,
}
POS_ENCODINGS = tuple(ENCODINGS)  # the names GPTConfig.pos_encoding takes


def encoding_of(config) -> PositionEncoding:
    """The position encoding that config.pos_encoding names, checked against the rest of config."""
    if config.pos_encoding not in ENCODINGS:
        raise ValueError(f"pos_encoding={config.pos_encoding!r} is not one of {', '.join(POS_ENCODINGS)}")
    check_position_scaling(config)
    ENCODINGS[config.pos_encoding].check_random_positions(config)  # first: check_config may read the range
    ENCODINGS[config.pos_encoding].check_config(config)
    return ENCODINGS[config.pos_encoding](config)


def derived_settings(config) -> dict[str, object]:
    """config's settings whose 0 stands for a length derived from block_size, as that length (the encoding's
    derived_settings); {} where it has none."""
    return ENCODINGS[config.pos_encoding].derived_settings(config)


def trained_length(config) -> int:
    """The block_size the model was trained at: trained_block_size where its context grew or was cropped, else
    block_size."""
    return config.trained_block_size or config.block_size


def scalings_of(pos_encoding: str) -> tuple[str, ...]:
    """The position_scaling values an encoding takes: none, and each of its extensions but keep."""
    return ("none", *(m for m in ENCODINGS[pos_encoding].extensions if m != "keep"))


def check_position_scaling(config) -> None:
    """position_scaling applies to the encoding, position_scale is a factor > 0 (1.0 unless scaling), and
    trained_block_size (0: never extended or cropped) is not negative."""
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
    if config.trained_block_size < 0:  # past block_size: the model was cropped (GPT.crop_block_size)
        raise ValueError(f"trained_block_size={config.trained_block_size} must be >= 0: the block_size the model "
                         "was trained at before its context grew or was cropped (0: it never changed)")


@torch.compiler.disable  # drawn eagerly from torch's CPU generator, also in a compiled model
def random_positions(seq_len: int, limit: int, device: torch.device) -> torch.Tensor:
    """Randomized positions (Ruoss et al. 2023): seq_len distinct positions of 0..limit-1, in order, one draw for
    the batch. torch's CPU generator is in every checkpoint, so a resumed run draws what the whole run did."""
    return torch.randperm(limit)[:seq_len].sort().values.to(device)


def rope_angles(positions: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, head_dim), float32, of the rotary angles at positions (T,), in the rotate-half layout:
    feature i and feature i + head_dim/2 form a pair, turned by pos * base^(-2i/head_dim)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    return rotary_cos_sin(positions, inv_freq)


def rotary_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor,
                   attention_factor: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (T, head_dim) of positions (T,) times inv_freq (head_dim/2,), float32, both multiplied by
    attention_factor: queries and keys both turned by them scale every score q.k by attention_factor^2."""
    angles = positions.float()[..., None] * inv_freq
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
        low, high = yarn_correction_range(d, base, trained_length(config))
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
    c = 1
    while 2 * c <= n_head:  # not int.bit_length, which torch 2.3's compiler cannot trace
        c *= 2
    slopes_c = [2.0 ** (-8.0 * (h + 1) / c) for h in range(c)]
    slopes_2c = [2.0 ** (-8.0 * (h + 1) / (2 * c)) for h in range(2 * c)]
    return slopes_c + slopes_2c[0::2][:n_head - c]
