"""The speedruns' architecture options (GPTConfig: mlp_activation, qk_norm, zero_init_proj, logit_softcap, tie_head),
each against a computation written here from its definition, with torch's own F.rms_norm and NumPy as references;
off, the model is GPT-2's (the HF parity tests in test_gpt2_weights.py hold it)."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import BLOCK, HAS_MUON, VOCAB, max_abs, random_ids, resumed_as_one_run, run, tiny_config, tiny_model
from torch.nn import functional as F

from errors import UserError
from gpt.fast_decode import compiled_decode_step
from gpt.generate import decode, generate
from gpt.gpt2_weights import export_hf
from layers.positions import POS_ENCODINGS
from layers.value_embeddings import value_embedding_layers
from model import GPT
from train import TrainConfig, unused_settings
from training.checkpoint import read_checkpoint
from training.optimizers import build_optimizer, set_learning_rates

OLD_CHECKPOINT = Path(__file__).resolve().parent / "fixtures" / "checkpoints_03c7507" / "learned" / "ckpt.pt"

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
    """Against SDPA on torch's F.rms_norm of q and k (its definition before torch 2.4), turned by rope afterwards
    (rope keeps a vector's norm, so the order matters only for xpos, which scales)."""
    model = same_weights(tiny_model("rope"), qk_norm=True)
    attention = model.blocks[0].attn
    x = torch.randn(2, BLOCK, 32, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(BLOCK)
    _, rope, _ = model.input_layer.attention_inputs(positions, BLOCK, cached=False)
    q, k, v = attention.c_attn(x).split(32, dim=2)
    q, k, v = (t.view(2, BLOCK, 2, 16).transpose(1, 2) for t in (q, k, v))
    if hasattr(F, "rms_norm"):  # torch 2.4 on
        q, k = F.rms_norm(q, (16,)), F.rms_norm(k, (16,))
    else:  # its definition: eps the dtype's machine epsilon
        q, k = (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + torch.finfo(t.dtype).eps) for t in (q, k))
    (cos, sin), _ = rope
    half = lambda t: torch.cat((-t[..., 8:], t[..., :8]), dim=-1)  # noqa: E731
    q, k = q * cos + half(q) * sin, k * cos + half(k) * sin
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, BLOCK, 32)
    assert max_abs(attention(x, positions, rope=rope)[0], attention.c_proj(y)) < 1e-5
    plain = same_weights(model, qk_norm=False).blocks[0].attn
    assert max_abs(plain(x, positions, rope=rope)[0], attention.c_proj(y)) > 1e-2  # the norm matters here


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
                                                      torch.arange(BLOCK))[0], torch.arange(BLOCK))[0])
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
    resumed_as_one_run(tmp_path, char_data, EVERY_OPTION)


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


# ---- the speedruns' later pieces: value embeddings, value residual, x0 shortcut, smear, bigram, a zero head -------

LATER = dict(value_embeddings=1, value_residual=True, x0_shortcut=True, smear=True, bigram_embedding=VOCAB * VOCAB)
ONE_EACH = [dict(value_embeddings=2), dict(value_residual=True), dict(x0_shortcut=True), dict(smear=True),
            dict(bigram_embedding=VOCAB * VOCAB), dict(bigram_embedding=50), LATER]


