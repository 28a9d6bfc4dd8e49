"""The length-generalisation position features of positions.py against NumPy float64 references written in this
file from the papers' equations, not from the torch code: partial rotary (GPT-NeoX's rotary_pct), p-RoPE (Barbero
et al. 2024), CoPE (Golovneva et al. 2024) and randomized positions (Ruoss et al. 2023). Small shapes throughout."""

import math

import numpy as np
import pytest
import torch

import model as model_module
from layers.positions import cope_attention, cope_scores, random_positions, rotate
from model import GPT, GPTConfig, InputLayer

VOCAB = 37


def config_of(pos_encoding: str, n_embd: int = 32, n_head: int = 2, block_size: int = 16, n_layer: int = 2,
              **overrides) -> GPTConfig:
    return GPTConfig(block_size=block_size, vocab_size=VOCAB, n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                     pos_encoding=pos_encoding, **overrides)


@torch.no_grad()
def randomized(model: torch.nn.Module, seed: int = 0, std: float = 0.2, table_std: float = 1.0) -> torch.nn.Module:
    """Every parameter N(0, std^2), LayerNorm gains 1 + N(0, 0.1^2), position tables N(0, table_std^2): with
    GPT-2's init the position signal is too faint for a wrong position to show in the logits."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=g, dtype=torch.float64)
        if p.dim() == 1 and name.endswith("weight"):
            p.copy_(1.0 + 0.1 * noise)
        elif name.endswith(("wpe", "cope_table")):
            p.copy_(table_std * noise)
        else:
            p.copy_(std * noise)
    return model


def model_of(pos_encoding: str, seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return randomized(GPT(config_of(pos_encoding, **overrides)), seed=seed).eval()


def ids(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def rotate_half_np(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Su et al.'s rotation in the rotate-half layout, float64: with x = (x1, x2) split in halves and angles
    (T, half), (x1 cos - x2 sin, x2 cos + x1 sin); x (..., T, 2 half)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = np.cos(angles), np.sin(angles)
    return np.concatenate((x1 * cos - x2 * sin, x2 * cos + x1 * sin), axis=-1)


def repo_rotate(layer: InputLayer, x: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The repo's turned queries and keys of x (B, H, T, head_dim) at positions, float32 in, float64 out."""
    (q_cos, q_sin), (k_cos, k_sin) = layer.encoding.rotary(layer, torch.tensor(positions, dtype=torch.int64))
    xt = torch.tensor(x, dtype=torch.float32)
    return rotate(xt, q_cos, q_sin).double().numpy(), rotate(xt, k_cos, k_sin).double().numpy()


def as_float32(x: np.ndarray) -> np.ndarray:
    """x as the repo sees it (float32), back in float64: both sides then start from the same numbers."""
    return x.astype(np.float32).astype(np.float64)


# ---- partial rotary (GPT-NeoX's rotary_pct) -----------------------------------------------------------------------

def neox_partial_rotary(x: np.ndarray, positions: np.ndarray, r: int, base: float) -> np.ndarray:
    """GPT-NeoX's partial rotary: the first r features of each head turned as rope over r dimensions, in rotate-half
    pairs (j, j + r/2) with frequency base^(-2j/r); features r.. pass through."""
    inv_freq = base ** (-np.arange(0, r, 2, dtype=np.float64) / r)
    angles = positions.astype(np.float64)[:, None] * inv_freq[None, :]
    return np.concatenate((rotate_half_np(x[..., :r], angles), x[..., r:]), axis=-1)


def neox_to_repo_order(head_dim: int, r: int) -> np.ndarray:
    """order[repo slot] = NeoX feature: NeoX j < r/2 -> repo j, NeoX r/2 + j -> repo head_dim/2 + j, NeoX's
    pass-through features r.. fill the remaining repo slots in order."""
    half, rhalf = head_dim // 2, r // 2
    order = np.full(head_dim, -1)
    order[:rhalf] = np.arange(rhalf)
    order[half:half + rhalf] = np.arange(rhalf, r)
    order[order < 0] = np.arange(r, head_dim)
    return order


