"""Tests of model.py, each against something independent of the code under test: a formula, the NumPy
reference in tests/input_layer_numpy.py, a NumPy float64 forward of the whole model (rope, alibi), Hugging Face
transformers' GPT2LMHeadModel and rotary function, the uncached forward pass, or a finite-difference gradient.
Small configs only; nothing is downloaded.
"""

import copy
import inspect
import math
from dataclasses import replace

import input_layer_numpy as ref
import numpy as np
import pytest
import torch
from helpers import BLOCK, TORCH, VOCAB, max_abs, numpy_gpt_logits, random_ids, randomize_, tiny_config, tiny_model
from scipy import stats
from torch import nn
from torch.nn import functional as F

from gpt import gpt2_weights
from gpt.generate import filter_logits, generate, sample_next_token
from layers import kernels
from layers import positions as P
from model import GPT, GPTConfig, InputLayer

POS_ENCODINGS = P.POS_ENCODINGS
# The sinusoidal table is Vaswani's scaled to the token table's init std (0.02): GPTConfig.sinusoidal_amplitude.
AMPLITUDE = 0.02


def cached_logits(model: GPT, idx: torch.Tensor, chunks: list[int], **cache_kw) -> torch.Tensor:
    """Feed idx through a fresh KV cache in the given chunk sizes; the logits of every step, concatenated."""
    assert sum(chunks) == idx.size(1)
    cache = model.make_cache(idx.size(0), **cache_kw)
    out, start = [], 0
    for n in chunks:
        assert cache.length == start
        out.append(model(idx[:, start:start + n], cache=cache)[0])
        start += n
    assert cache.length == idx.size(1)
    return torch.cat(out, dim=1)


# ----------------------------------------------------------------------------------------------------------
# KV cache == full forward


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@torch.no_grad()
def test_cached_token_by_token_matches_full_forward(pos_encoding):
    model = tiny_model(pos_encoding)
    idx = random_ids(1, BLOCK)
    full = model(idx)[0]
    stepwise = cached_logits(model, idx, [1] * BLOCK)
    assert max_abs(stepwise, full) < 1e-5


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@pytest.mark.parametrize("batch", [1, 3])
@torch.no_grad()
def test_cached_uneven_chunks_match_full_forward(pos_encoding, batch):
    model = tiny_model(pos_encoding)
    idx = random_ids(batch, BLOCK, seed=1)
    full = model(idx)[0]
    chunked = cached_logits(model, idx, [3, 1, 5, 2, 5])  # chunks > 1 after a non-empty cache need the offset mask
    assert max_abs(chunked, full) < 1e-5


# ----------------------------------------------------------------------------------------------------------
# Positions are absolute


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
def test_input_layer_uses_absolute_positions(pos_encoding):
    config = tiny_config(pos_encoding)
    layer = randomize_(InputLayer(config)).double()
    idx = torch.tensor([[3, 3, 7, 0], [1, 36, 3, 2]])
    past_length = 9
    wte = layer.wte.detach().numpy()
    if pos_encoding == "learned":
        expected = ref.forward(idx.numpy(), wte, layer.wpe.detach().numpy(), past_length)
    elif pos_encoding == "sinusoidal":
        expected = wte[idx.numpy()] + AMPLITUDE * ref.sinusoidal_table(np.arange(past_length, past_length + 4),
                                                                        config.n_embd)
    else:  # none, and rope and alibi, which act inside attention
        expected = wte[idx.numpy()]
    h = layer(idx, torch.arange(past_length, past_length + 4)).detach().numpy()
    # 1e-12 in float64, except that the model keeps inv_freq in float32 (relative error 2^-24, so sin/cos at
    # position <= 12 are off by < 12 * 2^-24 ~ 1e-6) even after .double()
    np.testing.assert_allclose(h, expected, rtol=0, atol=1e-6 if pos_encoding == "sinusoidal" else 1e-12)
    if pos_encoding in ("learned", "sinusoidal"):  # and it is not the same as starting at position 0
        assert np.abs(h - layer(idx, torch.arange(4)).detach().numpy()).max() > 1e-2


@torch.no_grad()
def test_cached_token_is_not_put_at_position_zero():
    model = tiny_model("learned")
    idx = random_ids(1, 7, seed=2)
    seen = []
    model.input_layer.register_forward_hook(lambda module, args, out: seen.append(out.detach().clone()))
    cache = model.make_cache(1)
    model(idx[:, :6], cache=cache)
    last_cached = model(idx[:, 6:], cache=cache)[0][:, -1]

    # the input layer gave the 7th token wte[token] + wpe[6], per the NumPy reference
    wte, wpe = model.input_layer.wte.numpy(), model.input_layer.wpe.numpy()
    np.testing.assert_allclose(seen[-1].numpy(), ref.forward(idx[:, 6:].numpy(), wte, wpe, 6), rtol=0, atol=1e-6)
    assert np.abs(seen[-1].numpy() - ref.forward(idx[:, 6:].numpy(), wte, wpe, 0)).max() > 1e-2

    # the cached logits are those of the full forward, not those of the token run alone at position 0
    assert max_abs(last_cached, model(idx)[0][:, -1]) < 1e-5
    assert max_abs(last_cached, model(idx[:, 6:])[0][:, -1]) > 1e-2


# ----------------------------------------------------------------------------------------------------------
# Parity with Hugging Face transformers


def hf_config(**overrides):
    from transformers import GPT2Config

    kw = dict(vocab_size=101, n_positions=32, n_embd=48, n_layer=2, n_head=3, activation_function="gelu_new",
              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
              bos_token_id=None, eos_token_id=None, attn_implementation="eager")
    kw.update(overrides)
    return GPT2Config(**kw)


def random_hf_gpt2(seed: int = 0):
    from transformers import GPT2LMHeadModel

    torch.manual_seed(seed)
    return randomize_(GPT2LMHeadModel(hf_config()), seed=seed).eval()


def ours_like(hf) -> GPT:
    c = hf.config
    return GPT(GPTConfig(block_size=c.n_positions, vocab_size=c.vocab_size, n_layer=c.n_layer, n_head=c.n_head,
                         n_embd=c.n_embd, bias=True)).eval()


