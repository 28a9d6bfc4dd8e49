"""Longer context for a trained model (extend.py, positions.py's scalings, train.py --extend_positions, ablate.py's
from_cell): each test against something written independently here: np.interp for the grown table, rope at
positions p/s, the NTK and YaRN papers' formulas and transformers' rope utilities for the frequencies, the uncached
forward for cached decoding, an uninterrupted finetune for a resumed one. Tiny models on the CPU."""

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import BLOCK, assert_same_state, cli, flags, max_abs, random_ids, run, tiny_model

import sample as sample_module
import score as score_module
import train as train_module
from errors import OptionError, main_guard
from gpt.extend import extend_model, extended_config
from gpt.generate import generate
from layers import positions as P
from model import GPT, GPTConfig, InputLayer
from options import parse_options
from study import cost as study_cost
from study import plots as study_plots
from study.config import PER_RUN, AblateConfig
from study.plan import run_plan
from study.stages import run_study
from train import TrainConfig
from training.checkpoint import load_checkpoint, model_from_checkpoint, read_checkpoint

# Every (encoding, method) that applies, and so every way a model can be extended.
APPLICABLE = [(encoding, method) for encoding in P.POS_ENCODINGS for method in P.ENCODINGS[encoding].extensions]


def scaled(pos_encoding: str = "rope", **settings) -> GPTConfig:
    return GPTConfig(**{"block_size": 64, "vocab_size": 37, "n_layer": 1, "n_head": 4, "n_embd": 128,
                        "pos_encoding": pos_encoding, **settings})


def hf_config(head_dim: int, base: float, **rope_parameters):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, max_position_embeddings=4096,
                       rope_parameters={"rope_theta": base, **rope_parameters})


# ---------------------------------------------------------------------------------------------------- the table