@pytest.mark.parametrize("n_embd, n_head, fraction, base", [
    (32, 2, 0.25, 10000.0), (32, 2, 0.5, 500.0), (64, 2, 0.25, 10000.0), (16, 2, 1.0, 10000.0), (32, 1, 0.125, 100.0),
])
def test_partial_rope_is_neox_rotary_up_to_a_permutation(n_embd, n_head, fraction, base):
    """The repo's turned q, k are NeoX's turned q, k with each head's features permuted, so every score q_n . k_m
    is NeoX's; the features NeoX passes through are the input's, bit for bit."""
    head_dim = n_embd // n_head
    r = round(head_dim * fraction)
    layer = InputLayer(config_of("partial_rope", n_embd=n_embd, n_head=n_head, partial_rope_fraction=fraction,
                                 rope_base=base))
    rng = np.random.default_rng(0)
    positions = np.array([0, 1, 2, 5, 9, 17, 33, 60])
    q, k = (as_float32(rng.standard_normal((2, 2, len(positions), head_dim))) for _ in range(2))
    q_neox, k_neox = neox_partial_rotary(q, positions, r, base), neox_partial_rotary(k, positions, r, base)
    scores_neox = q_neox @ np.swapaxes(k_neox, -1, -2)

    order = neox_to_repo_order(head_dim, r)
    assert sorted(order) == list(range(head_dim))
    q_repo, _ = repo_rotate(layer, q[..., order], positions)
    _, k_repo = repo_rotate(layer, k[..., order], positions)
    np.testing.assert_allclose(q_repo, q_neox[..., order], rtol=0, atol=2e-5)
    np.testing.assert_allclose(k_repo, k_neox[..., order], rtol=0, atol=2e-5)
    np.testing.assert_allclose(q_repo @ np.swapaxes(k_repo, -1, -2), scores_neox, rtol=0, atol=1e-4)
    passed = np.isin(order, np.arange(r, head_dim))  # the repo slots holding NeoX's pass-through features
    np.testing.assert_array_equal(q_repo[..., passed], q[..., order][..., passed])


@pytest.mark.parametrize("fraction", [0.0, -0.25, 1.5, 0.1, 0.0625, 0.1875])
def test_partial_rope_refuses_fractions_without_an_even_whole_number_of_dims(fraction):
    """head_dim 16: 0, negative, > 1, 1.6 dims, 1 dim, 3 dims are refused; 2 dims (0.125) and all (1.0) are not."""
    with pytest.raises(ValueError, match="partial_rope_fraction"):
        config_of("partial_rope", partial_rope_fraction=fraction)


def test_partial_rope_takes_even_whole_numbers_of_dims():
    for fraction in (0.125, 0.25, 0.75, 1.0):
        config_of("partial_rope", partial_rope_fraction=fraction)


# ---- p-RoPE (Barbero et al. 2024) ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n_embd, fraction, kept", [
    (32, 0.75, 6), (32, 0.5, 4), (32, 0.3, 2), (32, 0.2, 1), (64, 0.75, 12), (32, 1.0, 8),
])
def test_p_rope_keeps_the_highest_frequencies(n_embd, fraction, kept):
    """Pairs i < floor(fraction * head_dim/2) turn by pos * base^(-2i/head_dim) as rope's; the others do not turn."""
    head_dim = n_embd // 2
    half = head_dim // 2
    assert math.floor(fraction * half) == kept
    layer = InputLayer(config_of("p_rope", n_embd=n_embd, p_rope_fraction=fraction))
    inv_freq = 10000.0 ** (-2.0 * np.arange(half) / head_dim)
    inv_freq[kept:] = 0.0
    positions = np.array([0, 1, 3, 8, 15, 40, 63])
    q = as_float32(np.random.default_rng(1).standard_normal((2, 2, len(positions), head_dim)))
    expected = rotate_half_np(q, positions[:, None] * inv_freq[None, :])
    q_repo, k_repo = repo_rotate(layer, q, positions)
    np.testing.assert_allclose(q_repo, expected, rtol=0, atol=2e-5)
    np.testing.assert_allclose(k_repo, expected, rtol=0, atol=2e-5)
    still = np.r_[np.arange(kept, half), np.arange(half + kept, head_dim)]
    np.testing.assert_array_equal(q_repo[..., still], q[..., still])  # unturned pairs: the input exactly
    np.testing.assert_array_equal(k_repo[..., still], q[..., still])


