"""KERPLE, FIRE and xPos (positions.py) against NumPy float64 references written here from the papers' equations,
not from the torch code: the score bias or the turned queries' and keys' scores at hand-set parameters, including
values that reach the clamps and thresholds, the initialisation ranges, and a GPT decoding one token at a time
through its KV cache as it forwards the whole sequence at once.

  KERPLE (Chi et al. 2022, section 4): d = n - m; log: -r1 log(1 + r2 d); power: -r1 d^r2; r1, r2 >= 0.01 (r2 <= 2).
  FIRE (Li et al. 2023, section 3.2): psi(x) = log(|c x| + 1), L = |a| block_size,
      b(i, j) = w2 . relu(psi(i - j) / (psi(max(L, i)) + 1e-6) w1 + b1) + b2, each layer its own.
  xPos (Sun et al. 2022, section 3.2): theta_i = base^(-2i/d), zeta_i = (2i/d + gamma) / (1 + gamma); the query at n
      turned by n theta_i and scaled by zeta_i^(n/B), the key at m by m theta_i and zeta_i^(-m/B), so that
      q_n . k_m = sum_i zeta_i^((n-m)/B) (R((n-m) theta_i) q_i) . k_i.
  dynamic_bias (x-transformers' DynamicPositionBias): d' = sign(d) log(|d| + 1) (or d), h = silu(LN(W1 d' + b1)),
      then depth - 1 times h = silu(LN(W h + b)), bias = W_out h + b_out; one MLP for all layers.
  fox (Lin et al. 2025, section 2): f_t = sigmoid(w . x_t + b) per head from each layer's normed input x_t, and the
      score of query i over key j gains D_ij = sum_{t=j+1..i} log f_t: here a whole GPT's logits in float64, the
      sum written as a loop over t, uncached and through the KV cache.
"""

import math
import re

import numpy as np
import pytest
import torch
from helpers import numpy_gpt_logits, resumed_as_one_run

from layers.positions import rotate
from model import GPT, GPTConfig, InputLayer
from train import TrainConfig, unused_settings

EPS = 0.01  # KERPLE's floor of r1 and r2 (the paper's code), written here, not read from positions.py


def input_layer(pos_encoding: str, seed: int = 0, **overrides) -> InputLayer:
    kw = dict(block_size=16, vocab_size=11, n_layer=1, n_head=4, n_embd=16, pos_encoding=pos_encoding)
    kw.update(overrides)
    torch.manual_seed(seed)
    layer = InputLayer(GPTConfig(**kw))
    layer.reset_position_table()
    return layer


def set_(parameter: torch.nn.Parameter, values) -> np.ndarray:
    """Write values into parameter (float32) and return what it holds, in float64: the reference's input."""
    with torch.no_grad():
        parameter.copy_(torch.as_tensor(np.asarray(values), dtype=parameter.dtype))
    return parameter.detach().double().numpy().copy()


def causal(query_pos, key_pos) -> np.ndarray:
    return np.asarray(key_pos)[None, :] <= np.asarray(query_pos)[:, None]


def bias_of(layer: InputLayer, query_pos, key_pos) -> np.ndarray:
    with torch.no_grad():
        bias = layer.encoding.score_bias(layer, torch.tensor(query_pos), torch.tensor(key_pos))
    return bias.double().numpy()


# ---- KERPLE --------------------------------------------------------------------------------------------------------

def kerple_reference(r1, r2, query_pos, key_pos, kernel: str, floor: float = EPS, top: float | None = 2.0):
    """(n_head, T, K) float64: the kernel of the distance with r1, r2 clamped as the paper's code holds them."""
    r1 = np.maximum(np.asarray(r1, dtype=np.float64), floor)[:, None, None]
    r2 = np.maximum(np.asarray(r2, dtype=np.float64), floor)
    if kernel == "power" and top is not None:
        r2 = np.minimum(r2, top)
    r2 = r2[:, None, None]
    d = np.maximum(np.asarray(query_pos)[:, None] - np.asarray(key_pos)[None, :], 0).astype(np.float64)[None]
    if kernel == "log":
        return -r1 * np.log(1.0 + r2 * d)
    return -r1 * d ** r2


# Queries 9..15 over keys 0..19 (as a cached decode step sees them), and far distances up to 1000
KERPLE_POSITIONS = [(list(range(9, 16)), list(range(20))),
                    ([0, 1, 7, 500, 999, 1000], [0, 1, 3, 7, 250, 499, 500, 998, 1000])]
# Per head: below the floor, negative, in range, large; for power r2 also past its cap of 2
KERPLE_R1 = [0.004, -0.5, 0.7, 1.9, 3.0]
KERPLE_R2 = [0.3, 0.0005, -2.0, 1.5, 2.7]  # log keeps 2.7, power caps it at 2


