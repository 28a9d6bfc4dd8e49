"""nanoGPT's files as they are: checkpoints, data folders and meta.pkl, built in its layout by tests/helpers.py (keys
and dtypes as its train.py and data/shakespeare_char/prepare.py write them), against a float64 NumPy forward of its
published architecture (wte + wpe, pre-LayerNorm blocks, exact erf GELU, final LayerNorm, tied head)."""

import hashlib
import importlib.util
import math
import os
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CHARS, nanogpt_weights, write_meta, write_nanogpt_data, write_nanogpt_run
from scipy.special import erf

from errors import UserError
from model import GPT, GPTConfig
from sample import SampleConfig, load_model, sample
from text.dataset import load_split, resolve_data_dir
from text.tokenizer import read_description
from train import TrainConfig, train
from training.checkpoint import read_checkpoint
from training.nanogpt import continue_training, init_checkpoint

REPO = Path(__file__).resolve().parents[1]


def reference_logits(w: dict[str, torch.Tensor], idx: np.ndarray, n_layer: int, n_head: int) -> np.ndarray:
    """nanoGPT's GPT.forward, logits at every position, in float64 NumPy."""
    w = {k: v.double().numpy() for k, v in w.items()}

    def layer_norm(x, name):
        x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w[name + ".weight"]
        return x + w.get(name + ".bias", 0.0)

    def linear(x, name):
        return x @ w[name + ".weight"].T + w.get(name + ".bias", 0.0)

    B, T = idx.shape
    x = w["transformer.wte.weight"][idx] + w["transformer.wpe.weight"][np.arange(T)]
    C = x.shape[-1]
    for i in range(n_layer):
        p = f"transformer.h.{i}."
        q, k, v = np.split(linear(layer_norm(x, p + "ln_1"), p + "attn.c_attn"), 3, axis=-1)
        q, k, v = (t.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3) for t in (q, k, v))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(C // n_head)
        scores = np.where(np.tril(np.ones((T, T), dtype=bool)), scores, -np.inf)
        att = np.exp(scores - scores.max(-1, keepdims=True))
        y = (att / att.sum(-1, keepdims=True)) @ v
        x = x + linear(y.transpose(0, 2, 1, 3).reshape(B, T, C), p + "attn.c_proj")
        h = linear(layer_norm(x, p + "ln_2"), p + "mlp.c_fc")
        x = x + linear(0.5 * h * (1 + erf(h / np.sqrt(2))), p + "mlp.c_proj")  # nn.GELU(): the exact GELU
    return layer_norm(x, "transformer.ln_f") @ w["lm_head.weight"].T


@pytest.mark.parametrize("bias, compiled", [(True, False), (False, False), (True, True)])
def test_checkpoint_logits_equal_nanogpts_forward(tmp_path, bias, compiled):
    path = write_nanogpt_run(tmp_path / "out", bias=bias, compiled=compiled)
    write_meta(tmp_path / "data" / "shakespeare_char")
    model, state = read_checkpoint(path)
    assert state["tokenizer"] == {"kind": "char", "chars": CHARS, "vocab_size": len(CHARS)}
    idx = np.random.default_rng(0).integers(0, len(CHARS), size=(3, 32))
    ours = model.double().eval()(torch.from_numpy(idx))[0].detach().numpy()
    expected = reference_logits(nanogpt_weights(2, 16, len(CHARS), 32, bias), idx, n_layer=2, n_head=2)
    assert np.abs(ours - expected).max() < 1e-9


def test_the_causal_mask_buffer_of_an_old_torch_is_dropped(tmp_path):
    path = write_nanogpt_run(tmp_path / "out", n_layer=1)
    state = torch.load(path, weights_only=True)
    state["model"]["transformer.h.0.attn.bias"] = torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32)
    torch.save(state, path)
    write_meta(tmp_path / "data" / "shakespeare_char")
    model, _ = read_checkpoint(path)
    assert model.blocks[0].attn.c_attn.bias is not None  # the real bias stays


def test_meta_pkl_is_found_where_nanogpts_sample_looks(tmp_path, monkeypatch):
    path = write_nanogpt_run(tmp_path / "runs" / "out")  # no data/ beside the run: the working folder's
    with pytest.raises(UserError, match=r"vocab_size=63, fewer than GPT-2's 50257, but no meta\.pkl"):
        read_checkpoint(path)
    write_meta(tmp_path / "data" / "shakespeare_char", CHARS[::-1])
    monkeypatch.chdir(tmp_path)
    assert read_checkpoint(path)[1]["tokenizer"]["chars"] == CHARS[::-1]