def test_p_rope_at_fraction_one_is_rope_exactly():
    """p_rope_fraction=1.0 keeps every frequency: the same turns as rope, and the same model's logits, bit for bit."""
    positions = torch.arange(40)
    rope, p_rope = InputLayer(config_of("rope")), InputLayer(config_of("p_rope", p_rope_fraction=1.0))
    for a, b in zip(rope.encoding.rotary(rope, positions), p_rope.encoding.rotary(p_rope, positions), strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    idx = ids(2, 16)
    with torch.no_grad():
        assert torch.equal(model_of("rope")(idx)[0], model_of("p_rope", p_rope_fraction=1.0)(idx)[0])


@pytest.mark.parametrize("fraction", [0.0, 1.5, 0.1])
def test_p_rope_refuses_fractions_that_keep_nothing_or_more_than_all(fraction):
    with pytest.raises(ValueError, match="p_rope_fraction"):
        config_of("p_rope", p_rope_fraction=fraction)


# ---- CoPE (Golovneva et al. 2024) ----------------------------------------------------------------------------------

def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def cope_reference(q, k, v, table, query_pos=None):
    """CoPE's attention, float64, one query at a time: s_ij = q_i.k_j / sqrt(d) over keys j <= i, gates
    g_ij = sigmoid(s_ij), p_ij = sum_{t=j..i} g_it clamped to P-1, e[p] interpolated between the table's columns
    floor(p) and ceil(p), z_ij = s_ij + q_i.e[p_ij] / sqrt(d), softmax over j, sum of attn_ij v_j. Also returns
    q_i.e[p_ij] (B, H, T, K) (0 off the causal pairs) and every p_ij seen."""
    B, H, T, d = q.shape
    P = table.shape[1]
    query_pos = np.arange(T) if query_pos is None else query_pos
    out = np.zeros((B, H, T, v.shape[-1]))
    position_term = np.zeros((B, H, T, k.shape[2]))
    seen = []
    for b in range(B):
        for h in range(H):
            for t in range(T):
                i = int(query_pos[t])
                s = [float(q[b, h, t] @ k[b, h, j]) / math.sqrt(d) for j in range(i + 1)]
                g = [sigmoid(x) for x in s]
                z = []
                for j in range(i + 1):
                    p = min(sum(g[j:i + 1]), P - 1)
                    seen.append(p)
                    low, high = math.floor(p), math.ceil(p)
                    w = p - low
                    e = (1 - w) * table[:, low] + w * table[:, high]
                    position_term[b, h, t, j] = q[b, h, t] @ e
                    z.append(s[j] + position_term[b, h, t, j] / math.sqrt(d))
                z = np.array(z)
                a = np.exp(z - z.max())
                a /= a.sum()
                out[b, h, t] = a @ v[b, h, :i + 1]
    return out, position_term, np.array(seen)


def cope_inputs(T: int, K: int, d: int, P: int, seed: int):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2, 2, n, d)) for n in (T, K, K))
    return 1.5 * q, 1.5 * k, v, rng.standard_normal((d, P))


