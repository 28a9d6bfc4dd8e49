"""positions.py: the registry keeps the checkpoint keys of main, and T5's bucketed relative bias (the encoding added
through the registry) against a hand-computed table, transformers' T5, a hand-built bias and the uncached forward.
The float64 reference of the whole model with t5 is in test_model.py (reference_forward)."""

import math

import pytest
import torch
from helpers import BLOCK, max_abs, random_ids, tiny_model

from layers import positions as P
from model import GPT, GPTConfig, InputLayer

# state_dict() of GPT(GPTConfig(block_size=16, vocab_size=37, n_layer=1, n_head=2, n_embd=8, pos_encoding=...)) at
# main f8be3b9 (model.py as at 03c7507), in order: every encoding has these; learned adds input_layer.wpe after wte.
MAIN_KEYS = [
    ("input_layer.wte", (37, 8)),
    ("blocks.0.ln_1.weight", (8,)), ("blocks.0.ln_1.bias", (8,)),
    ("blocks.0.attn.c_attn.weight", (24, 8)), ("blocks.0.attn.c_attn.bias", (24,)),
    ("blocks.0.attn.c_proj.weight", (8, 8)), ("blocks.0.attn.c_proj.bias", (8,)),
    ("blocks.0.ln_2.weight", (8,)), ("blocks.0.ln_2.bias", (8,)),
    ("blocks.0.mlp.c_fc.weight", (32, 8)), ("blocks.0.mlp.c_fc.bias", (32,)),
    ("blocks.0.mlp.c_proj.weight", (8, 32)), ("blocks.0.mlp.c_proj.bias", (8,)),
    ("ln_f.weight", (8,)), ("ln_f.bias", (8,)),
    ("lm_head.weight", (37, 8)),
]
MAIN_KEYS_OF = {"learned": [MAIN_KEYS[0], ("input_layer.wpe", (16, 8)), *MAIN_KEYS[1:]],
                "sinusoidal": MAIN_KEYS, "rope": MAIN_KEYS, "alibi": MAIN_KEYS, "none": MAIN_KEYS}


@pytest.mark.parametrize("pos_encoding", sorted(MAIN_KEYS_OF))
def test_state_dict_keys_and_shapes_are_mains(pos_encoding):
    """Checkpoints written before the encodings became classes load: the same keys, in order, of the same shapes."""
    with torch.device("meta"):
        model = GPT(GPTConfig(block_size=16, vocab_size=37, n_layer=1, n_head=2, n_embd=8, pos_encoding=pos_encoding))
    assert [(k, tuple(v.shape)) for k, v in model.state_dict().items()] == MAIN_KEYS_OF[pos_encoding]


def test_t5_adds_one_table_of_buckets_by_heads():
    with torch.device("meta"):
        model = GPT(GPTConfig(block_size=16, vocab_size=37, n_layer=1, n_head=2, n_embd=8, pos_encoding="t5",
                              t5_num_buckets=6))
    keys = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    assert keys == [MAIN_KEYS[0], ("input_layer.relative_bias", (6, 2)), *MAIN_KEYS[1:]]
    assert model.get_num_params() - model.get_num_params(non_embedding=True) == 12