@pytest.mark.parametrize("old, rows", [(8, 16), (8, 20), (16, 64), (5, 13), (1, 4)])
def test_interpolated_rows_are_numpys_interpolation_at_p_over_s(old, rows):
    table = torch.randn(old, 6, generator=torch.Generator().manual_seed(old), dtype=torch.float64)
    grown = P.grown_table(table, rows, "interpolate").numpy()
    x = np.arange(rows) * old / rows  # position interpolation: new position p reads the table at p / s
    expected = np.stack([np.interp(x, np.arange(old), table[:, j].numpy()) for j in range(6)], axis=1)
    np.testing.assert_allclose(grown, expected, rtol=0, atol=1e-12)
    if rows % old == 0:  # a whole factor keeps every trained row, at s * its position
        np.testing.assert_array_equal(grown[:: rows // old], table.numpy())


@pytest.mark.parametrize("old, rows", [(8, 16), (8, 20), (3, 3)])
def test_copied_rows_tile_the_table(old, rows):
    table = torch.randn(old, 4, generator=torch.Generator().manual_seed(0))
    expected = np.tile(table.numpy(), (math.ceil(rows / old), 1))[:rows]
    np.testing.assert_array_equal(P.grown_table(table, rows, "copy").numpy(), expected)


def test_extending_a_learned_table_keeps_every_other_weight_and_draws_nothing():
    model = tiny_model("learned")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    extend_model(model, 40, "interpolate")
    assert torch.equal(torch.get_rng_state(), rng)
    after = model.state_dict()
    assert after["input_layer.wpe"].shape == (40, 32)
    assert torch.equal(after["input_layer.wpe"], P.grown_table(before["input_layer.wpe"], 40, "interpolate"))
    assert all(torch.equal(after[k], v) for k, v in before.items() if k != "input_layer.wpe")
    c = model.config
    assert (c.block_size, c.trained_block_size, c.position_scaling, c.position_scale) == (40, 16, "interpolate", 2.5)
    assert model.input_layer.encoding.config is c  # the encoding reads the extended config
    with pytest.raises(ValueError, match="position 40 is out of range.*block_size=40"):
        model(random_ids(1, 41))


# ---------------------------------------------------------------------------------------------------- rotary


@pytest.mark.parametrize("s", [2.0, 4.0, 1.5])
def test_position_interpolation_is_rope_at_p_over_s(s):
    layer = InputLayer(scaled(position_scaling="interpolate", position_scale=s))
    positions = torch.arange(0, 256)
    _, ((cos, sin), _), _ = layer.attention_inputs(positions, 256, cached=False)
    plain_cos, plain_sin = P.rope_angles(positions / s, 32, 10000.0)  # rope, unscaled, at fractional positions
    assert max_abs(cos, plain_cos) < 2e-5 and max_abs(sin, plain_sin) < 2e-5
    assert max_abs(cos, P.rope_angles(positions, 32, 10000.0)[0]) > 0.1  # the scaling matters
    from transformers.modeling_rope_utils import _compute_linear_scaling_rope_parameters

    theirs, factor = _compute_linear_scaling_rope_parameters(hf_config(32, 10000.0, rope_type="linear", factor=s))
    torch.testing.assert_close(layer.rope_inv_freq, theirs, rtol=1e-6, atol=0)
    assert factor == 1.0


@pytest.mark.parametrize("s, head_dim, base", [(2.0, 32, 10000.0), (4.0, 64, 10000.0), (8.0, 16, 500.0)])
def test_ntk_frequencies_are_the_papers(s, head_dim, base):
    config = GPTConfig(n_embd=4 * head_dim, n_head=4, pos_encoding="rope", rope_base=base, position_scaling="ntk",
                       position_scale=s)
    ours = P.rope_frequencies(config).numpy()
    d = head_dim
    paper = (base * s ** (d / (d - 2))) ** (-np.arange(0, d, 2) / d)  # NTK-aware: b' = b s^(|D|/(|D|-2))
    np.testing.assert_allclose(ours, paper, rtol=1e-12)
    theta = base ** (-np.arange(0, d, 2) / d)
    assert ours[0] == theta[0] and ours[-1] == pytest.approx(theta[-1] / s, rel=1e-12)  # high kept, low / s
    # transformers' dynamic NTK with factor 1 at seq_len = s * its length is the same static rule
    from transformers.modeling_rope_utils import _compute_dynamic_ntk_parameters

    hf = hf_config(head_dim, base, rope_type="dynamic", factor=1.0)
    theirs, _ = _compute_dynamic_ntk_parameters(hf, seq_len=int(s * hf.max_position_embeddings))
    np.testing.assert_allclose(ours, theirs.double().numpy(), rtol=2e-6)


@pytest.mark.parametrize("s, head_dim, base, length", [(2.0, 32, 10000.0, 64), (4.0, 64, 10000.0, 4096),
                                                       (8.0, 128, 500000.0, 8192), (1.5, 16, 10000.0, 256)])
def test_yarn_frequencies_are_the_papers_and_transformers(s, head_dim, base, length):
    config = GPTConfig(n_embd=4 * head_dim, n_head=4, pos_encoding="rope", rope_base=base, block_size=length,
                       position_scaling="yarn", position_scale=s)
    ours = P.rope_frequencies(config).numpy()
    from transformers.modeling_rope_utils import _compute_yarn_parameters

    hf = hf_config(head_dim, base, rope_type="yarn", factor=s, original_max_position_embeddings=length)
    theirs, attention_factor = _compute_yarn_parameters(hf)
    np.testing.assert_allclose(ours, theirs.double().numpy(), rtol=2e-6)
    assert P.yarn_attention_factor(config) == pytest.approx(attention_factor, rel=1e-12)
    assert P.yarn_attention_factor(config) == pytest.approx(0.1 * math.log(s) + 1, rel=1e-12)  # sqrt(1/t)
    # The paper's NTK-by-parts: r = L / lambda, lambda = 2 pi / theta; r < alpha = 1: theta / s; r > beta = 32:
    # theta; between, a ramp (the paper's is linear in r, the code's, and so ours, in the dimension).
    theta = base ** (-np.arange(0, head_dim, 2) / head_dim)
    r = length / (2 * math.pi / theta)
    np.testing.assert_allclose(ours[r < 1], theta[r < 1] / s, rtol=1e-12)
    np.testing.assert_allclose(ours[r > 32], theta[r > 32], rtol=1e-12)
    between = (r >= 1) & (r <= 32)
    assert np.all(ours[between] <= theta[between]) and np.all(ours[between] >= theta[between] / s * (1 - 1e-12))


def test_yarn_temperature_scales_every_score_by_its_square():
    config = scaled(position_scaling="yarn", position_scale=4.0)
    _, ((cos, sin), _), _ = InputLayer(config).attention_inputs(torch.arange(10), 10, cached=False)
    factor = 0.1 * math.log(4.0) + 1
    torch.testing.assert_close(cos ** 2 + sin ** 2, torch.full_like(cos, factor ** 2))


def test_the_trained_length_is_yarns_original_length():
    grown = extended_config(scaled(), 256, "yarn")
    assert (grown.trained_block_size, grown.position_scale) == (64, 4.0)
    by_hand = scaled(position_scaling="yarn", position_scale=4.0)  # block 64 scaled at inference, not grown
    assert torch.equal(P.rope_frequencies(grown), P.rope_frequencies(by_hand))


@pytest.mark.parametrize("pos_encoding, method", [("sinusoidal", "interpolate"), ("rope", "ntk")])
def test_a_second_extension_compounds_the_factor(pos_encoding, method):
    config = extended_config(extended_config(scaled(pos_encoding), 128, method), 512, method)
    assert (config.block_size, config.trained_block_size, config.position_scale) == (512, 64, 8.0)


# ---------------------------------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("pos_encoding, method", APPLICABLE)
@torch.no_grad()
def test_extended_cached_decoding_equals_uncached_past_the_old_block(pos_encoding, method):
    model = tiny_model(pos_encoding)
    extend_model(model, 2 * BLOCK + 8, method)
    idx = random_ids(2, 2 * BLOCK + 8, seed=1)
    full = model(idx)[0]
    cache, out, start = model.make_cache(2), [], 0
    for n in [10, 1, 1, 7, *([1] * 10), 1, 10]:  # chunks and single tokens, well past the old block_size 16
        out.append(model(idx[:, start:start + n], cache=cache)[0])
        start += n
    assert start == idx.size(1) and max_abs(torch.cat(out, dim=1), full) < 1e-5
    if method in ("interpolate", "ntk", "yarn"):  # the scaling reaches the logits
        plain = tiny_model(pos_encoding)
        if pos_encoding == "learned":
            extend_model(plain, 2 * BLOCK + 8, "copy")
        assert max_abs(plain(idx)[0][:, 1:], full[:, 1:]) > 1e-3


@pytest.mark.parametrize("pos_encoding", [e for e in P.POS_ENCODINGS if "keep" in P.ENCODINGS[e].extensions])
@torch.no_grad()
def test_keep_keeps_the_logits_at_the_trained_positions(pos_encoding):
    """keep is the trained model: the same logits, bit for bit, at the positions it was trained on. FIRE's
    normaliser read block_size, the new one after the extension (logits 0.08 apart here)."""
    model = tiny_model(pos_encoding)
    idx = random_ids(2, BLOCK, seed=1)
    before = model(idx)[0]
    extend_model(model, 4 * BLOCK, "keep")
    assert torch.equal(model(idx)[0], before)


@pytest.mark.parametrize("pos_encoding, grown", [*((e, None) for e in P.POS_ENCODINGS), ("rope", "yarn"),
                                                 ("fire", "keep")])
@torch.no_grad()
def test_a_cropped_model_is_the_trained_one_on_the_windows_it_still_takes(pos_encoding, grown):
    """Cropped (to sample or finetune at a shorter window), every encoding gives the uncropped model's logits, bit
    for bit, and so does the model rebuilt from its config (a checkpoint's model_args). FIRE's threshold read the
    new block_size (logits 0.01 apart here): the config now records the length trained at."""
    model = tiny_model(pos_encoding)
    if grown:
        extend_model(model, 4 * BLOCK, grown)
    idx = random_ids(2, BLOCK // 2, seed=1)
    before = model(idx)[0]
    model.crop_block_size(BLOCK // 2)
    rebuilt = GPT(GPTConfig(**dataclasses.asdict(model.config))).eval()
    rebuilt.load_state_dict(model.state_dict())
    assert (model.config.block_size, model.config.trained_block_size) == (BLOCK // 2, BLOCK)
    assert torch.equal(model(idx)[0], before) and torch.equal(rebuilt(idx)[0], before)


@pytest.mark.parametrize("pos_encoding, method", [a for a in APPLICABLE if a[0] != "learned"])
@torch.no_grad()
def test_a_cropped_model_extended_is_the_uncropped_one_extended(pos_encoding, method):
    """Trained at 64, cropped to 32 (to finetune at a shorter window), then extended to 128: the config and the
    logits of the model trained at 64 extended to 128 directly, bit for bit. The factor read the cropped length:
    rope and sinusoidal scaled by 4 where YaRN's original length (and the positions trained) said 2."""
    direct, cropped = tiny_model(pos_encoding, block_size=64), tiny_model(pos_encoding, block_size=64)
    cropped.crop_block_size(32)
    extend_model(direct, 128, method)
    extend_model(cropped, 128, method)
    assert direct.config.position_scale == (1.0 if method == "keep" else 2.0)  # 128 / 64, the trained length
    assert cropped.config == direct.config
    idx = random_ids(2, 128, seed=1)
    assert torch.equal(cropped(idx)[0], direct(idx)[0])


@pytest.mark.parametrize("method", ["interpolate", "yarn"])
def test_a_grown_model_cropped_and_grown_again_compounds_from_its_trained_length(method):
    """Grown 64 -> 128, cropped to 100, grown to 256: the factor of 128 grown to 256, 4, not 2 x 256 / 100."""
    cropped = extended_config(scaled(), 128, method)
    cropped.block_size, cropped.trained_block_size = 100, 64  # as crop_block_size leaves it
    assert extended_config(cropped, 256, method) == extended_config(extended_config(scaled(), 128, method), 256,
                                                                    method)
    assert extended_config(cropped, 120, method).position_scale == 2.0  # within its reach: its own factor


def test_a_learned_table_cropped_grows_from_the_rows_it_kept():
    """A crop cuts a learned table's rows, so its factor is that of the rows it has: 32 grown to 128 is 4."""
    model = tiny_model("learned", block_size=64)
    model.crop_block_size(32)
    extend_model(model, 128, "interpolate")
    assert (model.config.position_scale, model.input_layer.wpe.size(0)) == (4.0, 128)


# ---------------------------------------------------------------------------------------------------- bad input


def test_bad_extensions_are_one_line_value_errors():
    with pytest.raises(ValueError, match=r"extend_positions='yarn' does not apply to pos_encoding='learned', "
                                         r"which takes interpolate, copy"):
        extend_model(tiny_model("learned"), 32, "yarn")
    with pytest.raises(ValueError, match=r"extend_positions='copy' does not apply to pos_encoding='rope'"):
        extend_model(tiny_model("rope"), 32, "copy")
    with pytest.raises(ValueError, match=r"block_size=16 does not grow the model's block_size=16"):
        extend_model(tiny_model("rope"), 16, "ntk")
    with pytest.raises(ValueError, match=r"already grew by position_scaling='ntk'.*extend_positions=ntk"):
        extended_config(extended_config(scaled(), 128, "ntk"), 256, "yarn")
    for scale in (0.0, -2.0, math.nan, math.inf):
        with pytest.raises(ValueError, match=rf"position_scale={scale} must be a finite factor > 0"):
            scaled(position_scaling="interpolate", position_scale=scale)
    with pytest.raises(ValueError, match=r"position_scaling='yarn' does not apply to pos_encoding='learned', which "
                                         r"takes none, interpolate, copy"):
        scaled("learned", position_scaling="yarn", position_scale=2.0)
    with pytest.raises(ValueError, match=r"position_scaling='interpolate' on a learned table only records"):
        scaled("learned", position_scaling="interpolate", position_scale=2.0)
    with pytest.raises(ValueError, match=r"position_scaling='ntk' does not apply to pos_encoding='alibi'"):
        scaled("alibi", position_scaling="ntk", position_scale=2.0)
    with pytest.raises(ValueError, match=r"position_scale=2.0 does nothing with position_scaling='none'"):
        scaled(position_scale=2.0)
    with pytest.raises(ValueError, match=r"trained_block_size=-1 must be >= 0: the block_size the model was"):
        scaled(trained_block_size=-1)
    cropped = tiny_model("rope", block_size=64)
    cropped.crop_block_size(32)
    with pytest.raises(ValueError, match=r"^block_size=48 is within the 64 positions the model was trained at \(it "
                                         r"was cropped to 32\), so extend_positions=yarn would scale nothing; give "
                                         r"extend_positions=keep, or a block_size past 64$"):
        extend_model(cropped, 48, "yarn")
    extend_model(cropped, 48, "keep")  # the trained positions, unscaled


def test_shrinking_below_the_cached_positions_is_refused():
    model = tiny_model("learned")
    cache = model.make_cache(1)
    model(random_ids(1, 12), cache=cache)
    with pytest.raises(ValueError, match=r"block_size=8 is below the 12 positions already cached \(0..11\); crop "
                                         r"to at least 12"):
        model.crop_block_size(8, cache)
    model.crop_block_size(12, cache)
    assert model.config.block_size == 12


# ---------------------------------------------------------------------------------------------------- train.py


@pytest.fixture(scope="module")
def bases(tmp_path_factory, char_data):
    """A learned and a rope run of 3 steps at block_size 16."""
    root = tmp_path_factory.mktemp("bases")
    for pos_encoding in ("learned", "rope"):
        run(root / pos_encoding, char_data, pos_encoding=pos_encoding, max_iters=3, lr_decay_iters=3)
    return root


@pytest.mark.parametrize("pos_encoding, method", [("learned", "interpolate"), ("rope", "yarn")])
def test_a_finetune_at_the_longer_length_resumes_bit_for_bit(tmp_path, char_data, bases, pos_encoding, method):
    """Dropout on: the resumed half also needs the restored random streams."""
    settings = dict(init_from=str(bases / pos_encoding), block_size=32, extend_positions=method, max_iters=6,
                    lr_decay_iters=6, warmup_iters=1, eval_interval=3, dropout=0.1)
    whole = run(tmp_path / "a", char_data, **settings)
    first = run(tmp_path / "b", char_data, **{**settings, "max_iters": 3})
    second = run(tmp_path / "b", char_data, init_from="resume", max_iters=6, lr_decay_iters=6, warmup_iters=1,
                 eval_interval=3, dropout=0.1)  # no extension flag: the checkpoint records it
    assert [r["iter"] for r in first["train_losses"] + second["train_losses"]] == list(range(1, 7))  # from step 0
    assert first["train_losses"] + second["train_losses"] == whole["train_losses"]
    assert_same_state(second["model"].state_dict(), whole["model"].state_dict())
    saved = load_checkpoint(tmp_path / "b" / "ckpt.pt")
    args = saved["model_args"]
    assert (args["block_size"], args["trained_block_size"], args["position_scaling"], args["position_scale"]) == (
        32, 16, method, 2.0)
    for a, b in zip(load_checkpoint(tmp_path / "a" / "ckpt.pt")["optimizer"]["state"].values(),
                    saved["optimizer"]["state"].values(), strict=True):
        assert_same_state(a, b)
    model, _ = read_checkpoint(tmp_path / "b" / "ckpt.pt")  # how sample.py loads it: no extra flag
    model.eval()  # as sample.py does: with dropout on, cached and uncached draw other masks (it trained at 0.1)
    prompt = random_ids(1, 20, vocab=model.config.vocab_size)
    cached = generate(model, prompt, 12, top_k=1)  # greedy, positions 20..31: past the base's 16
    assert torch.equal(cached, generate(model, prompt, 12, top_k=1, use_cache=False))


def test_checkpoints_without_the_extension_settings_load_unscaled(bases):
    state = load_checkpoint(bases / "rope" / "ckpt.pt")
    old = {**state, "model_args": {k: v for k, v in state["model_args"].items()
                                   if k not in ("position_scaling", "position_scale", "trained_block_size")}}
    model = model_from_checkpoint(old)
    assert (model.config.position_scaling, model.config.position_scale, model.config.trained_block_size) == (
        "none", 1.0, 0)
    idx = random_ids(1, 16, vocab=model.config.vocab_size)
    assert torch.equal(model(idx)[0], model_from_checkpoint(state)(idx)[0])


def test_an_extended_cope_run_resumes_samples_and_scores(tmp_path, char_data, corpus_text, capsys):
    """cope_positions=0 (block_size + 1 rows) was saved as 0 and read back as the grown block_size + 1: the
    extended run (and a cropped one) exited 0, and then resume, sample.py and score.py refused its checkpoint."""
    base, extended, cropped = tmp_path / "base", tmp_path / "extended", tmp_path / "cropped"
    assert cli(train_module.main, flags(base, char_data, pos_encoding="cope"), capsys)[0] == 0
    assert cli(train_module.main, flags(extended, char_data, init_from=base, block_size=32, extend_positions="keep"),
               capsys)[0] == 0
    assert load_checkpoint(extended / "ckpt.pt")["model_args"]["cope_positions"] == 17  # stored resolved
    assert cli(train_module.main, flags(extended, char_data, init_from="resume", block_size=32, max_iters=6,
                                        lr_decay_iters=6), capsys)[0] == 0
    assert load_checkpoint(extended / "ckpt.pt")["iter_num"] == 6
    assert cli(train_module.main, flags(cropped, char_data, init_from=base, block_size=8, finetune=True),
               capsys)[0] == 0
    text = tmp_path / "text.txt"
    text.write_text(corpus_text[:2000], encoding="utf-8")
    for run_dir, block_size in ((extended, 32), (cropped, 8)):
        code, out, err = cli(sample_module.main, [f"--out_dir={run_dir}", "--device=cpu", "--num_samples=1",
                                                  "--max_new_tokens=40", "--start=The"], capsys)
        assert code == 0, err
        code, out, err = cli(score_module.main, [f"--out_dir={run_dir}", f"--input={text}", "--device=cpu",
                                                 "--progress=False"], capsys)
        assert code == 0, err
        model, _ = read_checkpoint(run_dir / "ckpt.pt")
        assert (model.config.block_size, model.input_layer.cope_table.size(-1)) == (block_size, 17)


def test_a_cope_checkpoint_extended_before_the_rows_were_stored_loads():
    """The extension of the code before: cope_positions 0, block_size 32, trained_block_size 16, a table of 17
    rows (the trained block_size + 1): it loads, the same model as with its rows written out."""
    model = tiny_model("cope")
    extend_model(model, 2 * BLOCK, "keep")
    args = dataclasses.asdict(model.config)
    assert args["cope_positions"] == BLOCK + 1
    old = model_from_checkpoint({"model_args": {**args, "cope_positions": 0}, "model": model.state_dict(),
                                 "tokenizer": {"vocab_size": model.config.vocab_size}})
    idx = random_ids(1, 2 * BLOCK)
    assert torch.equal(old.eval()(idx)[0], model(idx)[0])


def command_line_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        main_guard(train_module.main, argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_bad_extension_flags_are_one_line_with_exit_2(tmp_path, char_data, bases, capsys):
    common = [f"--dataset={char_data}", f"--out_dir={tmp_path / 'out'}", "--device=cpu", "--compile=False",
              "--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=32", "--max_iters=1", "--progress=False"]
    learned = f"--init_from={bases / 'learned'}"
    cases = [
        ([learned, "--extend_positions=yarn"], r"extend_positions='yarn' does not apply to pos_encoding='learned', "
                                               r"which takes interpolate, copy"),
        ([learned], r"block_size=32 is larger than .*block_size=16; give --extend_positions=interpolate\|copy"),
        ([learned, "--extend_positions=stretch"], r"extend_positions='stretch' must be one of interpolate, copy"),
        ([learned, "--extend_positions=copy", "--block_size=8"], r"past .*, but block_size=8 is not larger"),
        (["--extend_positions=copy"], r"--extend_positions=copy grows a trained model: give it with --init_from"),
        (["--pos_encoding=rope", "--position_scaling=yarn", "--position_scale=0"],
         r"position_scale=0.0 must be a finite factor > 0"),
    ]
    for argv, message in cases:
        assert re.search(message, command_line_error(capsys, common + argv)), argv
    assert not (tmp_path / "out" / "ckpt.pt").exists()


# ---------------------------------------------------------------------------------------------------- the study


def extension_study(root, char_data, **changes) -> tuple:
    ablate_config = AblateConfig(
        study_dir=str(root / "study"), seeds=1, eval_multipliers=[1.0, 2.0], sliding_stride=8, eval_batch_size=16,
        variants=["learned", "rope", "learned block_size=32 extend_positions=interpolate max_iters=0 "
                  "from_cell=learned", "rope block_size=32 extend_positions=yarn max_iters=2 batch_size=2 "
                  "from_cell=rope"], **changes)
    train_config = TrainConfig(dataset=str(char_data), max_iters=2, eval_interval=2, eval_iters=1, log_interval=1,
                               batch_size=4, warmup_iters=1, lr_decay_iters=2, device="cpu", compile=False,
                               progress=False)
    return ablate_config, train_config, GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=BLOCK)


@pytest.mark.parametrize("cell, message", [
    ("rope block_size=32 extend_positions=copy max_iters=0 from_cell=rope",
     "extend_positions='copy' does not apply to pos_encoding='rope', which takes keep, interpolate, ntk, yarn"),
    ("learned block_size=8 extend_positions=interpolate max_iters=0 from_cell=learned",
     "block_size=8 does not grow the model's block_size=16"),
])
def test_a_finetune_its_base_cannot_take_is_refused_before_the_base_trains(tmp_path, char_data, cell, message):
    """Was refused only when the finetune started, after its base cell had trained."""
    ablate_config, train_config, model_config = extension_study(tmp_path, char_data)
    with pytest.raises(OptionError, match=re.escape(f"cell {cell!r}: {message}")):
        run_plan(dataclasses.replace(ablate_config, variants=["learned", "rope", cell]), train_config, model_config)
    assert not (tmp_path / "study").exists()


def test_a_finetune_is_priced_at_its_own_steps(tmp_path, char_data, monkeypatch):
    """--list_runs: a from_cell run trains its own max_iters from step 0 (not its max_iters less its base's)."""
    configs = extension_study(tmp_path, char_data)
    plan = run_plan(*configs)
    by_dir = {run.dir: run for run in plan}
    assert [study_cost.steps_to_train(run, by_dir) for run in plan] == [2, 2, 0, 2]
    monkeypatch.setattr(study_cost, "probe_token_seconds", lambda run: 1.0)
    estimates = study_cost.run_estimates(plan, configs[0], [None] * len(plan))
    assert all(seconds > 0 for seconds in estimates)  # the 0-step extension is still evaluated
    train_config, model_config = plan[3].train_config, plan[3].model_config
    step = train_config.gradient_accumulation_steps * train_config.batch_size * model_config.block_size
    assert estimates[3] >= 2 * step  # 2 steps' tokens at 1 s each, and its evaluation
    view = study_cost.plan_view(plan, estimates, [0] * len(plan), 2)
    assert view.splitlines()[-2].startswith("0 finished, 4 to run: 6 steps")


def test_from_cell_finetunes_each_seed_of_its_base(tmp_path, char_data):
    configs = extension_study(tmp_path, char_data)
    control = "rope max_iters=2 from_cell=rope"  # rope trained 2 steps more at its own block_size
    configs = (dataclasses.replace(configs[0], variants=[*configs[0].variants, control]), *configs[1:])
    plan = run_plan(*configs)
    base, extension = plan[0], plan[2]
    assert extension.start_from == base.dir and extension.finetune and extension.budget == 2
    result = run_study(*configs)
    saved = load_checkpoint(extension.dir / "ckpt.pt")
    assert saved["iter_num"] == 0 and saved["model_args"]["trained_block_size"] == BLOCK
    grown = read_checkpoint(base.dir / "ckpt.pt")[0]
    extend_model(grown, 32, "interpolate")  # 0 steps: the base's weights, extended
    assert_same_state(saved["model"], grown.state_dict())
    rows = {r["variant"]: r for r in result["summary"]}
    assert rows[extension.variant]["loss"]["nonoverlapping 32"] is not None  # 32 rows now
    assert rows["learned"]["loss"]["nonoverlapping 32"] is None and rows["learned"]["loss"]["sliding 32"]
    evaluation = next(r["eval"] for r in result["runs"] if r["variant"] == plan[3].variant)
    assert evaluation["key"]["lengths"] == [16, 32] and evaluation["key"]["window"] == BLOCK  # the base's
    family = result["comparisons"]["finetune against its base's sliding window"]
    assert {(r["a"], r["a_protocol"], r["b"], r["length"]) for r in family} == {
        (plan[2].variant, "nonoverlapping", "learned", 32), (plan[3].variant, "nonoverlapping", "rope", 32),
        (control, "sliding", "rope", 32)}  # the control extends nothing: its sliding window against its base's
    losses = {r["variant"]: r["eval"]["protocols"] for r in result["runs"]}
    [row] = result["comparisons"]["finetune against its control's sliding window"]
    assert (row["a"], row["b"], row["length"]) == (plan[3].variant, control, 32)  # the same 2 steps, 32 vs 16 long
    assert row["mean"] == pytest.approx(losses[plan[3].variant]["nonoverlapping"]["32"]["loss"]
                                        - losses[control]["sliding"]["32"]["loss"])
    assert next(r["iter_num"] for r in result["runs"] if r["variant"] == control) == 2  # from step 0: not its
    # base's run continued, which had ended at 2 and would train nothing
    recorded = [r for r in result["runs"] if r["variant"] == plan[3].variant][0]
    assert recorded["settings"]["run"]["finetunes"] == "rope/seed1337" and recorded["iter_num"] == 2
    assert study_plots.extensions(result["runs"], {plan[2].variant: "learned", plan[3].variant: "rope"}) == {
        plan[2].variant: {"base": "learned", "method": "interpolate", "block_size": 32, "steps": 0},
        plan[3].variant: {"base": "rope", "method": "yarn", "block_size": 32, "steps": 2}}
    assert (tmp_path / "study" / "extension.png").stat().st_size > 0


@pytest.mark.parametrize("variants, changes, message", [
    (["learned", "learned from_cell=rope"], {}, r"from_cell='rope' must name a cell listed before it.*: learned"),
    (["learned block_size=32 from_cell=learned", "learned"], {}, r"must name a cell listed before it"),
    (["learned", "learned n_layer=2 from_cell=learned"], {}, r"changes model settings of its from_cell 'learned'"),
    (["learned", "learned max_iters=1 from_cell=learned"], {"budgets": [2]}, r"give no --budgets or --lr_sweep"),
])
def test_bad_from_cells_are_refused_before_anything_trains(tmp_path, char_data, variants, changes, message):
    ablate_config, train_config, model_config = extension_study(tmp_path, char_data)
    with pytest.raises(OptionError, match=message):
        run_plan(dataclasses.replace(ablate_config, variants=variants, **changes), train_config, model_config)


def test_the_study_config_plans_under_40k_steps(tmp_path):
    ablate_config, train_config, model_config = parse_options(
        ["config/ablate_context_extension.py"], (AblateConfig, TrainConfig, GPTConfig), "ablate.py", "",
        skip=PER_RUN)
    plan = run_plan(dataclasses.replace(ablate_config, study_dir=str(tmp_path)), train_config, model_config)
    steps = sum(run.train_config.max_iters for run in plan)
    header = Path("config/ablate_context_extension.py").read_text().split("\n\n")[0]
    assert f"{steps:,} steps" in header and steps <= 40_000
    tokens = {run.train_config.batch_size * run.model_config.block_size for run in plan}
    assert tokens == {train_config.batch_size * model_config.block_size}  # every step trains on as many tokens
    encodings = {run.model_config.pos_encoding for run in plan}
    assert encodings == {"learned", "sinusoidal", "rope", "alibi"}
    for encoding in encodings:  # every applicable method at 2x and 4x, with 0 and with the short finetune
        methods = {(run.train_config.extend_positions, run.model_config.block_size,
                    run.train_config.max_iters) for run in plan if run.finetune
                   and run.model_config.pos_encoding == encoding and run.seed == ablate_config.first_seed}
        expected = {(m, n, f) for m in P.ENCODINGS[encoding].extensions for n in (128, 256) for f in (0, 200)}
        assert methods == expected | {("", 64, 200)}, encoding  # and the control: 200 steps more at 64