@pytest.mark.gpt2_bpe
def test_padded_gpt2_vocabulary_samples_only_real_tokens(tmp_path):
    path = write_nanogpt_run(tmp_path / "out", n_layer=1, n_embd=8, vocab_size=50304, block_size=16,
                             dataset="openwebtext")
    model, tokenizer = load_model(str(path.parent), "ignored")
    assert (model.config.vocab_size, tokenizer.vocab_size) == (50304, 50257)  # GPT-2's BPE, the rows kept
    with torch.no_grad():  # make a padded row the most likely next token everywhere
        model.lm_head.weight[50300] = 100 * model.ln_f.weight.sign()
        model.ln_f.bias.zero_()
    prompt = tokenizer.encode("Hi")
    logits = model(torch.tensor([prompt]))[0][0, -1]
    assert int(logits.argmax()) == 50300
    text = sample(model, tokenizer, SampleConfig(start="Hi", num_samples=1, max_new_tokens=5, temperature=0.0))
    assert text[0].startswith(tokenizer.decode([*prompt, int(logits[:50257].argmax())]))  # the best real token


def test_sample_cli_on_a_nanogpt_out_dir(tmp_path, script_env):
    write_nanogpt_run(tmp_path / "out")
    write_meta(tmp_path / "data" / "shakespeare_char")
    result = subprocess.run([sys.executable, str(REPO / "sample.py"), f"--out_dir={tmp_path / 'out'}",
                             "--start=ROMEO:", "--max_new_tokens=20", "--num_samples=2", "--device=cpu"],
                            env=script_env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ROMEO:") == 2


def test_a_nanogpt_data_folder_is_a_dataset_as_it_is(tmp_path, corpus_text):
    folder = write_nanogpt_data(tmp_path / "shakespeare_char", corpus_text)
    before = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in folder.iterdir()}
    assert resolve_data_dir(str(folder)) == folder
    description = read_description(folder)
    chars = "".join(sorted(set(corpus_text)))
    assert description["chars"] == chars and description["dtype"] == "uint16"
    assert description["train_tokens"] + description["val_tokens"] == len(corpus_text)
    val_text = corpus_text[int(len(corpus_text) * 0.9):]
    assert load_split(folder, "val", 8)[:5].tolist() == [chars.index(c) for c in val_text[:5]]
    assert {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in folder.iterdir()} == before


def test_train_continues_a_nanogpt_run_with_its_optimizer_state(tmp_path, corpus_text):
    data = write_nanogpt_data(tmp_path / "data" / "shakespeare_char", corpus_text)
    chars = read_description(data)["chars"]
    ckpt = write_nanogpt_run(tmp_path / "out-nanogpt", vocab_size=len(chars))
    config = TrainConfig(out_dir=str(tmp_path / "ours"), dataset=str(data), init_from=str(ckpt), max_iters=252,
                         eval_interval=1, eval_iters=1, batch_size=2, device="cpu", compile=False, progress=False)
    result = train(config, GPTConfig(block_size=32, n_layer=2, n_head=2, n_embd=16))
    assert result["iter_num"] == 252  # from nanoGPT's step 250, two steps more
    assert (tmp_path / "ours" / "ckpt.pt").is_file()


def test_finetune_trains_a_checkpoints_weights_from_step_0(tmp_path, corpus_text):
    """--finetune=True: a new run from the weights (step 0, AdamW's moments from zero); without it the same command
    would continue nanoGPT's run from step 250, past max_iters=2, and is refused before any step."""
    data = write_nanogpt_data(tmp_path / "data" / "shakespeare_char", corpus_text)
    ckpt = write_nanogpt_run(tmp_path / "out-nanogpt", vocab_size=len(read_description(data)["chars"]))
    config = TrainConfig(out_dir=str(tmp_path / "ours"), dataset=str(data), init_from=str(ckpt), max_iters=2,
                         eval_interval=2, eval_iters=1, batch_size=2, device="cpu", compile=False, progress=False)
    model_config = GPTConfig(block_size=32, n_layer=2, n_head=2, n_embd=16)
    with pytest.raises(UserError, match=r"continues its run from step 250, which max_iters=2 does not pass: .*"
                                        r"--finetune=True"):
        train(config, model_config)
    result = train(replace(config, finetune=True, overwrite=True), model_config)
    saved = torch.load(tmp_path / "ours" / "ckpt.pt", weights_only=True)
    assert result["iter_num"] == saved["iter_num"] == 2
    assert {int(state["step"]) for state in saved["optimizer"]["state"].values()} == {2}  # 2 steps, not 252
    with pytest.raises(ValueError, match=r"finetune=True .* init_from='scratch'"):
        replace(config, init_from="scratch", finetune=True)