@pytest.mark.parametrize("P", [3, 7, 20])
def test_cope_attention_equals_the_papers_equations(P):
    """Causal (mask None), T=6: P=3 clamps most counts at 2, P=7 (T+1) and 20 never clamp; counts are fractional."""
    T, d = 6, 8
    q, k, v, table = cope_inputs(T, T, d, P, seed=P)
    expected, position_term, seen = cope_reference(q, k, v, table)
    assert np.any(seen % 1 > 0.01)  # fractional positions interpolate
    assert np.any(seen == P - 1) == (P == 3)  # only the small table is clamped
    tq, tk, tv, tt = (torch.tensor(x) for x in (q, k, v, table))
    got = cope_attention(tq, tk, tv, None, tt, 0.0)
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-10)
    scores = (tq @ tk.transpose(-1, -2) / math.sqrt(d)).masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(),
                                                                     float("-inf"))
    causal = np.tril(np.ones((T, T), dtype=bool))
    np.testing.assert_allclose(cope_scores(tq, scores, tt).numpy()[..., causal], position_term[..., causal],
                               rtol=0, atol=1e-10)


@pytest.mark.parametrize("P", [3, 11])
def test_cope_attention_with_a_cached_layout(P):
    """Queries at positions 5..7 over a 10-key cache, a bool mask mask[t, j] = j <= query_pos[t]: the keys after
    each query (unwritten cache slots) change nothing."""
    d, query_pos = 8, np.array([5, 6, 7])
    q, k, v, table = cope_inputs(len(query_pos), 10, d, P, seed=10 + P)
    expected, _, seen = cope_reference(q, k, v, table, query_pos)
    assert np.any(seen == P - 1) == (P == 3)
    mask = torch.arange(10)[None, :] <= torch.tensor(query_pos)[:, None]
    got = cope_attention(*(torch.tensor(x) for x in (q, k, v)), mask, torch.tensor(table), 0.0)
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-10)


def test_cope_tables_are_one_per_layer_and_zero_at_first():
    torch.manual_seed(0)
    model = GPT(config_of("cope", n_layer=3, block_size=12))
    assert model.input_layer.cope_table.shape == (3, 16, 13)
    assert torch.count_nonzero(model.input_layer.cope_table) == 0
    assert InputLayer(config_of("cope", n_layer=3, cope_positions=5)).cope_table.shape == (3, 16, 5)


@pytest.mark.parametrize("cope_positions", [0, 4])
def test_cope_cached_decoding_equals_the_uncached_forward(cope_positions):
    """Eval mode, random tables (cope_positions=4 clamps): one token at a time with a KV cache = one forward."""
    model = model_of("cope", cope_positions=cope_positions)
    idx = ids(1, 12, seed=3)
    with torch.no_grad():
        full = model(idx)[0]
        cache = model.make_cache(1)
        steps = torch.cat([model(idx[:, t:t + 1], cache=cache)[0] for t in range(idx.size(1))], dim=1)
        torch.testing.assert_close(steps, full, rtol=0, atol=1e-5)
        model.input_layer.cope_table.zero_()
        assert (model(idx)[0] - full).abs().max() > 1e-2  # the table is read: the comparison can see it


# ---- randomized positions (Ruoss et al. 2023) ----------------------------------------------------------------------

def test_random_positions_are_sorted_distinct_in_range_and_vary():
    cpu = torch.device("cpu")
    torch.manual_seed(0)
    draws = [random_positions(8, 50, cpu) for _ in range(6)]
    for draw in draws:
        assert draw.dtype == torch.int64 and draw.shape == (8,)
        assert bool((draw[1:] > draw[:-1]).all()) and int(draw.min()) >= 0 and int(draw.max()) < 50
    assert len({tuple(d.tolist()) for d in draws}) > 1
    assert torch.equal(random_positions(16, 16, cpu), torch.arange(16))


def test_random_positions_follow_torchs_global_generator():
    """The same seed draws the same positions; restoring the generator's state (a resumed run) redraws them."""
    cpu = torch.device("cpu")
    torch.manual_seed(7)
    first = random_positions(10, 64, cpu)
    torch.manual_seed(7)
    assert torch.equal(random_positions(10, 64, cpu), first)
    state = torch.get_rng_state()
    later = random_positions(10, 64, cpu)
    torch.manual_seed(123)
    random_positions(10, 64, cpu)
    torch.set_rng_state(state)
    assert torch.equal(random_positions(10, 64, cpu), later)


