"""The speedruns' architecture options (GPTConfig: mlp_activation, qk_norm, zero_init_proj, logit_softcap, tie_head),
each against a computation written here from its definition, with torch's own F.rms_norm and NumPy as references;
off, the model is GPT-2's (the HF parity tests in test_gpt2_weights.py hold it)."""

import re

import numpy as np
import pytest
import torch
from helpers import BLOCK, VOCAB, assert_same_state, max_abs, random_ids, run, tiny_config, tiny_model
from torch.nn import functional as F

from gpt.gpt2_weights import export_hf
from layers.positions import POS_ENCODINGS
from model import GPT
from train import TrainConfig, unused_settings
from training.checkpoint import load_checkpoint

EVERY_OPTION = dict(mlp_activation="relu2", qk_norm=True, zero_init_proj=True, logit_softcap=3.0, tie_head=False)


def same_weights(model: GPT, **options) -> GPT:
    """A model with options, holding model's weights (the untied head: the token table's copy)."""
    other = GPT(tiny_config(model.config.pos_encoding, **options)).eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    other.load_state_dict(state)
    return other


@torch.no_grad()
def test_relu2_mlp_is_relu_squared():
    model = same_weights(tiny_model("learned"), mlp_activation="relu2")
    mlp = model.blocks[0].mlp
    x = torch.randn(2, 5, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    w1, b1, w2, b2 = (t.double().numpy() for t in (mlp.c_fc.weight, mlp.c_fc.bias, mlp.c_proj.weight, mlp.c_proj.bias))
    expected = np.maximum(x.numpy() @ w1.T + b1, 0.0) ** 2 @ w2.T + b2
    assert np.abs(mlp.double()(x).numpy() - expected).max() < 1e-12


@torch.no_grad()
def test_qk_norm_normalises_each_heads_queries_and_keys_before_rope():
    """Against SDPA on torch's F.rms_norm of q and k, turned by rope afterwards (rope keeps a vector's norm, so
    the order matters only for xpos, which scales)."""
    model = same_weights(tiny_model("rope"), qk_norm=True)
    attention = model.blocks[0].attn
    x = torch.randn(2, BLOCK, 32, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(BLOCK)
    _, rope, _ = model.input_layer.attention_inputs(positions, BLOCK, cached=False)
    q, k, v = attention.c_attn(x).split(32, dim=2)
    q, k, v = (t.view(2, BLOCK, 2, 16).transpose(1, 2) for t in (q, k, v))
    q, k = F.rms_norm(q, (16,)), F.rms_norm(k, (16,))
    (cos, sin), _ = rope
    half = lambda t: torch.cat((-t[..., 8:], t[..., :8]), dim=-1)  # noqa: E731
    q, k = q * cos + half(q) * sin, k * cos + half(k) * sin
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, BLOCK, 32)
    assert max_abs(attention(x, positions, rope=rope), attention.c_proj(y)) < 1e-5
    plain = same_weights(model, qk_norm=False).blocks[0].attn
    assert max_abs(plain(x, positions, rope=rope), attention.c_proj(y)) > 1e-2  # the norm matters here


@torch.no_grad()
def test_softcap_is_c_tanh_of_the_logits_over_c():
    model = tiny_model("alibi")
    capped = same_weights(model, logit_softcap=3.0)
    idx = random_ids(2, BLOCK, seed=3)
    raw = model(idx)[0].double()
    assert max_abs(capped(idx)[0], 3.0 * torch.tanh(raw / 3.0)) < 1e-5
    assert capped(idx)[0].abs().max() < 3.0 < raw.abs().max()


def test_zero_init_zeroes_the_output_projections_and_leaves_every_other_weight():
    torch.manual_seed(4)
    plain = GPT(tiny_config("learned"))
    torch.manual_seed(4)
    zeroed = GPT(tiny_config("learned", zero_init_proj=True))
    for (name, a), (_, b) in zip(plain.named_parameters(), zeroed.named_parameters(), strict=True):
        if name.endswith("c_proj.weight"):
            assert not b.any() and a.std() > 0, name
        else:
            assert torch.equal(a, b), name


def test_an_untied_head_is_a_parameter_of_its_own():
    torch.manual_seed(5)
    tied = GPT(tiny_config("learned"))
    torch.manual_seed(5)
    untied = GPT(tiny_config("learned", tie_head=False))
    assert untied.lm_head.weight is not untied.input_layer.wte
    assert untied.get_num_params() == tied.get_num_params() + VOCAB * 32
    shared = dict(tied.named_parameters())  # every weight but the head is drawn as the tied model's
    assert all(torch.equal(p, shared[n]) for n, p in untied.named_parameters() if n != "lm_head.weight")
    assert abs(untied.lm_head.weight.std().item() - 0.02) < 0.004
    idx = random_ids(2, BLOCK, seed=6)
    untied(idx, idx)[1].backward()
    head, table = untied.lm_head.weight.grad, untied.input_layer.wte.grad
    assert head is not None and table is not None and max_abs(head, table) > 0
    # the head's gradient is the output layer's alone: h^T (softmax - onehot), written out
    h = untied.ln_f(untied.blocks[1](untied.blocks[0](untied.input_layer(idx, torch.arange(BLOCK)),
                                                      torch.arange(BLOCK)), torch.arange(BLOCK)))
    p = torch.softmax(h @ untied.lm_head.weight.T, dim=-1)
    expected = ((p - F.one_hot(idx, VOCAB)).reshape(-1, VOCAB).T @ h.reshape(-1, 32)) / idx.numel()
    assert max_abs(head, expected) < 1e-6


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
@torch.no_grad()
def test_every_option_on_cached_decoding_equals_the_uncached_forward(pos_encoding):
    model = tiny_model(pos_encoding, **EVERY_OPTION)
    idx = random_ids(2, BLOCK, seed=7)
    full = model(idx)[0]
    cache = model.make_cache(2)
    model(idx[:, :5], cache=cache)
    steps = torch.cat([model(idx[:, i:i + 1], cache=cache)[0] for i in range(5, BLOCK)], dim=1)
    assert max_abs(steps, full[:, 5:]) < 1e-5


def test_training_with_every_option_resumes_as_one_run(tmp_path, char_data):
    settings = dict(max_iters=6, lr_decay_iters=6, warmup_iters=2, eval_interval=3, **EVERY_OPTION)
    whole = run(tmp_path / "a", char_data, **settings)
    first = run(tmp_path / "b", char_data, **{**settings, "max_iters": 3})
    second = run(tmp_path / "b", char_data, **settings, init_from="resume")
    assert first["train_losses"] + second["train_losses"] == whole["train_losses"]
    assert_same_state(second["model"].state_dict(), whole["model"].state_dict())
    saved = load_checkpoint(tmp_path / "a" / "ckpt.pt")
    assert {k: saved["model_args"][k] for k in EVERY_OPTION} == EVERY_OPTION


def test_a_model_with_an_option_is_not_exported_as_gpt2(tmp_path):
    """The message names the model's value and GPT-2's: it printed GPT-2's alone, tie_head=True for an untied one."""
    for name, value, gpt2 in (("mlp_activation", "relu2", "gelu"), ("qk_norm", True, False),
                              ("logit_softcap", 3.0, 0.0), ("tie_head", False, True), ("random_positions", 32, 0)):
        with pytest.raises(ValueError, match=re.escape(f"not GPT-2's architecture, which transformers' "
                                                       f"GPT2LMHeadModel is: {name}={value!r} (GPT-2's: {gpt2!r});")):
            export_hf(tiny_model("learned", **{name: value}), tmp_path / name)
    export_hf(tiny_model("learned", zero_init_proj=True), tmp_path / "zero")  # only its start differs


@pytest.mark.parametrize("cap", [1e-30, 0.5, 0.999, -1.0, float("nan"), float("inf")])
def test_a_cap_below_1_is_refused(cap):
    """1e-30 squashed every logit to ~0: the loss sat at ln(vocab_size) for the whole run. A cap c holds the logits
    in (-c, c), so the likeliest token is at most e^(2c) times as likely as any other."""
    with pytest.raises(ValueError, match=re.escape(f"logit_softcap={cap} must be 0 (off) or a finite cap >= 1 "
                                                   "(nanochat: 15): every logit lies in (-cap, cap)")):
        tiny_config("learned", logit_softcap=cap)
    assert tiny_config("learned", logit_softcap=1.0).logit_softcap == 1.0


def test_gelu_under_relu2_would_do_nothing():
    unused = unused_settings(TrainConfig(), tiny_config("learned", mlp_activation="relu2"), ["gelu"])
    assert unused == ["gelu is a setting of mlp_activation=gelu, and this run's is relu2"]