def kerple_layer(kernel: str, **overrides) -> InputLayer:
    return input_layer("kerple", kerple_kernel=kernel, n_head=5, n_embd=20, **overrides)


@pytest.mark.parametrize("kernel, top_r1, top_r2", [("log", 2.0, 1.0), ("power", 1.0, 2.0)])
def test_kerple_init_draws_fill_the_papers_intervals(kernel, top_r1, top_r2):
    """log: r1 ~ U(0, 2), r2 ~ U(0, 1); power: r1 ~ U(0, 1), r2 ~ U(0, 2); over 64 heads the draws stay within
    each interval and reach into its top and bottom tenths (each misses with probability 0.9^64 ~ 1e-3)."""
    for seed in range(3):
        layer = input_layer("kerple", seed=seed, kerple_kernel=kernel, n_head=64, n_embd=64)
        for values, top in ((layer.kerple_r1, top_r1), (layer.kerple_r2, top_r2)):
            values = values.detach().double().numpy()
            assert values.shape == (64,)
            assert values.min() >= 0.0 and values.max() <= top
            assert values.min() < 0.1 * top and values.max() > 0.9 * top
            assert len(np.unique(values)) == 64


@pytest.mark.parametrize("kernel", ["log", "power"])
@pytest.mark.parametrize("query_pos, key_pos", KERPLE_POSITIONS)
def test_kerple_bias_equals_numpy(kernel, query_pos, key_pos):
    layer = kerple_layer(kernel).eval()
    r1, r2 = set_(layer.kerple_r1, KERPLE_R1), set_(layer.kerple_r2, KERPLE_R2)
    got = bias_of(layer, query_pos, key_pos)
    assert got.shape == (5, len(query_pos), len(key_pos))
    expected = kerple_reference(r1, r2, query_pos, key_pos, kernel)
    mask = causal(query_pos, key_pos)
    np.testing.assert_allclose(got[:, mask], expected[:, mask], rtol=1e-5, atol=1e-6)
    # no bias at distance 0, for every head
    same = np.asarray(query_pos)[:, None] == np.asarray(key_pos)[None, :]
    assert np.all(got[:, same] == 0.0)
    # the hand-set values reach the clamps: unclamped, the bias would be another (NaN where r2 < 0 for log)
    with np.errstate(invalid="ignore", divide="ignore"):
        unclamped = kerple_reference(r1, r2, query_pos, key_pos, kernel, floor=-np.inf, top=None)
    assert not np.allclose(got[:, mask], unclamped[:, mask], rtol=1e-3, equal_nan=False)


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_kerple_training_clamps_parameters_in_place_eval_leaves_them(kernel):
    """The paper's code clamps r1 and r2 in place in each training forward; in eval they stay as set, and the bias
    reads them clamped all the same. Both ways the bias is the kernel of the clamped values."""
    query_pos, key_pos = list(range(9, 16)), list(range(20))
    mask = causal(query_pos, key_pos)
    r1_set, r2_set = KERPLE_R1, KERPLE_R2
    top = 2.0 if kernel == "power" else np.inf
    clamped_r1 = np.maximum(np.float32(r1_set), np.float32(EPS))
    clamped_r2 = np.minimum(np.maximum(np.float32(r2_set), np.float32(EPS)), np.float32(top))

    layer = kerple_layer(kernel).eval()
    r1, r2 = set_(layer.kerple_r1, r1_set), set_(layer.kerple_r2, r2_set)
    got = bias_of(layer, query_pos, key_pos)
    np.testing.assert_array_equal(layer.kerple_r1.detach().numpy(), np.float32(r1_set))  # untouched
    np.testing.assert_array_equal(layer.kerple_r2.detach().numpy(), np.float32(r2_set))
    expected = kerple_reference(r1, r2, query_pos, key_pos, kernel)
    np.testing.assert_allclose(got[:, mask], expected[:, mask], rtol=1e-5, atol=1e-6)

    layer.train()
    bias = layer.encoding.score_bias(layer, torch.tensor(query_pos), torch.tensor(key_pos))
    np.testing.assert_array_equal(layer.kerple_r1.detach().numpy(), clamped_r1)  # clamped in place
    np.testing.assert_array_equal(layer.kerple_r2.detach().numpy(), clamped_r2)
    np.testing.assert_allclose(bias.detach().double().numpy()[:, mask], expected[:, mask], rtol=1e-5, atol=1e-6)
    bias[:, torch.tensor(mask)].sum().backward()  # the clamped parameters still learn
    assert layer.kerple_r1.grad is not None and torch.isfinite(layer.kerple_r1.grad).all()
    assert layer.kerple_r1.grad.abs().min() > 0 and torch.isfinite(layer.kerple_r2.grad).all()