def test_random_positions_are_a_uniform_subset():
    """Every position is drawn with probability seq_len/limit (a uniform subset, as the paper samples)."""
    torch.manual_seed(0)
    counts = torch.zeros(10)
    for _ in range(2000):
        counts[random_positions(4, 10, torch.device("cpu"))] += 1
    assert torch.all((counts / 2000 - 0.4).abs() < 0.05), counts


@pytest.mark.parametrize("pos_encoding", ["learned", "sinusoidal", "rope"])
def test_random_positions_settings(pos_encoding):
    config_of(pos_encoding, random_positions=16)
    config_of(pos_encoding, random_positions=100)
    with pytest.raises(ValueError, match="random_positions"):
        config_of(pos_encoding, random_positions=15)


@pytest.mark.parametrize("pos_encoding", ["learned", "sinusoidal", "rope", "partial_rope", "p_rope", "xpos"])
def test_random_positions_past_2_to_the_24_are_refused_before_the_draw(pos_encoding):
    """10**10 was taken, and the first step's randperm asked for 80 GB (a traceback). Past 2^24, float32 cannot tell
    neighbouring positions apart: the angles of two distinct positions would be the same."""
    settings = dict(xpos_scale_base=2.0**24) if pos_encoding == "xpos" else {}  # xPos's own limit, out of the way
    with pytest.raises(ValueError, match=r"random_positions=10000000000 is past 2\*\*24 = 16,777,216: .* \(80.0 GB "
                                         r"of int64\); give random_positions <= 16777216"):
        config_of(pos_encoding, random_positions=10**10, **settings)
    with pytest.raises(ValueError, match=r"random_positions=16777217 is past 2\*\*24"):
        config_of(pos_encoding, random_positions=2**24 + 1, **settings)
    assert config_of(pos_encoding, random_positions=2**24, **settings).random_positions == 2**24
    assert torch.tensor(2**24 + 1, dtype=torch.float32) == torch.tensor(2**24, dtype=torch.float32)
    assert torch.tensor(2**24 - 1, dtype=torch.float32) != torch.tensor(2**24, dtype=torch.float32)


@pytest.mark.parametrize("pos_encoding", ["alibi", "none", "t5", "kerple", "fire", "cope"])
def test_random_positions_refused_where_positions_are_not_absolute(pos_encoding):
    with pytest.raises(ValueError, match="random_positions"):
        config_of(pos_encoding, random_positions=64)


def test_learned_table_has_random_positions_rows():
    """random_positions=N: wpe has N rows, and eval mode places positions 0..N-1 (N tokens, not N+1)."""
    model = model_of("learned", random_positions=24)
    assert model.input_layer.wpe.shape == (24, 32)
    with torch.no_grad():
        assert model(ids(1, 24))[0].shape == (1, 24, VOCAB)
        with pytest.raises(ValueError, match="out of range"):
            model(ids(1, 25))


def sinusoid_np(positions: np.ndarray, n_embd: int, amplitude: float) -> np.ndarray:
    """Vaswani et al.: PE(pos, 2i) = sin(pos / 10000^(2i/n_embd)), PE(pos, 2i+1) = cos(same), times amplitude."""
    angles = positions.astype(np.float64)[:, None] / 10000.0 ** (np.arange(0, n_embd, 2) / n_embd)[None, :]
    table = np.zeros((len(positions), n_embd))
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    return amplitude * table