def reference_logits(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """The model's logits computed here in float64 from each option's definition (learned positions, no bias
    subtleties: F.layer_norm, an explicit causal softmax, GPT-2's tanh GELU), reading only the model's weights."""
    c, p = model.config, {name: t.double() for name, t in model.state_dict().items()}
    B, T = idx.shape
    H, D = c.n_head, c.n_embd // c.n_head
    previous = torch.cat((torch.zeros_like(idx[:, :1]), idx[:, :-1]), dim=1)
    first = torch.arange(T) == 0  # no previous token: it takes in nothing
    e = p["input_layer.wte"][idx]
    if c.smear:  # e_t + lambda sigmoid(w . e_t[:12]) e_{t-1}
        w, lam = p["input_layer.smear.gate"], p["input_layer.smear.strength"]
        share = lam * torch.sigmoid(e[..., :w.numel()] @ w)
        e = e + torch.where(first[None, :, None], 0.0, share[..., None] * p["input_layer.wte"][previous])
    if c.bigram_embedding:  # the pair's own row (all pairs fit), or modded-nanogpt's hash of it
        table = p["input_layer.bigram.weight"]
        rows = table.size(0)
        pair = previous * VOCAB + idx if rows == VOCAB * VOCAB else ((36313 * idx) ^ (27191 * previous)) % rows
        e = e + torch.where(first[None, :, None], 0.0, table[pair])
    x = x0 = e + p["input_layer.wpe"][:T]
    K = c.value_embeddings
    table_of = {**{i: i for i in range(K)}, **{c.n_layer - K + i: i for i in range(K)}}
    heads = lambda t: t.view(B, T, H, D).transpose(1, 2)  # noqa: E731
    first_v = None
    for layer in range(c.n_layer):
        w = {name[len(f"blocks.{layer}."):]: t for name, t in p.items() if name.startswith(f"blocks.{layer}.")}
        if c.x0_shortcut:
            x = w["x0_mix"][0] * x + w["x0_mix"][1] * x0
        h = F.layer_norm(x, (c.n_embd,), w["ln_1.weight"], w["ln_1.bias"])
        q, k, v = (heads(t) for t in (h @ w["attn.c_attn.weight"].T + w["attn.c_attn.bias"]).split(c.n_embd, -1))
        if layer in table_of:
            v = v + heads(p["value_embeddings.weight"][table_of[layer]][idx])
        if c.value_residual and layer > 0:
            v = (1 - w["attn.value_mix"]) * v + w["attn.value_mix"] * first_v
        first_v = v if layer == 0 else first_v
        scores = (q @ k.transpose(-1, -2)) / D**0.5
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, T, c.n_embd)
        x = x + y @ w["attn.c_proj.weight"].T + w["attn.c_proj.bias"]
        h = F.layer_norm(x, (c.n_embd,), w["ln_2.weight"], w["ln_2.bias"])
        h = F.gelu(h @ w["mlp.c_fc.weight"].T + w["mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ w["mlp.c_proj.weight"].T + w["mlp.c_proj.bias"]
    x = F.layer_norm(x, (c.n_embd,), p["ln_f.weight"], p["ln_f.bias"])
    return x @ p["lm_head.weight"].T


@pytest.mark.parametrize("options", ONE_EACH, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@torch.no_grad()
def test_each_later_piece_is_its_definition(options):
    model = tiny_model("learned", n_layer=4, **options)
    idx = random_ids(3, BLOCK, seed=8)
    assert max_abs(model(idx)[0], reference_logits(model, idx)) < 1e-4
    # and the piece does something: the same weights without it give other logits
    plain = GPT(tiny_config("learned", n_layer=4)).eval()
    plain.load_state_dict(model.state_dict(), strict=False)
    assert max_abs(model(idx)[0], plain(idx)[0]) > 1e-2


def test_value_embeddings_feed_the_first_and_the_last_layers():
    assert value_embedding_layers(6, 3) == [0, 1, 2, 0, 1, 2]  # modded-nanogpt's 012 ... 012
    assert value_embedding_layers(5, 2) == [0, 1, None, 0, 1]


def test_a_bigram_table_has_a_row_a_pair_where_they_fit_and_hashes_them_where_not():
    model = GPT(tiny_config("learned", bigram_embedding=10**6))
    assert model.input_layer.bigram.weight.shape == (VOCAB * VOCAB, 32)
    assert not model.input_layer.bigram.weight.any()  # modded-nanogpt's zero start
    assert GPT(tiny_config("learned", bigram_embedding=50)).input_layer.bigram.weight.shape == (50, 32)


@pytest.mark.parametrize("pos_encoding", ["learned", "rope", "alibi", "cope"])
@pytest.mark.parametrize("options", ONE_EACH, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@torch.no_grad()
def test_each_later_piece_decodes_cached_as_uncached(pos_encoding, options):
    model = tiny_model(pos_encoding, n_layer=4, **options)
    idx = random_ids(2, BLOCK, seed=9)
    full = model(idx)[0]
    cache = model.make_cache(2)
    first = model(idx[:, :5], cache=cache)[0]
    steps = torch.cat([model(idx[:, i:i + 1], cache=cache)[0] for i in range(5, BLOCK)], dim=1)
    assert max_abs(torch.cat((first, steps), dim=1), full) < 1e-5


@torch.no_grad()
def test_the_previous_token_is_a_rows_own_in_a_left_padded_batch():
    """smear and the bigram take nothing from the padding: each row gives the logits it gives alone, uncached and
    cached (the cache's token ids), and generation of a shared prompt (the cache's first row copied) matches."""
    model = tiny_model("rope", n_layer=4, **LATER)
    idx, starts = random_ids(2, BLOCK, seed=10), torch.tensor([0, 6])
    padded = model(idx, starts=starts)[0]
    cache = model.make_cache(2)
    model(idx[:, :8], cache=cache, starts=starts)
    steps = torch.cat([model(idx[:, i:i + 1], cache=cache, starts=starts)[0] for i in range(8, BLOCK)], dim=1)
    for row, start in enumerate(starts.tolist()):
        alone = model(idx[row:row + 1, start:])[0][0]
        assert max_abs(padded[row, start:], alone) < 1e-5
        assert max_abs(steps[row], alone[8 - start:]) < 1e-5
    prompt = random_ids(1, 5, seed=11).expand(3, -1)  # one prompt for three rows: prefilled once, then copied
    runs = {True: [], False: []}  # across window slides, the logits each token is drawn from
    for use_cache, logits in runs.items():
        generate(model, prompt, 2 * BLOCK, temperature=0, use_cache=use_cache,
                 on_token=lambda raw, token, logits=logits: logits.append(raw))
    assert max_abs(torch.stack(runs[True]), torch.stack(runs[False])) < 1e-5


@pytest.mark.slow
@torch.no_grad()
def test_the_compiled_decode_step_with_every_later_piece_equals_the_eager_one():
    model = tiny_model("learned", n_layer=4, **LATER)
    prompt, tokens = random_ids(2, 5, seed=12), random_ids(2, BLOCK - 5, seed=13)
    runs = []
    for step in (model.decode_step, compiled_decode_step(model)):
        cache = model.make_cache(2)
        model(prompt, cache=cache)
        runs.append(torch.stack([decode(model, tokens[:, i:i + 1].contiguous(), cache, step)
                                 for i in range(tokens.size(1))], dim=1))
    assert max_abs(runs[1], runs[0]) < 1e-5
    assert max_abs(runs[0], model(torch.cat((prompt, tokens), dim=1))[0][:, 5:]) < 1e-5


def test_a_zero_head_starts_at_zero_and_leaves_every_other_weight():
    torch.manual_seed(14)
    drawn = GPT(tiny_config("learned", tie_head=False, value_embeddings=1))
    torch.manual_seed(14)
    zeroed = GPT(tiny_config("learned", tie_head=False, value_embeddings=1, zero_init_head=True))
    for (name, a), (_, b) in zip(drawn.named_parameters(), zeroed.named_parameters(), strict=True):
        assert (not b.any() and a.std() > 0) if name == "lm_head.weight" else torch.equal(a, b), name


def test_the_untied_head_trains_at_its_own_rate_as_scheduled():
    model = GPT(tiny_config("learned", tie_head=False))
    for optimizer in ("adamw", "muon") if HAS_MUON else ("adamw",):  # Muon: torch 2.9
        config = TrainConfig(optimizer=optimizer, learning_rate=1e-3, head_learning_rate=4e-3)
        built = build_optimizer(model, config, "cpu")
        heads = [g for g in built.param_groups if any(p is model.lm_head.weight for p in g["params"])]
        assert len(heads) == 1 and heads[0]["params"] == [model.lm_head.weight] and heads[0]["weight_decay"] == 0.1
        set_learning_rates(built, 5e-4, config)  # half the peak: the head's rate halves too
        assert heads[0]["lr"] == 2e-3
        assert all(g["lr"] == 5e-4 for g in built.param_groups if g is not heads[0] and g in
                   (built.parts[1].param_groups if optimizer == "muon" else built.param_groups))
    unused = unused_settings(TrainConfig(), tiny_config("learned"), ["head_learning_rate"])
    assert unused == ["head_learning_rate is a setting of tie_head=False, and this run's head is the token table"]


def test_training_with_every_later_piece_resumes_as_one_run(tmp_path, char_data):
    pieces = dict(LATER, n_layer=2, tie_head=False, zero_init_head=True)
    whole = resumed_as_one_run(tmp_path, char_data, pieces, head_learning_rate=3e-2)
    assert whole["model"].input_layer.bigram.weight.any()  # trained: the zero table moved


def test_a_checkpoint_from_before_them_loads_without_them():
    model, state = read_checkpoint(OLD_CHECKPOINT)
    assert not {"zero_init_head", "value_embeddings", "smear", "bigram_embedding"} & state["model_args"].keys()
    assert (model.value_embeddings, model.input_layer.smear, model.input_layer.bigram) == (None, None, None)
    assert not any(hasattr(block, "x0_mix") and block.x0_mix is not None for block in model.blocks)


@pytest.mark.parametrize("setting, message", [
    (dict(value_embeddings=2), r"value_embeddings=2 must be in \[0, n_layer // 2 = 1\]"),
    (dict(value_embeddings=-1), r"value_embeddings=-1 must be in"),
    (dict(n_layer=1, value_residual=True), "value_residual=True needs n_layer >= 2"),
    (dict(bigram_embedding=-5), "bigram_embedding=-5 must be >= 0"),
    (dict(zero_init_head=True), "zero_init_head=True needs tie_head=False"),
])
def test_a_nonsense_later_piece_is_one_line(setting, message):
    with pytest.raises(ValueError, match=message):
        tiny_config("learned", **setting)


def test_resuming_with_a_head_rate_the_run_lacked_is_one_line(tmp_path, char_data):
    settings = dict(max_iters=2, lr_decay_iters=2, warmup_iters=1, eval_interval=2, n_layer=2, tie_head=False)
    run(tmp_path, char_data, **settings)
    with pytest.raises(UserError, match="the optimizer or random state does not fit the model"):
        run(tmp_path, char_data, **{**settings, "max_iters": 4}, init_from="resume", head_learning_rate=1e-2)