# ---- FIRE ----------------------------------------------------------------------------------------------------------

def fire_reference(c, a, w1, b1, w2, b2, block_size: int, query_pos, key_pos, threshold: bool = True) -> np.ndarray:
    """(n_layer, n_head, T, K) float64 from the paper's equation; threshold=False divides by psi(i) alone."""
    qp, kp = np.asarray(query_pos, dtype=np.float64), np.asarray(key_pos, dtype=np.float64)
    n_layer, n_head = w2.shape[:2]
    out = np.zeros((n_layer, n_head, len(qp), len(kp)))
    for layer in range(n_layer):
        def psi(x, c=c[layer]):
            return np.log(np.abs(c * x) + 1.0)

        big_l = abs(a[layer]) * block_size
        norm = psi(np.maximum(big_l, qp) if threshold else qp) + 1e-6
        x = psi(np.maximum(qp[:, None] - kp[None, :], 0.0)) / norm[:, None]  # (T, K)
        for t in range(len(qp)):
            for k in range(len(kp)):
                hidden = np.maximum(x[t, k] * w1[layer] + b1[layer], 0.0)  # (width,)
                out[layer, :, t, k] = w2[layer] @ hidden + b2[layer]
    return out


FIRE_BLOCK = 16
FIRE_C = [0.3, -0.7, 2.0]  # a negative c: psi reads |c x|
FIRE_A = [0.25, -1.5, 1.0]  # L = 4, 24 (from a negative multiplier), 16


def fire_layer(seed: int = 0, **overrides) -> tuple[InputLayer, dict]:
    """A FIRE input layer (3 layers, 4 heads, width 8) with hand-set random parameters, and those parameters."""
    kw = dict(n_layer=3, fire_width=8, block_size=FIRE_BLOCK)
    kw.update(overrides)
    layer = input_layer("fire", **kw).eval()
    rng = np.random.default_rng(seed)
    n_layer, width, n_head = kw["n_layer"], kw["fire_width"], layer.fire_w2.shape[1]
    params = {"c": set_(layer.fire_c, FIRE_C[:n_layer]), "a": set_(layer.fire_threshold, FIRE_A[:n_layer]),
              "w1": set_(layer.fire_w1, rng.normal(0, 2.0, (n_layer, width))),
              "b1": set_(layer.fire_b1, rng.normal(0, 0.5, (n_layer, width))),
              "w2": set_(layer.fire_w2, rng.normal(0, 1.0, (n_layer, n_head, width))),
              "b2": set_(layer.fire_b2, rng.normal(0, 0.5, (n_layer, n_head)))}
    return layer, params


def test_fire_init_is_the_papers():
    """c = 0.1, the threshold multiplier 1 (L = block_size); w1, b1 ~ U(-1, 1) and w2, b2 ~ U(-1/sqrt(width),
    1/sqrt(width)), as nn.Linear(1, width) and nn.Linear(width, n_head) draw them, filling those intervals."""
    width = 32
    layer = input_layer("fire", n_layer=3, n_head=8, n_embd=32, fire_width=width)
    assert torch.equal(layer.fire_c, torch.full((3,), 0.1))
    assert torch.equal(layer.fire_threshold, torch.ones(3))
    for name, shape, bound in (("fire_w1", (3, width), 1.0), ("fire_b1", (3, width), 1.0),
                               ("fire_w2", (3, 8, width), width ** -0.5), ("fire_b2", (3, 8), width ** -0.5)):
        values = getattr(layer, name).detach().double().numpy()
        assert values.shape == shape, name
        assert np.abs(values).max() <= bound, name
        assert values.max() > 0.8 * bound and values.min() < -0.8 * bound, name  # 24..768 draws fill the interval


@pytest.mark.parametrize("query_pos, key_pos", [(list(range(41)), list(range(41))),  # below and above every L
                                                (list(range(20, 31)), list(range(36)))])  # cached-style
def test_fire_bias_equals_numpy(query_pos, key_pos):
    layer, p = fire_layer()
    got = bias_of(layer, query_pos, key_pos)
    assert got.shape == (3, 4, len(query_pos), len(key_pos))
    expected = fire_reference(p["c"], p["a"], p["w1"], p["b1"], p["w2"], p["b2"], FIRE_BLOCK, query_pos, key_pos)
    mask = causal(query_pos, key_pos)
    np.testing.assert_allclose(got[:, :, mask], expected[:, :, mask], rtol=1e-5, atol=2e-5)
    # each layer its own bias
    for one, other in ((0, 1), (1, 2), (0, 2)):
        assert np.abs(got[one][:, mask] - got[other][:, mask]).max() > 0.1