@pytest.mark.parametrize("pos_encoding", ["learned", "sinusoidal", "rope"])
def test_training_forward_reads_a_random_sorted_subset_of_positions(pos_encoding, monkeypatch):
    """model.train(), no cache: the positions are one draw of random_positions (recorded through a wrapper), sorted,
    distinct, within 0..N-1; the first block's input is wte[idx] + the encoding's term at those positions (NumPy),
    rope's turns of queries and keys are those positions' (NumPy), and the logits are the forward at those positions;
    eval mode draws nothing and is deterministic."""
    N, T = 40, 12
    drawn = []

    def recording(seq_len, limit, device):
        drawn.append((seq_len, limit, random_positions(seq_len, limit, device)))
        return drawn[-1][2]

    monkeypatch.setattr(model_module, "random_positions", recording)
    model = model_of(pos_encoding, random_positions=N)
    inputs, placed = [], []
    model.blocks[0].register_forward_pre_hook(lambda module, args: inputs.append((args[0].detach(), args[4])))
    model.input_layer.register_forward_pre_hook(lambda module, args: placed.append(args[1]))
    idx = ids(2, T, seed=5)
    torch.manual_seed(11)
    with torch.no_grad():
        model.train()
        trained = model(idx)[0]
        model.eval()
        evaluated, again = model(idx)[0], model(idx)[0]
        assert len(drawn) == 1  # eval mode draws nothing
        seq_len, limit, positions = drawn[0]
        assert (seq_len, limit) == (T, N)
        assert bool((positions[1:] > positions[:-1]).all()) and int(positions[0]) >= 0 and int(positions[-1]) < N
        assert not torch.equal(positions, torch.arange(T))
        assert torch.equal(placed[0], positions) and torch.equal(placed[1], torch.arange(T))
        at_positions = model.blocks_and_head(model.input_layer(idx, positions), positions, None)
    wte = model.input_layer.wte.detach().double().numpy()
    pos = positions.numpy()
    term = {"learned": lambda: model.input_layer.wpe.detach().double().numpy()[pos],
            "sinusoidal": lambda: sinusoid_np(pos, 32, model.config.sinusoidal_amplitude),
            "rope": lambda: np.zeros((T, 32))}[pos_encoding]()
    np.testing.assert_allclose(inputs[0][0].double().numpy(), wte[idx.numpy()] + term[None], rtol=0, atol=1e-6)
    if pos_encoding == "rope":  # queries and keys both turned at the drawn positions: pos * 10000^(-2i/head_dim)
        angles = pos[:, None] * 10000.0 ** (-np.arange(0, 16, 2) / 16)[None, :]
        angles = np.concatenate((angles, angles), axis=-1)
        for cos, sin in inputs[0][1]:
            np.testing.assert_allclose(cos.double().numpy(), np.cos(angles), rtol=0, atol=1e-5)
            np.testing.assert_allclose(sin.double().numpy(), np.sin(angles), rtol=0, atol=1e-5)
    else:
        assert inputs[0][1] is None
    torch.testing.assert_close(trained, at_positions, rtol=0, atol=1e-5)
    assert torch.equal(evaluated, again)
    assert (trained - evaluated).abs().max() > 1e-3


@pytest.mark.parametrize("pos_encoding", ["learned", "sinusoidal", "rope"])
def test_eval_and_cached_decoding_use_positions_from_zero(pos_encoding):
    """Eval mode and a cache (in train mode too) place tokens at 0..T-1: the logits are those of the same weights
    without random_positions, a learned table cut to its first block_size rows."""
    randomized_model = model_of(pos_encoding, random_positions=48)
    plain = GPT(config_of(pos_encoding)).eval()
    state = dict(randomized_model.state_dict())
    if pos_encoding == "learned":
        state["input_layer.wpe"] = state["input_layer.wpe"][:16]
    plain.load_state_dict(state)
    idx = ids(1, 16, seed=8)
    with torch.no_grad():
        expected = plain(idx)[0]
        torch.testing.assert_close(randomized_model(idx)[0], expected, rtol=0, atol=1e-6)
        for train_mode in (False, True):
            randomized_model.train(train_mode)
            cache = randomized_model.make_cache(1)
            first = randomized_model(idx[:, :5], cache=cache)[0]
            rest = [randomized_model(idx[:, t:t + 1], cache=cache)[0] for t in range(5, 16)]
            torch.testing.assert_close(torch.cat([first, *rest], dim=1), expected, rtol=0, atol=1e-5)
