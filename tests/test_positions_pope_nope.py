"""The encodings x-transformers and HF transformers added, against NumPy float64 versions written in this file from
their papers and reference code, not from the torch code: PoPE (Gopalakrishnan et al. 2025, x-transformers'
polar_pos_emb), rope on some heads (x-transformers' rotate_num_heads) and rope with NoPE layers (HF's no_rope_layers,
Llama 4 and SmolLM3). Cached, compiled and left-padded decoding of each are the tests parametrised over
POS_ENCODINGS (test_decode.py, test_model.py, test_batched_prompts.py)."""

import copy

import numpy as np
import pytest
import torch
from helpers import BLOCK, VOCAB, numpy_gpt_logits, random_ids, randomize_, resumed_as_one_run

from layers.positions import polar
from model import GPT, GPTConfig

H, D = 3, 16  # three heads of 16: head_rope turns one or two of them


def model_of(pos_encoding: str, seed: int = 0, **overrides) -> GPT:
    """A 4-layer model of 3 heads, every weight random (randomize_), PoPE's delta drawn from U(-8, 2): past both ends
    of [-2 pi, 0], where it is read clamped."""
    torch.manual_seed(seed)
    config = GPTConfig(block_size=BLOCK, vocab_size=VOCAB, n_layer=4, n_head=H, n_embd=H * D,
                       pos_encoding=pos_encoding, rope_base=100.0, **overrides)
    model = randomize_(GPT(config), seed=seed).eval()
    if pos_encoding == "pope":
        with torch.no_grad():
            model.input_layer.pope_bias.uniform_(-8.0, 2.0, generator=torch.Generator().manual_seed(seed))
    return model


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def rope_np(x: np.ndarray, pos: np.ndarray, base: float) -> np.ndarray:
    """Su et al.'s rotation, float64: the pairs (x_i, x_{i+d/2}) as complex numbers times e^(i pos theta_i),
    theta_i = base^(-2i/d)."""
    d = x.shape[-1]
    theta = base ** (-2.0 * np.arange(d // 2) / d)
    z = (x[..., :d // 2] + 1j * x[..., d // 2:]) * np.exp(1j * pos[:, None] * theta)
    return np.concatenate([z.real, z.imag], axis=-1)


def pope_scores_np(q: np.ndarray, k: np.ndarray, query_pos: np.ndarray, key_pos: np.ndarray, delta: np.ndarray,
                   base: float) -> np.ndarray:
    """PoPE's scores (..., H, T, K) of q (..., H, T, d) at query_pos over k (..., H, K, d) at key_pos, float64, as the
    paper writes them: q~_tc = softplus(q_tc) e^(i t theta_c), k~_sc = softplus(k_sc) e^(i (s theta_c + delta_c)),
    theta_c = base^(-c/d) for c < d, a_ts = Re(q~_t^H k~_s) / sqrt(d); delta (H, d) clamped to [-2 pi, 0] as
    x-transformers' PolarEmbedding clamps it."""
    d = q.shape[-1]
    theta = base ** (-np.arange(d) / d)
    delta = np.clip(delta, -2 * np.pi, 0.0)[:, None, :]
    q_complex = softplus(q) * np.exp(1j * query_pos[:, None] * theta)
    k_complex = softplus(k) * np.exp(1j * (key_pos[:, None] * theta + delta))
    return np.real(np.conj(q_complex) @ np.swapaxes(k_complex, -1, -2)) / np.sqrt(d)


def reference_logits(model: GPT, idx: np.ndarray) -> np.ndarray:
    """The whole model in NumPy float64 from its state dict (GPT-2's block: LayerNorm, causal attention, tanh GELU),
    its queries and keys turned as the encoding's source says: head_rope rope on heads 0 .. rope_heads-1 alone,
    layer_rope rope except in the layers HF's no_rope_layers marks 0, int((i + 1) % interval != 0), pope
    pope_scores_np."""
    c = model.config
    heads, d = c.n_head, c.n_embd // c.n_head
    pos = np.arange(idx.shape[1])
    no_rope_layers = [int(c.pos_encoding != "layer_rope" or (i + 1) % c.nope_every != 0)  # HF's: 1 turns, 0 not
                      for i in range(c.n_layer)]

    def scores(W, layer, normed, q, k):
        causal = np.where(pos[:, None] >= pos[None, :], 0.0, -np.inf)
        if c.pos_encoding == "pope":
            return pope_scores_np(q, k, pos, pos, W["input_layer.pope_bias"], c.rope_base) + causal
        if c.pos_encoding == "head_rope":
            turned = c.rope_heads or heads // 2
            q, k = (np.concatenate([rope_np(t[:, :turned], pos, c.rope_base), t[:, turned:]], axis=1) for t in (q, k))
        elif no_rope_layers[layer]:
            q, k = rope_np(q, pos, c.rope_base), rope_np(k, pos, c.rope_base)
        return q @ np.swapaxes(k, -1, -2) / np.sqrt(d) + causal

    return numpy_gpt_logits(model, idx, scores)


CASES = {"pope": {}, "head_rope 1": {"rope_heads": 1}, "head_rope 0": {}, "head_rope 2": {"rope_heads": 2},
         "layer_rope 2": {"nope_every": 2}, "layer_rope 3": {"nope_every": 3}}


@pytest.mark.parametrize("case", CASES)
@torch.no_grad()
def test_whole_model_matches_the_float64_reference(case):
    model = model_of(case.split()[0], **CASES[case])
    idx = random_ids(2, BLOCK, seed=3)
    expected = reference_logits(model, idx.numpy())
    # measured: float32 2.6e-6 (logits up to 3.9); float64 6.5e-7 for the rope ones (their angles stay float32),
    # 2e-7 for pope (its frequencies are stored float32)
    np.testing.assert_allclose(model(idx)[0].double().numpy(), expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(copy.deepcopy(model).double()(idx)[0].numpy(), expected, rtol=0, atol=1e-6)
    # the positions matter: read as rope everywhere, the reference is far off
    rope = copy.deepcopy(model)
    rope.config = GPTConfig(**{**vars(model.config), "pos_encoding": "rope"})
    assert np.abs(reference_logits(rope, idx.numpy()) - expected).max() > 1e-2


@torch.no_grad()
def test_pope_scores_over_a_cache_equal_the_papers():
    """Queries at 40..46 over keys at 0..46 (a cache): the repo's turned queries and keys, scaled as SDPA scales them
    (1/sqrt of their width, 2 head_dim), are the paper's scores; they depend on the distance alone."""
    model = model_of("pope", seed=1)
    layer = model.input_layer
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(2, H, 7, D, generator=g), torch.randn(2, H, 47, D, generator=g)
    query_pos, key_pos = torch.arange(40, 47), torch.arange(47)
    (q_cos, q_sin), _ = layer.encoding.rotary(layer, query_pos)
    _, (k_cos, k_sin) = layer.encoding.rotary(layer, key_pos)
    q_turned, k_turned = polar(q, q_cos, q_sin).double(), polar(k, k_cos, k_sin).double()
    assert q_turned.size(-1) == k_turned.size(-1) == 2 * D == layer.encoding.key_width()
    ours = (q_turned @ k_turned.transpose(-1, -2) / np.sqrt(2 * D)).numpy()
    delta = layer.pope_bias.double().numpy()
    assert (delta < -2 * np.pi).any() and (delta > 0).any()  # both clamps are read
    expected = pope_scores_np(q.double().numpy(), k.double().numpy(), query_pos.numpy(), key_pos.numpy(), delta,
                              model.config.rope_base)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5)  # measured 1.5e-6: float32 angles up to 47
    shifted = pope_scores_np(q.double().numpy(), k.double().numpy(), query_pos.numpy() + 1000,
                             key_pos.numpy() + 1000, delta, model.config.rope_base)
    np.testing.assert_allclose(shifted, expected, rtol=0, atol=1e-9)


def test_pope_starts_with_no_phase_bias_and_the_papers_frequencies():
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=BLOCK, vocab_size=VOCAB, n_layer=2, n_head=H, n_embd=H * D, pos_encoding="pope"))
    layer = model.input_layer
    assert torch.equal(layer.pope_bias, torch.zeros(H, D))
    np.testing.assert_allclose(layer.pope_inv_freq.numpy(), 10000.0 ** (-np.arange(D) / D), rtol=1e-7)
    assert layer.num_position_params() == H * D
    cache = model.make_cache(2)
    assert cache.keys[0].shape == (2, H, BLOCK, 2 * D) and cache.values[0].shape == (2, H, BLOCK, D)


@torch.no_grad()
def test_head_rope_leaves_the_other_heads_exactly_as_they_are():
    model = model_of("head_rope", rope_heads=2)
    layer = model.input_layer
    x = torch.randn(2, H, 9, D, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(30, 39)
    (cos, sin), keys = layer.encoding.rotary(layer, positions)
    turned = layer.encoding.turn(x, cos, sin)
    assert torch.equal(turned[:, 2:], x[:, 2:])
    np.testing.assert_allclose(turned[:, :2].double().numpy(), rope_np(x[:, :2].double().numpy(), positions.numpy(),
                                                                        100.0), rtol=0, atol=1e-5)
    assert all(torch.equal(a, b) for a, b in zip((cos, sin), keys, strict=True))


@pytest.mark.parametrize("n_layer, nope_every, nope", [(12, 4, [3, 7, 11]), (6, 4, [3]), (4, 2, [1, 3]),
                                                       (2, 2, [1])])
def test_layer_rope_drops_rope_where_hfs_no_rope_layers_does(n_layer, nope_every, nope):
    encoding = GPT(GPTConfig(block_size=BLOCK, vocab_size=VOCAB, n_layer=n_layer, n_head=2, n_embd=16,
                             pos_encoding="layer_rope", nope_every=nope_every)).input_layer.encoding
    assert [layer for layer in range(n_layer) if not encoding.rotates_layer(layer)] == nope
    assert GPTConfig().nope_every == 4  # HF's no_rope_layer_interval, Llama 4's and SmolLM3's


@pytest.mark.parametrize("settings, message", [
    ({"pos_encoding": "head_rope", "rope_heads": 3}, r"rope_heads=3 must be in \[1, n_head=3\) or 0 \(n_head // 2 = 1"),
    ({"pos_encoding": "head_rope", "rope_heads": -1}, r"rope_heads=-1 must be in \[1, n_head=3\)"),
    ({"pos_encoding": "head_rope", "n_head": 1, "n_embd": 16}, r"rope_heads=0 must be in \[1, n_head=1\)"),
    ({"pos_encoding": "layer_rope"}, r"nope_every=4 must be in \[2, n_layer=2\].*past n_layer \(none\) "
                                     "pos_encoding=rope"),
    ({"pos_encoding": "layer_rope", "nope_every": 1}, r"nope_every=1 must be in \[2, n_layer=2\].*1 \(every layer\) "
                                                      "is pos_encoding=none"),
    ({"pos_encoding": "pope", "position_scaling": "ntk", "position_scale": 2.0},
     r"position_scaling='ntk' does not apply to pos_encoding='pope', which takes none"),
])
def test_settings_that_cannot_work_are_refused_in_one_line(settings, message):
    config = {"block_size": BLOCK, "vocab_size": VOCAB, "n_layer": 2, "n_head": 3, "n_embd": 48, **settings}
    with pytest.raises(ValueError, match=message) as error:
        GPTConfig(**config)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("settings", [{"pos_encoding": "pope"}, {"pos_encoding": "head_rope", "rope_heads": 1},
                                      {"pos_encoding": "layer_rope", "nope_every": 2}], ids=lambda s: s["pos_encoding"])
def test_resume_equals_an_uninterrupted_run(tmp_path, char_data, settings):
    """Dropout on; PoPE's delta is a parameter of its own, trained (with its AdamW state)."""
    whole = resumed_as_one_run(tmp_path, char_data, {**settings, "n_layer": 2}, dropout=0.1)
    if settings["pos_encoding"] == "pope":
        assert whole["model"].input_layer.pope_bias.abs().max() > 0