def test_fire_threshold_holds_the_norm_below_L_only():
    """Queries i < L normalise by psi(L), those at i >= L by psi(i): against the reference without the threshold,
    rows below L differ and rows from L on agree. Layer 1's L = |-1.5| * 16 = 24."""
    query_pos = key_pos = list(range(41))
    layer, p = fire_layer()
    got = bias_of(layer, query_pos, key_pos)[1]
    plain = fire_reference(p["c"], p["a"], p["w1"], p["b1"], p["w2"], p["b2"], FIRE_BLOCK, query_pos, key_pos,
                           threshold=False)[1]
    mask = causal(query_pos, key_pos)
    big_l = abs(FIRE_A[1]) * FIRE_BLOCK
    for i in query_pos:
        row = mask[i]
        if i >= big_l:
            np.testing.assert_allclose(got[:, i, row], plain[:, i, row], rtol=1e-5, atol=2e-5)
        elif i >= 2:  # i = 0: x = 0 either way; i = 1 differs too, but little
            assert np.abs(got[:, i, row] - plain[:, i, row]).max() > 1e-2, i


# ---- xPos ----------------------------------------------------------------------------------------------------------

def xpos_reference(q, k, query_pos, key_pos, gamma: float, scale_base: float, base: float):
    """q (H, T, d), k (H, K, d) float64 in the rotate-half layout (pair i: features i, i + d/2) -> the scores
    (H, T, K) of the turned query at n and key at m: sum_i zeta_i^((n-m)/B) (R((n-m) theta_i) q_i) . k_i; and the
    same with |q_i| |k_i| in place of the rotated dot products (what float32 error is measured against)."""
    d = q.shape[-1]
    half = d // 2
    i = np.arange(half, dtype=np.float64)
    theta = base ** (-2.0 * i / d)
    zeta = (2.0 * i / d + gamma) / (1.0 + gamma)
    delta = (np.asarray(query_pos, dtype=np.float64)[:, None] - np.asarray(key_pos, dtype=np.float64)[None, :])
    angle = delta[..., None] * theta  # (T, K, d/2)
    decay = zeta ** (delta[..., None] / scale_base)
    qx, qy = q[:, :, None, :half], q[:, :, None, half:]
    kx, ky = k[:, None, :, :half], k[:, None, :, half:]
    turned_x = qx * np.cos(angle) - qy * np.sin(angle)  # R(phi) (x, y) = (x cos - y sin, x sin + y cos)
    turned_y = qx * np.sin(angle) + qy * np.cos(angle)
    scores = ((turned_x * kx + turned_y * ky) * decay).sum(-1)
    sizes = (np.hypot(qx, qy) * np.hypot(kx, ky) * decay).sum(-1)
    return scores, sizes


def xpos_scores(layer: InputLayer, q: np.ndarray, k: np.ndarray, query_pos, key_pos) -> np.ndarray:
    """The float32 scores (H, T, K) of q at query_pos and k at key_pos turned by the layer's rotary."""
    with torch.no_grad():
        q_turn, _ = layer.encoding.rotary(layer, torch.tensor(query_pos))
        _, k_turn = layer.encoding.rotary(layer, torch.tensor(key_pos))
        qt = rotate(torch.tensor(q, dtype=torch.float32)[None], *q_turn)
        kt = rotate(torch.tensor(k, dtype=torch.float32)[None], *k_turn)
        return (qt @ kt.transpose(-1, -2))[0].double().numpy()


XPOS_QUERY = [0, 3, 100, 511, 1000, 2048, 3999, 4000]
XPOS_KEY = [0, 1, 3, 90, 500, 1000, 2000, 3990, 4000]
TOL = 2e-5  # of the scale sum_i zeta_i^(..) |q_i| |k_i|: float32 scores are off by ~1e-6 of it (measured)