def hf_forward(hf, ids: torch.Tensor, hf_cache=None):
    """One step of HF's model with its own cache; works with transformers 4 (past_key_values) and 5 (cache)."""
    params = inspect.signature(hf.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    out = hf(ids, use_cache=True, **({} if hf_cache is None else {cache_kw: hf_cache}))
    new_cache = out.get("cache") if out.get("cache") is not None else out.get("past_key_values")
    return out.logits, new_cache


@torch.no_grad()
def test_hf_parity_full_forward(tmp_path):
    hf = random_hf_gpt2()
    idx = random_ids(2, 32, vocab=101, seed=3)
    expected = hf(idx).logits

    copied = ours_like(hf)
    copied.load_state_dict(gpt2_weights.hf_to_ours(hf.state_dict()))
    assert copied.lm_head.weight is copied.input_layer.wte
    assert max_abs(copied(idx)[0], expected) < 1e-4

    hf.save_pretrained(tmp_path)
    loaded = gpt2_weights.from_pretrained(str(tmp_path)).eval()
    assert max_abs(loaded(idx)[0], expected) < 1e-4


@torch.no_grad()
def test_hf_parity_with_both_caches():
    hf = random_hf_gpt2(seed=1)
    ours = ours_like(hf)
    ours.load_state_dict(gpt2_weights.hf_to_ours(hf.state_dict()))
    idx = random_ids(2, 32, vocab=101, seed=4)
    cache, hf_cache, start = ours.make_cache(2), None, 0
    for n in (5, 1, 1, 3, 1, 7, 2, 1, 1, 10):
        step = idx[:, start:start + n]
        hf_logits, hf_cache = hf_forward(hf, step, hf_cache)
        assert max_abs(ours(step, cache=cache)[0], hf_logits) < 1e-4, f"step at position {start}"
        start += n
    assert start == 32 == cache.length


def write_pytorch_model_bin(hf, directory) -> None:
    """A pytorch_model.bin checkpoint. transformers >= 5 ignores safe_serialization=False and writes
    safetensors; then write the file the way the original GPT-2 checkpoints on the hub have it: no
    'transformer.' prefix, the attention-mask buffers attn.bias / attn.masked_bias, no lm_head."""
    hf.save_pretrained(directory, safe_serialization=False)
    if (directory / "pytorch_model.bin").exists():
        return
    (directory / "model.safetensors").unlink()
    n = hf.config.n_positions
    state = {k.removeprefix("transformer."): v for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    for layer in range(hf.config.n_layer):
        state[f"h.{layer}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
        state[f"h.{layer}.attn.masked_bias"] = torch.tensor(-1e4)
    torch.save(state, directory / "pytorch_model.bin")


@torch.no_grad()
def test_from_pretrained_reads_pytorch_model_bin(tmp_path):
    hf = random_hf_gpt2(seed=2)
    write_pytorch_model_bin(hf, tmp_path)
    assert not (tmp_path / "model.safetensors").exists()
    loaded = gpt2_weights.from_pretrained(str(tmp_path)).eval()
    idx = random_ids(2, 20, vocab=101, seed=5)
    assert max_abs(loaded(idx)[0], hf(idx).logits) < 1e-4


@pytest.mark.parametrize("bias", [True, False])
@torch.no_grad()
def test_export_hf_loads_into_transformers(tmp_path, bias):
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    ours = randomize_(GPT(GPTConfig(block_size=32, vocab_size=101, n_layer=2, n_head=3, n_embd=48, bias=bias)))
    gpt2_weights.export_hf(ours.eval(), tmp_path)
    hf = GPT2LMHeadModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert torch.equal(hf.lm_head.weight, ours.input_layer.wte)
    idx = random_ids(2, 32, vocab=101, seed=6)
    assert max_abs(hf(idx).logits, ours(idx)[0]) < 1e-4


# ----------------------------------------------------------------------------------------------------------
# The NumPy reference of the input layer


def numpy_problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    vocab, block, n_embd, past_length = 7, 10, 3, 3
    idx = np.array([[1, 4, 1, 1], [4, 0, 6, 1]])  # ids repeat in a row and across rows; 2, 3, 5 unused
    wte, wpe = rng.standard_normal((vocab, n_embd)), rng.standard_normal((block, n_embd))
    R = rng.standard_normal((*idx.shape, n_embd))  # loss = sum(h * R), so dloss/dh = R
    return idx, wte, wpe, R, past_length


def test_numpy_backward_matches_finite_differences():
    idx, wte, wpe, R, past_length = numpy_problem()
    dwte, dwpe = ref.backward(idx, R, wte.shape[0], wpe.shape[0], past_length)

    def loss(wte, wpe):
        return float(np.sum(ref.forward(idx, wte, wpe, past_length) * R))

    eps = 1e-6
    for table, grad, which in ((wte, dwte, 0), (wpe, dwpe, 1)):
        numeric = np.zeros_like(table)
        for i in np.ndindex(table.shape):
            plus, minus = table.copy(), table.copy()
            plus[i] += eps
            minus[i] -= eps
            args_plus = (plus, wpe) if which == 0 else (wte, plus)
            args_minus = (minus, wpe) if which == 0 else (wte, minus)
            numeric[i] = (loss(*args_plus) - loss(*args_minus)) / (2 * eps)
        used = grad != 0
        rel = np.abs(grad - numeric)[used] / np.maximum(np.abs(grad), np.abs(numeric))[used]
        assert rel.max() < 1e-6
        assert np.all(numeric[~used] == 0)  # entries that do not enter the loss
    assert np.all(dwte[[2, 3, 5]] == 0)
    assert np.all(dwpe[:past_length] == 0) and np.all(dwpe[past_length + idx.shape[1]:] == 0)
    assert np.all(dwpe[past_length:past_length + idx.shape[1]] != 0)


def test_numpy_reference_matches_torch_autograd():
    idx, wte, wpe, R, past_length = numpy_problem(seed=1)
    config = GPTConfig(block_size=wpe.shape[0], vocab_size=wte.shape[0], n_layer=1, n_head=1, n_embd=wte.shape[1])
    layer = InputLayer(config).double()
    with torch.no_grad():
        layer.wte.copy_(torch.from_numpy(wte))
        layer.wpe.copy_(torch.from_numpy(wpe))
    h = layer(torch.from_numpy(idx), torch.arange(past_length, past_length + idx.shape[1]))
    (h * torch.from_numpy(R)).sum().backward()

    np.testing.assert_allclose(h.detach().numpy(), ref.forward(idx, wte, wpe, past_length), rtol=0, atol=1e-12)
    dwte, dwpe = ref.backward(idx, R, wte.shape[0], wpe.shape[0], past_length)
    np.testing.assert_allclose(layer.wte.grad.numpy(), dwte, rtol=0, atol=1e-12)
    np.testing.assert_allclose(layer.wpe.grad.numpy(), dwpe, rtol=0, atol=1e-12)
    unused = np.r_[0:past_length, past_length + idx.shape[1]:wpe.shape[0]]
    assert np.all(layer.wpe.grad.numpy()[unused] == 0) and np.all(dwpe[unused] == 0)


def test_sinusoidal_reference_table_by_hand():
    d = 32
    table = ref.sinusoidal_table(np.array([0, 1, 37]), d)
    np.testing.assert_array_equal(table[0], np.tile([0.0, 1.0], d // 2))  # sin 0 = 0, cos 0 = 1, interleaved
    for row, pos in ((1, 1), (2, 37)):
        assert table[row, 0] == pytest.approx(math.sin(pos)) and table[row, 1] == pytest.approx(math.cos(pos))
        angle = pos / 10000 ** (30 / d)  # the last pair, i = d/2 - 1
        assert table[row, -2] == pytest.approx(math.sin(angle)) and table[row, -1] == pytest.approx(math.cos(angle))


def test_sinusoidal_input_layer_matches_reference_table():
    config = tiny_config("sinusoidal", block_size=64, n_embd=32)
    layer = InputLayer(config)
    near = np.arange(2 * config.block_size)
    got = layer.encoding.input_term(layer, torch.from_numpy(near)).double().numpy()
    np.testing.assert_allclose(got, AMPLITUDE * ref.sinusoidal_table(near, 32), rtol=0, atol=1e-5)

    # Far positions: the model builds the angle pos * inv_freq in float32, two roundings of relative size
    # 2^-24 each, so the angle (and sin/cos of it) can be off by about pos * 2^-23; an atol of 1e-5 is only
    # honest up to position ~80. Measured: max error 4e-6 below 128, 3e-5 below 1024, 1.6e-4 below 5000.
    far = np.arange(5000)
    err = np.abs(layer.encoding.input_term(layer, torch.from_numpy(far)).double().numpy() / AMPLITUDE
                 - ref.sinusoidal_table(far, 32))
    assert np.all(err.max(axis=1) <= far * 2.0**-23 + 1e-6)


# ----------------------------------------------------------------------------------------------------------
# Parameter counts, initialisation, tying


def test_gpt2_124m_parameter_counts():
    with torch.device("meta"):  # shapes only: no memory, no random numbers
        model = GPT(GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, bias=True))
    V, T, L, C = 50257, 1024, 12, 768
    token_table, position_table = V * C, T * C
    per_block = (2 * 2 * C  # two LayerNorms, gain and bias
                 + C * 3 * C + 3 * C + C * C + C  # attention: c_attn, c_proj
                 + C * 4 * C + 4 * C + 4 * C * C + C)  # MLP: c_fc, c_proj
    total = token_table + position_table + L * per_block + 2 * C  # + ln_f; the head is tied to wte
    assert (token_table, position_table, token_table + position_table, total) == (
        38_597_376, 786_432, 39_383_808, 124_439_808)

    assert model.input_layer.wte.numel() == token_table
    assert model.input_layer.wpe.numel() == position_table
    assert sum(p.numel() for p in model.input_layer.parameters()) == 39_383_808
    assert model.get_num_params() == total == 124_439_808
    assert model.get_num_params(non_embedding=True) == total - position_table


@pytest.mark.parametrize("pos_encoding, tie_head", [("learned", True), ("rope", False), ("pope", True),
                                                     ("pope", False), ("alibi", False), ("cope", True), ("fox", True),
                                                     ("dynamic_bias", True)])
def test_flops_per_token_counts_each_product_of_the_shapes(pos_encoding, tie_head):
    """Was: PoPE's queries and keys, twice head_dim wide, had their scores counted at head_dim (its attention a
    third low), and an untied head counted the token table, only looked up, as a product; CoPE's queries against
    its tables and FoX's gate projections, their parameters outside get_num_params, were not counted. Counted here
    from the shapes (PaLM's 6 per parameter, biases and gains too, and 3 x 2 per width of each attention product and
    position, as for a full, not causal, window); and where torch's FlopCounterMode sees attention (an explicit
    mask or PoPE's polar keys; not rope's fused causal kernel), from its count of a forward pass, times 3."""
    from torch.utils.flop_counter import FlopCounterMode

    L, H, C, V, T = 2, 4, 64, 65, 32
    model = GPT(GPTConfig(block_size=T, vocab_size=V, n_layer=L, n_head=H, n_embd=C, pos_encoding=pos_encoding,
                          tie_head=tie_head))
    matrices = L * (C * 3 * C + C * C + C * 4 * C + 4 * C * C) + V * C  # one product by the head, tied or not
    vectors = L * (2 * 2 * C + 3 * C + C + 4 * C + C) + 2 * C  # biases and LayerNorms, and ln_f
    key = 2 * C if pos_encoding == "pope" else C  # PoPE: each component a complex number, two reals
    attention = L * 2 * T * (key + C)  # forward: scores (queries by keys), then scores by values
    if pos_encoding == "cope":  # forward: each head's query by each of the T + 1 rows (head_dim) of its layer's table
        attention += L * 2 * H * (C // H) * (T + 1)
    if pos_encoding == "fox":  # each layer's gates: a product by (n_head, n_embd), and a bias per head
        matrices, vectors = matrices + L * H * C, vectors + L * H
    assert model.flops_per_token(T) == 6 * (matrices + vectors) + 3 * attention
    if pos_encoding in ("pope", "alibi", "cope", "fox", "dynamic_bias"):
        ids = torch.randint(0, V, (2, T))
        with FlopCounterMode(display=False) as counter:
            model(ids, ids)
        # dynamic_bias's MLP (width C/4, one hidden layer, its first Linear from a scalar elementwise) runs once per
        # forward pass at the T distances for both sequences: counter sees it, flops_per_token leaves it out
        mlp = 2 * T * (C // 4 * C // 4 + C // 4 * H) / ids.numel() if pos_encoding == "dynamic_bias" else 0
        assert model.flops_per_token(T) == 3 * (counter.get_total_flops() / ids.numel() - mlp) + 6 * vectors


@pytest.mark.parametrize("pos_encoding", sorted(set(P.POS_ENCODINGS) - {"cope", "fox"}))
def test_flops_per_token_of_the_other_encodings_is_as_it_was(pos_encoding):
    """Every encoding without products of its own keeps the count it had before CoPE's and FoX's were added:
    6 per non-embedding parameter and 6 per width of the two attention products at each position, per layer."""
    L, H, C, T = 4, 4, 64, 32  # 4 layers: layer_rope's default nope_every
    model = GPT(GPTConfig(block_size=T, vocab_size=65, n_layer=L, n_head=H, n_embd=C, pos_encoding=pos_encoding))
    key = model.input_layer.encoding.key_width()
    assert model.flops_per_token(T) == 6 * model.get_num_params(non_embedding=True) + 6 * L * (H * key + C) * T


def test_initialisation_statistics():
    torch.manual_seed(0)
    n_layer = 4
    model = GPT(GPTConfig(vocab_size=4096, block_size=1024, n_layer=n_layer, n_head=4, n_embd=128))

    def check_normal(tensors, std):
        values = torch.cat([t.detach().flatten() for t in tensors]).double()
        assert values.std().item() == pytest.approx(std, rel=0.05)
        assert abs(values.mean().item()) < 5 * std / math.sqrt(values.numel())

    check_normal([model.input_layer.wte], 0.02)
    check_normal([model.input_layer.wpe], 0.01)
    blocks = dict(model.blocks.named_parameters())
    check_normal([p for n, p in blocks.items() if n.endswith("c_proj.weight")], 0.02 / math.sqrt(2 * n_layer))
    check_normal([p for n, p in blocks.items() if n.endswith(("c_attn.weight", "c_fc.weight"))], 0.02)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert torch.all(p == 0), name
        elif ".ln_" in "." + name:
            assert torch.all(p == 1), name


@pytest.mark.parametrize("other", [{"vocab_size": 8192}, {"pos_encoding": "rope"}, {"pos_encoding": "t5"}])
def test_cells_share_the_initial_weights_they_have_in_common(other):
    """A tokenizer cell (another vocabulary) or a position cell (other position parameters), built under one seed,
    starts from the same blocks, final LayerNorm and (for one vocabulary) token table as the learned 65-token model."""
    base = dict(vocab_size=65, block_size=32, n_layer=2, n_head=2, n_embd=32)
    models = []
    for changes in ({}, other):
        torch.manual_seed(7)
        models.append(GPT(GPTConfig(**{**base, **changes})))
    first, second = (dict(m.named_parameters()) for m in models)
    shared = [n for n in first if n.startswith(("blocks.", "ln_f."))]
    assert len(shared) == 2 * 12 + 2 and all(torch.equal(first[n], second[n]) for n in shared)
    wte = first["input_layer.wte"], second["input_layer.wte"]
    assert torch.equal(*wte) == ("vocab_size" not in other)


def test_tied_head_is_stored_once(tmp_path):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=2048, block_size=16, n_layer=1, n_head=2, n_embd=64))
    assert model.lm_head.weight is model.input_layer.wte
    state = model.state_dict()
    assert "lm_head.weight" in state and "input_layer.wte" in state
    torch.save(state, tmp_path / "ckpt.pt")

    unique_bytes = sum(p.numel() * p.element_size() for p in model.parameters())  # wte counted once
    wte_bytes = model.input_layer.wte.numel() * 4
    size = (tmp_path / "ckpt.pt").stat().st_size
    assert unique_bytes <= size < unique_bytes + wte_bytes // 2  # a second copy would add wte_bytes

    loaded = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert loaded["lm_head.weight"].data_ptr() == loaded["input_layer.wte"].data_ptr()
    fresh = GPT(model.config)
    fresh.load_state_dict(loaded)
    assert fresh.lm_head.weight is fresh.input_layer.wte
    assert torch.equal(fresh.input_layer.wte, model.input_layer.wte)


def test_tied_gradient_is_sum_of_both_uses():
    tied = tiny_model("learned").double()
    assert tied.lm_head.weight is tied.input_layer.wte
    untied = copy.deepcopy(tied)
    untied.lm_head.weight = nn.Parameter(untied.input_layer.wte.detach().clone())
    assert untied.lm_head.weight is not untied.input_layer.wte

    idx, targets = random_ids(2, BLOCK, seed=7), random_ids(2, BLOCK, seed=8)
    for m in (tied, untied):
        m(idx, targets)[1].backward()
    from_input, from_head = untied.input_layer.wte.grad, untied.lm_head.weight.grad
    assert from_input.norm() > 1e-3 and from_head.norm() > 1e-3
    torch.testing.assert_close(tied.input_layer.wte.grad, from_input + from_head, rtol=1e-10, atol=1e-12)
    assert max_abs(tied.input_layer.wte.grad, from_head) > 1e-4  # both uses count, not just the head


def test_variants_under_one_seed_share_weights():
    params = {}
    for pos_encoding in POS_ENCODINGS:
        torch.manual_seed(1234)
        params[pos_encoding] = dict(GPT(tiny_config(pos_encoding)).named_parameters())
    learned = params["learned"]
    for pos_encoding in ("sinusoidal", "rope", "alibi", "none"):
        assert set(learned) - set(params[pos_encoding]) == {"input_layer.wpe"}
        for name, p in params[pos_encoding].items():
            assert torch.equal(p, learned[name]), (pos_encoding, name)
    torch.manual_seed(1235)
    assert not torch.equal(GPT(tiny_config("none")).input_layer.wte, learned["input_layer.wte"])


# ----------------------------------------------------------------------------------------------------------
# Errors


@torch.no_grad()
def test_learned_table_rejects_positions_beyond_block_size():
    model = tiny_model("learned")
    with pytest.raises(ValueError, match=r"T=17 .*past_length=0 .*block_size=16 ") as info:
        model(random_ids(1, BLOCK + 1))
    assert "the other pos_encodings have no such cap" in str(info.value)

    cache = model.make_cache(1, max_length=4 * BLOCK)  # a long cache, so that the position table is the limit
    model(random_ids(1, 10), cache=cache)
    with pytest.raises(ValueError, match=r"T=7 .*past_length=10 .*block_size=16 .*Crop the context"):
        model(random_ids(1, 7), cache=cache)
    assert cache.length == 10  # the failed call left the cache alone
    model(random_ids(1, 6), cache=cache)  # positions 10..15: the last row of the table is usable
    with pytest.raises(ValueError, match=r"T=2 .*past_length=15 .*block_size=16"):
        model.check_positions(2, past_length=15)


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope", "alibi", "none"])
@torch.no_grad()
def test_encodings_without_a_table_run_beyond_block_size(pos_encoding):
    model = tiny_model(pos_encoding)
    idx = random_ids(2, 2 * BLOCK + 3, seed=9)
    logits = model(idx)[0]
    assert logits.shape == (2, 2 * BLOCK + 3, VOCAB) and torch.isfinite(logits).all()
    assert max_abs(cached_logits(model, idx, [20, 1, 14], max_length=2 * BLOCK + 3), logits) < 1e-5


@torch.no_grad()
def test_token_ids_out_of_range_raise():
    model = tiny_model("learned")
    with pytest.raises(ValueError, match=r"token id -1 is outside \[0, vocab_size=37\)"):
        model(torch.tensor([[0, 5, -1]]))
    with pytest.raises(ValueError, match=r"token id 37 is outside \[0, vocab_size=37\)"):
        model(torch.tensor([[0, 37, 5]]))
    model(torch.tensor([[0, VOCAB - 1]]))  # both ends of the range are fine


@pytest.mark.parametrize("dtype", [torch.int16, torch.uint8, torch.float32, torch.bool])
def test_token_ids_of_a_dtype_the_embedding_cannot_take_raise(dtype):
    with pytest.raises(ValueError, match=rf"token ids must be an int64 or int32 tensor, got dtype {dtype}"):
        tiny_model("learned")(torch.zeros((1, 3), dtype=dtype))
    tiny_model("learned")(torch.zeros((1, 3), dtype=torch.int32))  # the control: int32 indexes the embedding


def test_targets_outside_the_vocabulary_raise():
    model = tiny_model("learned")
    idx = torch.tensor([[0, 1, 2]])
    with pytest.raises(ValueError, match=r"target 37 is outside \[0, vocab_size=37\)"):
        model(idx, torch.tensor([[1, 2, 37]]))
    with pytest.raises(ValueError, match=r"target -2 is outside"):
        model(idx, torch.tensor([[1, -2, 3]]))
    with pytest.raises(ValueError, match=r"targets must be an int64 or int32 tensor, got dtype torch.float32"):
        model(idx, torch.tensor([[1.0, 2.0, 3.0]]))
    logits, loss = model(idx, torch.tensor([[1, -1, VOCAB - 1]]))  # -1 is cross_entropy's ignore_index
    expected = F.cross_entropy(logits[0, [0, 2]], torch.tensor([1, VOCAB - 1]))
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("temperature", [math.nan, math.inf, -1.0])
def test_temperature_must_be_finite_and_not_negative(temperature):
    with pytest.raises(ValueError, match=rf"temperature={temperature} must be a finite number >= 0"):
        sample_next_token(torch.zeros(1, 5), temperature)


@torch.no_grad()
def test_empty_sequence_raises_in_model():
    model = tiny_model("learned")
    with pytest.raises(ValueError, match="empty sequence: idx has T=0"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="empty sequence: idx has T=0"):
        model(torch.zeros(1, 0, dtype=torch.long), cache=model.make_cache(1))


def test_config_errors():
    with pytest.raises(ValueError, match="n_embd=50 is not divisible by n_head=3"):
        GPTConfig(n_embd=50, n_head=3)
    valid = ("learned, sinusoidal, rope, alibi, none, t5, partial_rope, p_rope, xpos, kerple, fire, cope, head_rope, "
             "layer_rope, pope, fox, dynamic_bias")
    with pytest.raises(ValueError, match=f"pos_encoding='rotary' is not one of {valid}$"):
        GPTConfig(pos_encoding="rotary")
    with pytest.raises(ValueError, match=r"'rope' needs an even head_dim, got n_embd/n_head = 36/4 = 9; change"):
        GPTConfig(pos_encoding="rope", n_embd=36, n_head=4)
    GPTConfig(pos_encoding="alibi", n_embd=36, n_head=4)  # odd head_dim is fine without rope
    for name, value, limit in (("rope_base", 0.0, "> 0"), ("rope_base", -1.0, "> 0"),
                               ("sinusoidal_amplitude", 0.0, "> 0"), ("sinusoidal_amplitude", float("nan"), "> 0"),
                               ("learned_init_std", -0.01, ">= 0")):
        with pytest.raises(ValueError, match=f"^{name}={value} must be {limit}$"):
            GPTConfig(**{name: value})
    with pytest.raises(ValueError, match="n_head=0 must be at least 1"):  # not a ZeroDivisionError
        GPTConfig(n_head=0)


@torch.no_grad()
def test_kv_cache_overflow_and_batch_mismatch():
    model = tiny_model("sinusoidal")
    cache = model.make_cache(2, max_length=12)
    model(random_ids(2, 10), cache=cache)
    with pytest.raises(ValueError, match=r"KV cache overflow: past_length=10 \+ T=3 exceeds .*max_length=12"):
        model(random_ids(2, 3), cache=cache)
    with pytest.raises(ValueError, match="idx has batch size 3 but the KV cache holds 2"):
        model(random_ids(3, 1), cache=cache)
    assert cache.length == 10


def test_from_pretrained_unknown_name_offline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # so that the name is not a directory
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="'gpt2-tiny-unknown' is neither a local directory nor one of"):
        gpt2_weights.from_pretrained("gpt2-tiny-unknown")


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "rope", "alibi", "none"])
def test_export_hf_rejects_non_learned_positions(tmp_path, pos_encoding):
    model = GPT(tiny_config(pos_encoding))
    with pytest.raises(ValueError, match=f"learned position table; this model has pos_encoding='{pos_encoding}'"):
        gpt2_weights.export_hf(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


# ----------------------------------------------------------------------------------------------------------
# Generation


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@pytest.mark.parametrize("slide", [None, 1])
def test_greedy_generate_cached_equals_uncached(pos_encoding, slide):
    model = tiny_model(pos_encoding)
    prompt = random_ids(2, 5, seed=10)
    cached = generate(model, prompt, 3 * BLOCK, temperature=0, slide=slide)
    uncached = generate(model, prompt, 3 * BLOCK, temperature=0, slide=slide, use_cache=False)
    assert cached.shape == (2, 5 + 3 * BLOCK)
    assert torch.equal(cached[:, :5], prompt)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
def test_sampled_generate_cached_equals_uncached(pos_encoding):
    model = tiny_model(pos_encoding)
    prompt = random_ids(2, 5, seed=11)
    kw = dict(temperature=1.0, top_k=10, top_p=0.9)
    cached = generate(model, prompt, 3 * BLOCK, generator=torch.Generator().manual_seed(5), **kw)
    uncached = generate(model, prompt, 3 * BLOCK, generator=torch.Generator().manual_seed(5), use_cache=False, **kw)
    assert torch.equal(cached, uncached)
    assert not torch.equal(cached, generate(model, prompt, 3 * BLOCK, temperature=0))  # it did sample


def test_top_k_1_is_greedy():
    model = tiny_model("learned")
    prompt = random_ids(2, 5, seed=12)
    greedy = generate(model, prompt, 2 * BLOCK, temperature=0)
    top1 = generate(model, prompt, 2 * BLOCK, temperature=1.0, top_k=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(top1, greedy)


def test_filter_logits_top_p_by_hand():
    # tokens 0..3 have probabilities 0.15, 0.5, 0.05, 0.3 (unsorted, so the filter must map back to ids)
    logits = torch.tensor([[0.15, 0.5, 0.05, 0.3]]).log()
    # sorted: 0.5 (id 1), 0.3 (id 3), 0.15 (id 0), 0.05 (id 2); a token stays while the mass above it < p
    by_hand = {0.5: {1}, 0.79: {1, 3}, 0.8: {1, 3}, 0.81: {1, 3, 0}, 0.96: {0, 1, 2, 3}, 1.0: {0, 1, 2, 3}}
    for top_p, expected in by_hand.items():
        out = filter_logits(logits, top_p=top_p)
        kept = set(torch.isfinite(out[0]).nonzero().flatten().tolist())
        assert kept == expected, top_p
        assert torch.equal(out[0, list(expected)], logits[0, list(expected)])  # kept logits are untouched
    # p=0.8 sits exactly on the boundary 0.5 + 0.3 (float32: 0.80000007 >= 0.8f), so it keeps two, not three
    out = filter_logits(logits, top_k=3, top_p=0.99)  # top_k first: drops id 2, then top_p keeps the rest
    assert set(torch.isfinite(out[0]).nonzero().flatten().tolist()) == {0, 1, 3}


def test_sampling_draws_each_token_with_its_filtered_probability():
    """The exponential-race draw against the softmax of the kept logits, computed apart in NumPy: a chi-square over
    200,000 rows, and no filtered token ever drawn; one generator per row draws as that row alone."""
    logits = torch.tensor([[2.0, -1.0, 0.5, 1.5, -3.0, 0.0, 1.0, -0.5]])
    temperature, top_k, rows = 0.7, 5, 200_000
    tokens = sample_next_token(logits.expand(rows, -1), temperature, top_k, generator=torch.Generator().manual_seed(3))
    scaled = logits[0].double().numpy() / temperature
    kept = np.argsort(-scaled)[:top_k]
    expected = np.zeros(len(scaled))
    expected[kept] = np.exp(scaled[kept] - scaled[kept].max())
    expected /= expected.sum()
    counts = np.bincount(tokens.flatten().numpy(), minlength=len(scaled))
    assert counts[expected == 0].sum() == 0
    assert stats.chisquare(counts[kept], rows * expected[kept]).pvalue > 1e-3
    per_row = [torch.Generator().manual_seed(seed) for seed in (5, 6, 7)]
    batch = sample_next_token(logits.expand(3, -1), 1.0, generator=per_row)
    alone = [sample_next_token(logits, 1.0, generator=torch.Generator().manual_seed(seed)) for seed in (5, 6, 7)]
    assert torch.equal(batch, torch.cat(alone))


def test_a_zero_from_the_exponential_draw_never_picks_a_filtered_token(monkeypatch):
    """Exp(1) draws can be exactly 0, and 0 / 0 is a NaN that argmax would take: every draw 0 here."""
    monkeypatch.setattr(torch.Tensor, "exponential_", lambda self, *args, **kwargs: self.zero_())
    logits = torch.tensor([[0.1, 3.0, 0.2, 2.0, 0.3]])
    assert sample_next_token(logits, 1.0, top_k=2).item() in (1, 3)


@torch.no_grad()
def test_greedy_generate_matches_hf():
    hf = random_hf_gpt2(seed=3)
    ours = ours_like(hf)
    ours.load_state_dict(gpt2_weights.hf_to_ours(hf.state_dict()))
    prompt = random_ids(2, 5, vocab=101, seed=13)
    new = hf.config.n_positions - 5  # stay inside the context window
    expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=new,
                           pad_token_id=0)
    assert expected.shape == (2, 32)
    assert torch.equal(generate(ours, prompt, new, temperature=0), expected)


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@torch.no_grad()
def test_slide_1_is_nanogpt_crop(pos_encoding):
    model = tiny_model(pos_encoding)
    prompt = random_ids(2, BLOCK + 4, seed=14)  # longer than the window from the start
    idx = prompt
    for _ in range(3 * BLOCK):  # nanoGPT's loop
        idx_cond = idx[:, -BLOCK:]
        logits = model(idx_cond)[0][:, -1]
        idx = torch.cat((idx, logits.argmax(dim=-1, keepdim=True)), dim=1)
    assert torch.equal(generate(model, prompt, 3 * BLOCK, temperature=0, slide=1), idx)


# ----------------------------------------------------------------------------------------------------------
# Rotary embeddings and ALiBi, against references written here without model.py's code


def paper_alibi_slopes(n: int) -> list[float]:
    """The slopes as the ALiBi paper's reference code computes them: start 2^(-2^-(log2 n - 3)), ratio = start."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_alibi_slopes(2 * closest)[0::2][:n - closest]


def test_alibi_slopes_follow_the_paper():
    for n in range(1, 17):
        np.testing.assert_allclose(P.alibi_slopes(n), paper_alibi_slopes(n), rtol=1e-12, atol=0, err_msg=f"n={n}")
    assert P.alibi_slopes(8) == [2.0**-k for k in range(1, 9)]
    assert P.alibi_slopes(6) == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]


def hf_rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """x rotated by transformers' LLaMA rotary embedding, cos and sin built by its own module."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    B, H, T, D = x.shape
    rotary = LlamaRotaryEmbedding(LlamaConfig(hidden_size=H * D, num_attention_heads=H, rope_theta=base))
    cos, sin = rotary(x, positions[None])
    return apply_rotary_pos_emb(x, x, cos, sin)[0]


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """x (B, n_head, T, head_dim) turned at absolute positions (T,) as the model turns queries and keys."""
    return P.rotate(x, *P.rope_angles(positions, x.size(-1), base))


@pytest.mark.skipif(TORCH < (2, 4), reason="transformers 5's rotary embedding calls torch.is_autocast_enabled(device), "
                                          "torch 2.4 on")
@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_apply_rope_matches_transformers(base):
    x = torch.randn(2, 3, 7, 16, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(40, 47)  # after a cache of 40 positions
    ours = apply_rope(x, positions, base)
    assert max_abs(ours, hf_rope(x, positions, base)) < 1e-5
    assert max_abs(ours, hf_rope(x, positions + 1, base)) > 1e-2  # the positions matter
    assert max_abs(ours, hf_rope(x, positions, 2 * base)) > 1e-3  # and so does the base


def test_rope_preserves_norms_and_sees_only_position_differences():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 1, 32, generator=g, dtype=torch.float64), torch.randn(1, 2, 1, 32, generator=g,
                                                                                   dtype=torch.float64)
    far = torch.tensor([12345])
    torch.testing.assert_close(apply_rope(q, far).norm(dim=-1), q.norm(dim=-1), rtol=1e-6, atol=0)

    def score(m: int, n: int) -> torch.Tensor:
        return (apply_rope(q, torch.tensor([m])) * apply_rope(k, torch.tensor([n]))).sum(-1)

    for m, n in ((5, 2), (0, 9), (100, 100)):
        for shift in (1, 7, 1000):
            torch.testing.assert_close(score(m + shift, n + shift), score(m, n), rtol=1e-4, atol=1e-5)
    assert (score(5, 2) - score(5, 3)).abs().min() > 1e-3  # a different distance gives a different score


def reference_forward(model: GPT, idx: np.ndarray) -> np.ndarray:
    """The whole model in NumPy float64 from its state dict: rope as complex multiplication of the pairs
    (x_i, x_{i+d/2}), alibi as an explicit bias matrix with the paper's slopes, t5 as its table read at the float64
    buckets of input_layer_numpy."""
    c = model.config
    H, D = c.n_head, c.n_embd // c.n_head
    pos = np.arange(idx.shape[1])
    distance = pos[:, None] - pos[None, :]  # query - key

    def rope(x):  # x (B, H, T, D)
        theta = c.rope_base ** (-2.0 * np.arange(D // 2) / D)
        z = (x[..., :D // 2] + 1j * x[..., D // 2:]) * np.exp(1j * pos[:, None] * theta)
        return np.concatenate([z.real, z.imag], axis=-1)

    def scores(W, layer, normed, q, k):
        bias = np.where(distance >= 0, 0.0, -np.inf)[None]
        if c.pos_encoding == "alibi":
            bias = bias - np.array(paper_alibi_slopes(H))[:, None, None] * distance
        if c.pos_encoding == "t5":  # one learned scalar per (bucket, head), the bucket of the distance
            table = W["input_layer.relative_bias"]
            bias = bias + table[ref.t5_buckets(distance, c.t5_num_buckets, c.t5_max_distance)].transpose(2, 0, 1)
        if c.pos_encoding == "rope":
            q, k = rope(q), rope(k)
        return q @ k.transpose(0, 1, 3, 2) / np.sqrt(D) + bias

    return numpy_gpt_logits(model, idx, scores)


@pytest.mark.parametrize("pos_encoding", ["rope", "alibi", "t5"])
@torch.no_grad()
def test_whole_model_matches_numpy_float64_reference(pos_encoding):
    # 3 heads: not a power of 2; t5: 8 buckets up to distance 13, so that 16 positions reach the log-spaced ones
    model = tiny_model(pos_encoding, n_head=3, n_embd=48, rope_base=100.0, t5_num_buckets=8, t5_max_distance=13)
    idx = random_ids(2, BLOCK, seed=15)
    expected = reference_forward(model, idx.numpy())
    # measured: float32 3e-6 (logits up to 4.5); float64 4e-7 for rope (angles stay float32), 5e-15 for alibi
    np.testing.assert_allclose(model(idx)[0].double().numpy(), expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(copy.deepcopy(model).double()(idx)[0].numpy(), expected, rtol=0, atol=1e-6)
    # the reference sees the positions: with none of them it is far off
    none = copy.deepcopy(model)
    none.config = replace(model.config, pos_encoding="none")
    assert np.abs(reference_forward(none, idx.numpy()) - expected).max() > 1e-2


def test_rope_and_alibi_have_no_position_parameters():
    counts = {}
    for pos_encoding in POS_ENCODINGS:
        with torch.device("meta"):
            counts[pos_encoding] = GPT(GPTConfig(vocab_size=50257, pos_encoding=pos_encoding)).get_num_params()
    assert counts["learned"] == 124_439_808
    for pos_encoding in ("sinusoidal", "rope", "alibi", "none"):
        assert counts[pos_encoding] == counts["learned"] - 1024 * 768


def test_position_settings_are_used():
    torch.manual_seed(0)
    wpe = GPT(GPTConfig(vocab_size=64, block_size=1024, n_layer=1, n_head=2, n_embd=128,
                        learned_init_std=0.02)).input_layer.wpe
    assert wpe.std().item() == pytest.approx(0.02, rel=0.05)
    layer = InputLayer(tiny_config("sinusoidal", sinusoidal_amplitude=0.5))
    positions = np.arange(5)
    np.testing.assert_allclose(layer.encoding.input_term(layer, torch.from_numpy(positions)).double().numpy(),
                               0.5 * ref.sinusoidal_table(positions, 32), rtol=0, atol=1e-6)


# ---- activation checkpointing ----------------------------------------------------------------------------


def block_calls_and_saved_bytes(model: GPT, idx: torch.Tensor, targets: torch.Tensor) -> tuple[int, int]:
    """Forward and backward once: how often the Blocks ran, and the bytes autograd kept for the backward."""
    calls, saved = [0], [0]
    hooks = [block.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1)) for block in model.blocks]

    def pack(tensor):
        saved[0] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(idx, targets)[1]
    loss.backward()
    for hook in hooks:
        hook.remove()
    return calls[0], saved[0]


@pytest.mark.parametrize("pos_encoding, dropout", [("learned", 0.0), ("learned", 0.2), ("rope", 0.2), ("alibi", 0.2),
                                                   ("fox", 0.2)])  # fox: each layer's gate reaches the recomputed block
def test_activation_checkpointing_gives_the_same_gradients_and_recomputes_each_block(pos_encoding, dropout):
    plain = tiny_model(pos_encoding, n_layer=3, dropout=dropout).train()
    recomputed = copy.deepcopy(plain)
    recomputed.activation_checkpointing = True
    idx, targets = random_ids(4, BLOCK, seed=1), random_ids(4, BLOCK, seed=2)
    torch.manual_seed(5)  # the same dropout masks for both, if checkpointing replays them
    plain_calls, plain_saved = block_calls_and_saved_bytes(plain, idx, targets)
    torch.manual_seed(5)
    recomputed_calls, recomputed_saved = block_calls_and_saved_bytes(recomputed, idx, targets)
    assert plain_calls == 3 and recomputed_calls == 6  # each Block once more, in the backward pass
    assert recomputed_saved < plain_saved / 2
    for (name, a), b in zip(plain.named_parameters(), recomputed.parameters(), strict=True):
        assert a.grad.norm() > 0, name
        torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=0, msg=name)


@pytest.mark.slow
def test_compiled_gelu_is_gpt2s_tanh_gelu():
    x = torch.linspace(-8, 8, 4001, dtype=torch.float32)
    x64 = x.double()
    expected = 0.5 * x64 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    assert max_abs(kernels.gelu_tanh(x), expected) < 1e-6  # eager: torch's kernel
    assert max_abs(torch.compile(kernels.gelu_tanh)(x), expected) < 1e-6  # compiled: the sigmoid form


# ---- on a CUDA GPU: python -m pytest -m gpu (skipped without one) ----------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("pos_encoding", ["alibi", "t5"])
@pytest.mark.parametrize("cached", [False, True])
@torch.no_grad()
def test_sdpa_with_a_float_bias_mask_equals_the_math_path_on_cuda(pos_encoding, cached):
    """The score bias travels to SDPA as a float mask: its fused (memory-efficient) kernel must read it as the
    plain math does, with and without a cache (the cached mask covers the whole preallocated cache)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = tiny_model(pos_encoding, t5_num_buckets=4, t5_max_distance=8).cuda()
    idx = random_ids(3, BLOCK, seed=40).cuda()
    expected = tiny_model(pos_encoding, t5_num_buckets=4, t5_max_distance=8).double()(idx.cpu())[0]
    logits = {}
    for backend in (SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION):
        with sdpa_kernel(backend):
            logits[backend] = cached_logits(model, idx, [5, 11]) if cached else model(idx)[0]
    assert max_abs(logits[SDPBackend.EFFICIENT_ATTENTION], logits[SDPBackend.MATH]) < 1e-4
    assert max_abs(logits[SDPBackend.EFFICIENT_ATTENTION].cpu(), expected) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@torch.no_grad()
def test_bfloat16_autocast_forward_is_close_to_float32_on_cuda(pos_encoding):
    model = tiny_model(pos_encoding).cuda()
    idx = random_ids(2, BLOCK, seed=41).cuda()
    full = model(idx)[0]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        half = model(idx)[0]
    assert half.dtype == torch.bfloat16 and full.dtype == torch.float32
    # bfloat16 keeps 8 bits of mantissa: logits up to ~5 move by a few hundredths, not more, and do move
    assert 0 < max_abs(half.float(), full) < 0.1


@pytest.mark.gpu
@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@torch.no_grad()
def test_compiled_forward_in_bfloat16_equals_eager_on_cuda(pos_encoding):
    model = tiny_model(pos_encoding).cuda().to(torch.bfloat16)
    idx = random_ids(2, BLOCK, seed=42).cuda()
    reference = tiny_model(pos_encoding).cuda()(idx)[0]  # float32
    torch.compiler.reset()  # each test compiles afresh, within the compiler's limit of graphs per function
    eager, compiled = model(idx)[0], torch.compile(model, fullgraph=True)(idx)[0]
    assert compiled.dtype == eager.dtype == torch.bfloat16
    # as close to eager bfloat16 as bfloat16 rounding allows (kernels fused differently round differently)
    assert max_abs(compiled.float(), eager.float()) <= 2 * max_abs(eager.float(), reference) + 1e-3
    assert max_abs(eager.float(), reference) < 0.2