def test_continuing_maps_each_moment_to_its_parameter(tmp_path):
    ckpt = write_nanogpt_run(tmp_path / "out")
    write_meta(tmp_path / "data" / "shakespeare_char")
    model, state = read_checkpoint(ckpt)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    iter_num, best_val_loss = continue_training(model, optimizer, state, ckpt, "adamw")
    names = [k for k in nanogpt_weights(2, 16, len(CHARS), 32, True) if k != "lm_head.weight"]
    ours = {id(p): name for name, p in model.named_parameters()}
    tables = {"input_layer.wte": "transformer.wte.weight", "input_layer.wpe": "transformer.wpe.weight"}
    for group in optimizer.param_groups:
        assert group["betas"] == (0.9, 0.95)  # this run's settings, not the checkpoint's
        for p in group["params"]:
            index = names.index(tables.get(ours[id(p)], "transformer." + ours[id(p)].replace("blocks.", "h.")))
            # one Adam step from zero moments with grad i+1: exp_avg = (1 - beta1) * (i + 1)
            assert torch.allclose(optimizer.state[p]["exp_avg"], torch.full_like(p, 0.1 * (index + 1)))
    assert (iter_num, round(best_val_loss, 4)) == (250, 1.4861)


def test_continuing_with_other_shapes_trains_the_weights_from_step_0(tmp_path, capsys):
    ckpt = write_nanogpt_run(tmp_path / "out")
    write_meta(tmp_path / "data" / "shakespeare_char")
    model, state = read_checkpoint(ckpt)
    model.crop_block_size(16)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    assert continue_training(model, optimizer, state, ckpt, "adamw") == (0, math.inf) and not optimizer.state
    assert "does not fit this model; training its weights from step 0" in capsys.readouterr().out


def test_init_checkpoint_names_files_and_run_folders_only(tmp_path):
    ckpt = write_nanogpt_run(tmp_path / "out")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    (tmp_path / "hf" / "ckpt.pt").write_text("")
    assert init_checkpoint(str(ckpt)) == ckpt and init_checkpoint(str(tmp_path / "out")) == ckpt
    assert [init_checkpoint(x) for x in ("scratch", "resume", "gpt2", str(tmp_path / "hf"))] == [None] * 4