def random_qk(heads: int, t: int, kk: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    q, k = rng.normal(size=(heads, t, d)), rng.normal(size=(heads, kk, d))
    return q.astype(np.float32).astype(np.float64), k.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("gamma, scale_base, n_head, n_embd", [(0.4, 512.0, 2, 16), (0.9, 300.0, 1, 8)])
def test_xpos_scores_equal_numpy(gamma, scale_base, n_head, n_embd):
    layer = input_layer("xpos", n_head=n_head, n_embd=n_embd, xpos_gamma=gamma, xpos_scale_base=scale_base)
    q, k = random_qk(n_head, len(XPOS_QUERY), len(XPOS_KEY), n_embd // n_head)
    got = xpos_scores(layer, q, k, XPOS_QUERY, XPOS_KEY)
    expected, sizes = xpos_reference(q, k, XPOS_QUERY, XPOS_KEY, gamma, scale_base, 10000.0)
    mask = causal(XPOS_QUERY, XPOS_KEY)
    assert np.all(np.abs(got - expected)[:, mask] <= TOL * sizes[:, mask] + 1e-6), \
        np.max((np.abs(got - expected) / sizes)[:, mask])
    # the decay matters at these distances: plain rope (zeta = 1) is another score
    rope, _ = xpos_reference(q, k, XPOS_QUERY, XPOS_KEY, gamma, math.inf, 10000.0)
    assert np.max((np.abs(got - rope) / sizes)[:, mask]) > 0.1


def test_xpos_score_depends_only_on_the_distance():
    """Both positions shifted by s: the same score, to float error (queries and keys at absolute positions)."""
    layer = input_layer("xpos", n_head=2, n_embd=16)
    query_pos, key_pos = [5, 40, 300, 700], [0, 5, 39, 200, 700]
    q, k = random_qk(2, len(query_pos), len(key_pos), 8, seed=1)
    mask = causal(query_pos, key_pos)
    base_scores = xpos_scores(layer, q, k, query_pos, key_pos)
    _, sizes = xpos_reference(q, k, query_pos, key_pos, 0.4, 512.0, 10000.0)
    for shift in (1, 37, 1000, 3300):
        shifted = xpos_scores(layer, q, k, [n + shift for n in query_pos], [m + shift for m in key_pos])
        assert np.all(np.abs(shifted - base_scores)[:, mask] <= 2 * TOL * sizes[:, mask] + 1e-6), shift
    # while each turned query alone does change with its absolute position (its scale and angle)
    with torch.no_grad():
        (cos_a, _), _ = layer.encoding.rotary(layer, torch.tensor([5]))
        (cos_b, _), _ = layer.encoding.rotary(layer, torch.tensor([1005]))
    assert not torch.allclose(cos_a, cos_b, atol=1e-2)


def key_scale(position: int, gamma: float, scale_base: float) -> float:
    """The largest factor a key at position is scaled by: 1 / zeta_0^(m/B), zeta_0 = gamma / (1 + gamma)."""
    return ((1.0 + gamma) / gamma) ** (position / scale_base)


@pytest.mark.parametrize("gamma, scale_base", [(0.4, 512.0), (0.9, 300.0), (0.4, 1.0)])
def test_xpos_max_length_is_where_the_key_scale_passes_2_to_the_32(gamma, scale_base):
    """max_length: positions 0 .. max_length-1 placed; a key's scale stays within 2^32 up there and passes it within
    one position after. The model refuses a sequence (or a cached step) that reaches past it."""
    layer = input_layer("xpos", xpos_gamma=gamma, xpos_scale_base=scale_base)
    n = layer.encoding.max_length()
    assert isinstance(n, int) and n > 0
    assert key_scale(n - 1, gamma, scale_base) <= 2.0 ** 32 < key_scale(n + 1, gamma, scale_base)
    if (gamma, scale_base) == (0.4, 512.0):
        assert n == 9065  # 32 ln 2 * 512 / ln 3.5 = 9065.4
    model = GPT(GPTConfig(block_size=16, vocab_size=11, n_layer=1, n_head=2, n_embd=16, pos_encoding="xpos",
                          xpos_gamma=gamma, xpos_scale_base=scale_base))
    model.check_positions(n, 0)
    model.check_positions(1, n - 1)
    for seq_len, past_length in ((n + 1, 0), (1, n), (2, n - 1)):
        with pytest.raises(ValueError, match="max_length"):
            model.check_positions(seq_len, past_length)


@pytest.mark.parametrize("gamma, block_size, random_positions", [(0.4, 32, 0), (0.4, 16, 40), (0.9, 100, 0)])
def test_xpos_that_cannot_place_the_training_positions_is_refused_with_the_scale_base_that_can(gamma, block_size,
                                                                                              random_positions):
    """xpos_scale_base=1 at block_size 32 was taken, and the first evaluation ended in check_length's traceback."""
    settings = dict(vocab_size=11, n_layer=1, n_head=2, n_embd=16, pos_encoding="xpos", xpos_gamma=gamma,
                    block_size=block_size, random_positions=random_positions)
    needed = max(block_size, random_positions)
    with pytest.raises(ValueError, match=r"xpos_scale_base=1 lets xPos place (\d+) positions .* fewer than "
                                         rf"(block_size|random_positions)={needed}; give xpos_scale_base >= (\d+)"
                       ) as refused:
        GPTConfig(**settings, xpos_scale_base=1.0)
    placed, fix = (int(n) for n in re.findall(r"place (\d+) positions.*>= (\d+)", str(refused.value))[0])
    assert key_scale(placed + 1, gamma, 1.0) > 2.0 ** 32  # the limit is xPos's own (max_length)
    model = GPT(GPTConfig(**settings, xpos_scale_base=float(fix)))
    model.check_positions(needed, 0)  # the scale base it names places them all
    assert key_scale(needed - 1, gamma, fix) <= 2.0 ** 32
    with pytest.raises(ValueError, match="fewer than"):
        GPTConfig(**settings, xpos_scale_base=fix - 1.0)  # and is the smallest whole one that does


def test_xpos_gpt_refuses_a_sequence_past_max_length():
    """With xpos_scale_base=1: max_length 17 (32 ln 2 / ln 3.5 = 17.7), within reach of a tiny model's forward."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=11, n_layer=1, n_head=2, n_embd=16, pos_encoding="xpos",
                          xpos_scale_base=1.0)).eval()
    n = model.input_layer.encoding.max_length()
    assert n == 17
    idx = torch.randint(0, 11, (1, n + 1))
    with torch.no_grad():
        model(idx[:, :n])
        with pytest.raises(ValueError):
            model(idx)
        cache = model.make_cache(1, 32)
        model(idx[:, :n], cache=cache)
        with pytest.raises(ValueError):
            model(idx[:, n:], cache=cache)


# ---- a GPT with each: cached decoding is the uncached forward --------------------------------------------------------

def randomized_gpt(case: str) -> GPT:
    kw = dict(block_size=16, vocab_size=37, n_layer=2, n_head=2, n_embd=32)
    if case.startswith("kerple"):
        kw.update(pos_encoding="kerple", kerple_kernel=case.split("-")[1])
    elif case == "xpos":
        kw.update(pos_encoding="xpos", xpos_scale_base=8.0)  # a decay that matters over 12 tokens
    else:
        kw.update(pos_encoding=case)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**kw)).eval()
    layer, rng = model.input_layer, np.random.default_rng(1)
    if case.startswith("kerple"):
        set_(layer.kerple_r1, rng.uniform(0.2, 1.5, 2))
        set_(layer.kerple_r2, rng.uniform(0.2, 1.8, 2))
    elif case == "fire":
        set_(layer.fire_c, [0.5, -1.3])
        set_(layer.fire_threshold, [0.4, 1.0])  # L = 6.4, 16: 12 tokens reach past the first only
        for name in ("fire_w1", "fire_b1", "fire_w2", "fire_b2"):
            set_(getattr(layer, name), rng.normal(0, 1.0, tuple(getattr(layer, name).shape)))
    return model


@pytest.mark.parametrize("case", ["kerple-log", "kerple-power", "fire", "xpos", "fox", "dynamic_bias"])
def test_cached_decoding_equals_uncached_forward(case):
    model = randomized_gpt(case)
    idx = torch.randint(0, 37, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full, _ = model(idx)
        cache = model.make_cache(2, 16)
        steps = [model(idx[:, t:t + 1], cache=cache)[0] for t in range(12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)


# ---- dynamic position bias ---------------------------------------------------------------------------------------

def dynamic_reference(p: dict, query_pos, key_pos, log_distance: bool, norm: bool) -> np.ndarray:
    """(n_head, T, K) float64: x-transformers' MLP of the distance, each layer Linear, LayerNorm where norm (the
    first with a gain alone), SiLU; then Linear to the heads. Read at every (i, j) on its own."""
    def silu(z):
        return z / (1.0 + np.exp(-z))

    def layer_norm(z, gain, bias):
        return (z - z.mean()) / np.sqrt(z.var() + 1e-5) * gain + bias

    depth = len(p["b_hidden"]) + 1
    out = np.zeros((len(p["b_out"]), len(query_pos), len(key_pos)))
    for t, i in enumerate(query_pos):
        for k, j in enumerate(key_pos):
            d = float(i - j)
            h = p["w_in"] * (np.sign(d) * np.log(abs(d) + 1.0) if log_distance else d) + p["b_in"]
            for layer in range(depth):
                if layer:
                    h = p["w_hidden"][layer - 1] @ h + p["b_hidden"][layer - 1]
                if norm:
                    h = layer_norm(h, p["norm_gain"][layer], p["norm_bias"][layer - 1] if layer else 0.0)
                h = silu(h)
            out[:, t, k] = p["w_out"] @ h + p["b_out"]
    return out


def dynamic_layer(depth: int, log_distance: bool, norm: bool, seed: int = 0) -> tuple[InputLayer, dict]:
    """A dynamic_bias input layer (3 heads, width 24 // 4 = 6) with hand-set random parameters, and those."""
    layer = input_layer("dynamic_bias", n_head=3, n_embd=24, dynamic_bias_depth=depth,
                        dynamic_bias_log_distance=log_distance, dynamic_bias_norm=norm).eval()
    rng = np.random.default_rng(seed)
    names = ["w_in", "b_in", "w_hidden", "b_hidden", "w_out", "b_out"] + (["norm_gain", "norm_bias"] if norm else [])
    params = {}
    for name in names:
        parameter = getattr(layer, "dynamic_bias_" + name)
        scale = 0.3 if name.startswith("w_in") and not log_distance else 1.0  # distances up to 30, not logs
        params[name] = set_(parameter, rng.normal(1.0 if name == "norm_gain" else 0.0, scale, tuple(parameter.shape)))
    return layer, params


DYNAMIC_CASES = [(1, False, False), (2, True, False), (3, True, True), (2, False, True)]


@pytest.mark.parametrize("depth, log_distance, norm", DYNAMIC_CASES)
@pytest.mark.parametrize("query_pos, key_pos", [(list(range(31)), list(range(31))),  # uncached
                                                (list(range(9, 16)), list(range(20)))])  # a cached step's
def test_dynamic_bias_equals_numpy(depth, log_distance, norm, query_pos, key_pos):
    layer, p = dynamic_layer(depth, log_distance, norm)
    got = bias_of(layer, query_pos, key_pos)
    assert got.shape == (3, len(query_pos), len(key_pos))  # one bias for every layer
    expected = dynamic_reference(p, query_pos, key_pos, log_distance, norm)
    mask = causal(query_pos, key_pos)
    np.testing.assert_allclose(got[:, mask], expected[:, mask], rtol=1e-5, atol=1e-6)
    # the distance's form matters: the other one is another bias
    other = dynamic_reference(p, query_pos, key_pos, not log_distance, norm)
    assert np.abs(got[:, mask] - other[:, mask]).max() > 1e-2


def test_dynamic_bias_init_is_nn_linears():
    """Every Linear (weights and biases) drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), filling it; the norms' gains
    1 and biases 0, as nn.LayerNorm and x-transformers' LayerNorm start."""
    layer = input_layer("dynamic_bias", n_head=64, n_embd=256, dynamic_bias_depth=3, dynamic_bias_norm=True)
    width = 64  # 64 draws or more each: a tenth of the interval at either end is missed with probability ~1e-3
    for name, shape, bound in (("w_in", (width,), 1.0), ("b_in", (width,), 1.0),
                               ("w_hidden", (2, width, width), width ** -0.5), ("b_hidden", (2, width), width ** -0.5),
                               ("w_out", (64, width), width ** -0.5), ("b_out", (64,), width ** -0.5)):
        values = getattr(layer, "dynamic_bias_" + name).detach().double().numpy()
        assert values.shape == shape, name
        assert np.abs(values).max() <= bound, name
        assert values.max() > 0.8 * bound and values.min() < -0.8 * bound, name
    assert torch.equal(layer.dynamic_bias_norm_gain, torch.ones(3, width))
    assert torch.equal(layer.dynamic_bias_norm_bias, torch.zeros(2, width))
    assert not hasattr(input_layer("dynamic_bias", n_embd=16), "dynamic_bias_norm_gain")


# ---- the Forgetting Transformer -------------------------------------------------------------------------------------

def fox_reference_logits(model: GPT, idx: np.ndarray) -> np.ndarray:
    """A FoX GPT's logits (B, T, vocab) in float64 from its state dict: each layer's gates from its normed input,
    the bias D_ij = sum_{t=j+1..i} log f_t summed term by term, no position signal anywhere else."""
    B, T = idx.shape
    H, D = model.config.n_head, model.config.n_embd // model.config.n_head

    def scores(W, layer, normed, q, k):
        log_f = -np.log1p(np.exp(-(normed @ W["input_layer.fox_weight"][layer].T
                                   + W["input_layer.fox_bias"][layer])))  # (B, T, H): log sigmoid
        bias = np.full((B, H, T, T), -np.inf)
        for i in range(T):
            for j in range(i + 1):
                bias[:, :, i, j] = sum((log_f[:, t] for t in range(j + 1, i + 1)), np.zeros((B, H)))
        return q @ k.transpose(0, 1, 3, 2) / np.sqrt(D) + bias

    return numpy_gpt_logits(model, idx, scores)


def fox_gpt(seed: int = 0) -> GPT:
    """A 2-layer FoX GPT with its weights at std 0.2 and gates that range from near 0 to near 1 (biases -1 .. 3,
    weights of std 1): the bias reaches -10 and below over 12 tokens, and differs by token and head."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(block_size=16, vocab_size=37, n_layer=2, n_head=2, n_embd=32, pos_encoding="fox")).eval()
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if not name.startswith("input_layer.fox"):
                parameter.copy_(torch.as_tensor(rng.normal(0, 0.2, tuple(parameter.shape))))
    set_(model.input_layer.fox_weight, rng.normal(0, 1.0, (2, 2, 32)))
    set_(model.input_layer.fox_bias, [[-1.0, 3.0], [0.5, 2.0]])
    return model


@torch.no_grad()
def test_fox_logits_equal_numpy_uncached_and_cached():
    model = fox_gpt()
    idx = torch.randint(0, 37, (2, 12), generator=torch.Generator().manual_seed(3))
    expected = fox_reference_logits(model, idx.numpy())
    full = model(idx)[0].double().numpy()
    np.testing.assert_allclose(full, expected, rtol=0, atol=2e-6)
    cache = model.make_cache(2, 16)
    chunks = [model(idx[:, a:b], cache=cache)[0] for a, b in ((0, 5), (5, 6), (6, 12))]
    np.testing.assert_allclose(torch.cat(chunks, 1).double().numpy(), expected, rtol=0, atol=2e-6)
    # the cache holds each position's running sum of the layer's log-gates: the first layer's, from the tokens alone
    normed = model.blocks[0].ln_1(model.input_layer(idx, torch.arange(12))).double().numpy()
    log_f = -np.log1p(np.exp(-(normed @ model.input_layer.fox_weight[0].double().numpy().T
                               + model.input_layer.fox_bias[0].double().numpy())))
    # float32 sums of up to 12 terms reaching -45: a few of their last places (4e-6 there) apart from float64's
    np.testing.assert_allclose(cache.gate_sums[0][:, :, :12].double().numpy(), log_f.cumsum(1).transpose(0, 2, 1),
                               rtol=4e-7, atol=2e-6)
    # the gates matter: with every gate 1 (no decay: NoPE, the same weights) the logits are others
    model.input_layer.fox_bias.fill_(30.0)
    assert np.abs(model(idx)[0].double().numpy() - expected).max() > 1e-2


def test_fox_init_is_the_papers_code():
    """fgate_proj as the paper's code draws it: weights N(0, 0.02^2), biases fox_bias_init (0: every gate 1/2)."""
    layer = input_layer("fox", n_layer=3, n_head=8, n_embd=64)
    weight = layer.fox_weight.detach().double().numpy()
    assert weight.shape == (3, 8, 64) and abs(weight.std() - 0.02) < 0.002 and abs(weight.mean()) < 0.002
    assert torch.equal(layer.fox_bias, torch.zeros(3, 8))
    assert torch.equal(input_layer("fox", fox_bias_init=5.0).fox_bias, torch.full((1, 4), 5.0))


# ---- both: training resumes as one run, and their settings are checked -------------------------------------------

@pytest.mark.parametrize("settings", [dict(pos_encoding="fox", fox_bias_init=2.0),
                                      dict(pos_encoding="dynamic_bias", dynamic_bias_depth=1, dynamic_bias_norm=True,
                                           dynamic_bias_log_distance=False)])
def test_training_resumes_as_one_run(tmp_path, char_data, settings):
    resumed_as_one_run(tmp_path, char_data, settings)


@pytest.mark.parametrize("name, value, owner", [("fox_bias_init", 5.0, "fox"),
                                                ("dynamic_bias_depth", 3, "dynamic_bias"),
                                                ("dynamic_bias_log_distance", False, "dynamic_bias"),
                                                ("dynamic_bias_norm", True, "dynamic_bias")])
def test_a_setting_of_theirs_under_another_encoding_is_one_line(name, value, owner):
    model_config = GPTConfig(pos_encoding="rope", **{name: value})
    assert unused_settings(TrainConfig(), model_config, [name]) == [
        f"{name} is a setting of pos_encoding={owner}, and this run's is rope"]
    assert unused_settings(TrainConfig(), GPTConfig(pos_encoding=owner, **{name: value}), [name]) == []


@pytest.mark.parametrize("settings, message", [
    (dict(pos_encoding="dynamic_bias", dynamic_bias_depth=0), r"^dynamic_bias_depth=0 must be at least 1 "),
    (dict(pos_encoding="dynamic_bias", n_embd=2, n_head=1), r"^pos_encoding='dynamic_bias' needs n_embd >= 4"),
    (dict(pos_encoding="fox", fox_bias_init=math.nan), r"^fox_bias_init=nan must be a finite number"),
    (dict(pos_encoding="fox", fox_bias_init=-math.inf), r"^fox_bias_init=-inf must be a finite number")])
def test_a_nonsense_setting_of_theirs_is_one_line(settings, message):
    with pytest.raises(ValueError, match=message) as refused:
        GPTConfig(**settings)
    assert "\n" not in str(refused.value)