def test_t5_table_init_is_documented_normal():
    """N(0, n_embd^-1/2), as transformers' T5 draws its relative_attention_bias."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=8, vocab_size=8, n_layer=1, n_head=64, n_embd=256, pos_encoding="t5",
                          t5_num_buckets=64))
    table = model.input_layer.relative_bias.detach().double()
    assert table.std().item() == pytest.approx(256 ** -0.5, rel=0.05)
    assert abs(table.mean().item()) < 5 * 256 ** -0.5 / math.sqrt(table.numel())


# Worked by hand from the formula: exact = num_buckets // 2 distances get a bucket each, then
# exact + floor(ln(d / exact) / ln(max_distance / exact) * (num_buckets - exact)), at most num_buckets - 1.
# num_buckets=8, max_distance=16: exact 4; d=6: ln 1.5 / ln 4 * 4 = 1.17 -> 5; d=10: ln 2.5 / ln 4 * 4 = 2.64 -> 6.
# d=8: ln 2 / ln 4 * 4 = 2 exactly -> 6 (float32 rounds it as transformers does: test_t5_bucket_equals_transformers)
HAND_8_16 = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 4, 6: 5, 7: 5, 8: 6, 9: 6, 10: 6, 11: 6, 12: 7, 13: 7, 14: 7, 15: 7,
             16: 7, 50: 7, -3: 0}
# num_buckets=32, max_distance=128 (T5's): exact 16; d=20: ln 1.25 / ln 8 * 16 = 1.72 -> 17; d=64: 10.7 -> 26.
HAND_32_128 = {0: 0, 15: 15, 16: 16, 20: 17, 32: 21, 64: 26, 100: 30, 127: 31, 128: 31, 1000: 31, -5: 0}


@pytest.mark.parametrize("num_buckets, max_distance, table", [(8, 16, HAND_8_16), (32, 128, HAND_32_128)])
def test_t5_bucket_by_hand(num_buckets, max_distance, table):
    distance = torch.tensor(list(table))
    assert P.t5_bucket(distance, num_buckets, max_distance).tolist() == list(table.values())


@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (8, 16), (10, 20), (64, 1000), (2, 3)])
def test_t5_bucket_equals_transformers(num_buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    query, key = torch.arange(600)[:, None], torch.arange(600)[None, :]
    # transformers takes key - query (memory - context); bidirectional=False is T5's decoder, which is causal
    theirs = T5Attention._relative_position_bucket(key - query, bidirectional=False, num_buckets=num_buckets,
                                                   max_distance=max_distance)
    assert torch.equal(P.t5_bucket(query - key, num_buckets, max_distance), theirs)


def test_t5_score_bias_is_the_table_read_at_each_distance():
    config = GPTConfig(block_size=BLOCK, vocab_size=37, n_layer=1, n_head=3, n_embd=12, pos_encoding="t5",
                       t5_num_buckets=8, t5_max_distance=16)
    layer = InputLayer(config)
    with torch.no_grad():
        layer.relative_bias.copy_(torch.arange(24, dtype=torch.float32).view(8, 3))  # bucket b, head h: 3b + h
    query_pos, key_length = torch.arange(9, 9 + 7), 20  # 7 queries after 9 cached tokens, over a 20-key cache
    mask, rope, _ = layer.attention_inputs(query_pos, key_length, cached=True)
    assert rope is None and mask.shape == (3, 7, key_length)
    for h in range(3):
        for i, q in enumerate(query_pos.tolist()):
            for k in range(key_length):
                expected = 3 * HAND_8_16[q - k] + h if k <= q else -math.inf
                assert mask[h, i, k].item() == expected, (h, q, k)


@pytest.mark.parametrize("chunks", [[1] * BLOCK, [3, 1, 5, 2, 5]])
@torch.no_grad()
def test_t5_cached_equals_uncached_across_log_buckets(chunks):
    """Few buckets, so that the distances of a 16-token block reach the log-spaced and the last bucket."""
    model = tiny_model("t5", t5_num_buckets=4, t5_max_distance=8)
    idx = random_ids(2, BLOCK, seed=3)
    full = model(idx)[0]
    cache, out, start = model.make_cache(2), [], 0
    for n in chunks:
        out.append(model(idx[:, start:start + n], cache=cache)[0])
        start += n
    assert max_abs(torch.cat(out, dim=1), full) < 1e-5
    # the bias matters: without it (a zero table) the logits move
    zero = tiny_model("t5", t5_num_buckets=4, t5_max_distance=8)
    zero.input_layer.relative_bias.zero_()
    assert max_abs(zero(idx)[0], full) > 1e-2


def test_t5_settings_are_checked():
    with pytest.raises(ValueError, match=r"t5_num_buckets=1 must be in \[2, 2 \* t5_max_distance = 256\)"):
        GPTConfig(pos_encoding="t5", t5_num_buckets=1)
    with pytest.raises(ValueError, match=r"t5_num_buckets=32 must be in \[2, 2 \* t5_max_distance = 20\)"):
        GPTConfig(pos_encoding="t5", t5_max_distance=10)


def test_every_encoding_is_registered_under_its_name():
    assert P.POS_ENCODINGS == ("learned", "sinusoidal", "rope", "alibi", "none", "t5", "partial_rope", "p_rope", "xpos",
                               "kerple", "fire", "cope", "head_rope", "layer_rope", "pope", "fox",
                               "dynamic_bias")
    assert P.encoding_of(GPTConfig(pos_encoding="t5")).max_length() is None
    assert P.encoding_of(GPTConfig(pos_encoding="learned", block_size=64)).max_length() == 64