class Hostile:
    """Unpickling this runs open(marker, 'w'), unless the loader refuses to build objects."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def test_a_hostile_meta_pkl_runs_nothing_and_is_one_line_exit_2(tmp_path, corpus_text, script_env):
    folder = write_nanogpt_data(tmp_path / "data", corpus_text)
    marker = tmp_path / "created"
    (folder / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 3, "itos": Hostile(marker)}))
    with pytest.raises(UserError, match=r"meta\.pkl holds more than plain dicts"):
        read_description(folder)
    result = subprocess.run([sys.executable, str(REPO / "train.py"), f"--dataset={folder}", "--device=cpu",
                             f"--out_dir={tmp_path / 'out'}", "--compile=False"],
                            env=script_env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert str(folder / "meta.pkl") in result.stderr
    assert not marker.exists()


def test_a_hostile_nanogpt_checkpoint_runs_nothing_and_is_one_line_exit_2(tmp_path, script_env):
    path = write_nanogpt_run(tmp_path / "out")
    marker = tmp_path / "created"
    state = torch.load(path, weights_only=True)
    state["config"]["dataset"] = Hostile(marker)
    torch.save(state, path)
    result = subprocess.run([sys.executable, str(REPO / "sample.py"), f"--init_from={path}", "--device=cpu"],
                            env=script_env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert str(path) in result.stderr and not marker.exists()


@pytest.mark.parametrize("meta, message", [
    ({"vocab_size": 3, "itos": {0: "a", 1: "bb", 2: "c"}}, "not a character vocabulary"),
    ({"vocab_size": 3, "itos": {0: "a", 1: "a", 2: "c"}}, "not a character vocabulary"),
    ({"vocab_size": 4, "itos": {0: "a", 1: "b", 2: "c"}}, "not a character vocabulary"),
    (["a", "b"], "holds a list, not a dict"),
])
def test_a_meta_pkl_that_is_no_character_vocabulary_is_named(tmp_path, meta, message):
    folder = tmp_path / "data"
    folder.mkdir()
    for split in ("train", "val"):
        np.zeros(10, dtype=np.uint16).tofile(folder / f"{split}.bin")
    (folder / "meta.pkl").write_bytes(pickle.dumps(meta))
    with pytest.raises(UserError, match=message):
        read_description(folder)


def test_a_changed_nanogpts_model_args_are_refused(tmp_path):
    path = write_nanogpt_run(tmp_path / "out")
    write_meta(tmp_path / "data" / "shakespeare_char")
    state = torch.load(path, weights_only=True)
    state["model_args"]["n_kv_head"] = 1
    torch.save(state, path)
    with pytest.raises(UserError, match=r"unknown \['n_kv_head'\]"):
        read_checkpoint(path)


def test_our_model_with_nanogpts_gelu_is_a_setting_of_its_own():
    model = GPT(GPTConfig(block_size=8, vocab_size=11, n_layer=1, n_head=1, n_embd=8, gelu="erf"))
    x = torch.linspace(-3, 3, 32).reshape(1, 1, 32)
    assert torch.allclose(model.blocks[0].mlp.activation(x), torch.nn.GELU()(x))
    with pytest.raises(ValueError, match="gelu='relu' must be tanh or erf"):
        GPTConfig(gelu="relu")


NANOGPT_DIR = os.environ.get("NANOGPT_DIR")  # a checkout of karpathy/nanoGPT: compared with its own model.py


@pytest.mark.skipif(not NANOGPT_DIR, reason="set NANOGPT_DIR to a checkout of karpathy/nanoGPT")
@pytest.mark.parametrize("bias, vocab_size", [(True, 50304), (False, 50304), (False, 63)])
def test_logits_equal_nanogpts_own_model(tmp_path, bias, vocab_size):
    spec = importlib.util.spec_from_file_location("nanogpt_model", Path(NANOGPT_DIR) / "model.py")
    theirs_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(theirs_module)
    torch.manual_seed(0)
    args = dict(n_layer=3, n_head=4, n_embd=64, block_size=128, bias=bias, vocab_size=vocab_size, dropout=0.0)
    theirs = theirs_module.GPT(theirs_module.GPTConfig(**args))
    with torch.no_grad():  # gains and biases off their initial 1 and 0, so that they count
        for p in theirs.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    (tmp_path / "out").mkdir()
    torch.save({"model": theirs.state_dict(), "optimizer": {}, "model_args": args, "iter_num": 0,
                "best_val_loss": torch.tensor(9.0), "config": {"dataset": "shakespeare_char"}},
               tmp_path / "out" / "ckpt.pt")
    write_meta(tmp_path / "data" / "shakespeare_char")
    ours, _ = read_checkpoint(tmp_path / "out" / "ckpt.pt")
    idx = torch.randint(0, min(vocab_size, 50257), (4, 128))
    with torch.no_grad():
        expected = theirs.double().eval()(idx, targets=idx)[0]  # with targets: the logits at every position
        assert (ours.double().eval()(idx)[0] - expected).abs().max() < 1e-12


@pytest.mark.skipif(not NANOGPT_DIR, reason="set NANOGPT_DIR to a checkout of karpathy/nanoGPT")
def test_nanogpts_own_config_files_read_as_python_runs_them(monkeypatch):
    import time

    from options import chosen_values

    monkeypatch.setattr(time, "time", lambda: 1700000000.5)
    files = sorted((Path(NANOGPT_DIR) / "config").glob("*.py"))
    assert files
    for path in files:
        executed = {}
        exec(path.read_text(), executed)  # the reference, in the test only
        expected = {k: v for k, v in executed.items() if not k.startswith("__") and k != "time"}
        assert chosen_values([str(path)], (TrainConfig, GPTConfig)) == expected, path.name
