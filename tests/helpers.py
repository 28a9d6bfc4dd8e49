"""What more than one test module uses, in one plain module (not a test file: pytest collects nothing here, and
no test module imports another): the tiny model, the tiny training run and torchrun, a script's main run as its
__main__ runs it and the one-line error it must end with, a folder's digests, the preparers as the scripts run
them, nanoGPT's files as its scripts write them, and a small corpus of words. Fixtures live in conftest.py."""

import dataclasses
import hashlib
import importlib.util
import pickle
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from errors import main_guard
from model import GPT, GPTConfig
from text.dataset import prepare_main
from train import TrainConfig, train
from training.checkpoint import load_checkpoint
from training.optimizers import MUON_TORCH
from training.parallel import FSDP_TORCH, FSDPModule

REPO = Path(__file__).resolve().parents[1]


# ---- what an older torch lacks: train.py refuses it in one line there (tested), and the tests that use it skip

TORCH = tuple(int(part) for part in torch.__version__.split(".")[:2])  # (2, 13) for 2.13.0+cpu
HAS_MUON = hasattr(torch.optim, "Muon")
needs_muon = pytest.mark.skipif(not HAS_MUON,
                                reason=f"--optimizer=muon needs torch {MUON_TORCH} (torch.optim.Muon)")
needs_fsdp = pytest.mark.skipif(FSDPModule is None,
                                reason=f"--parallel=fsdp needs torch {FSDP_TORCH} (torch.distributed.fsdp.fully_shard)")


# ---- the tiny model (most model and decoding tests) ---------------------------------------------------------------

BLOCK, VOCAB = 16, 37  # the tiny model of most tests


def tiny_config(pos_encoding: str = "learned", **overrides) -> GPTConfig:
    kw = dict(block_size=BLOCK, vocab_size=VOCAB, n_layer=2, n_head=2, n_embd=32, pos_encoding=pos_encoding)
    if pos_encoding == "t5":  # 4 buckets to distance 8: a BLOCK-token test reaches the log-spaced ones and the last
        kw.update(t5_num_buckets=4, t5_max_distance=8)
    if pos_encoding == "layer_rope":  # of the 2 layers, the second without rope (HF's default interval 4 has none)
        kw.update(nope_every=2)
    kw.update(overrides)
    return GPTConfig(**kw)


@torch.no_grad()
def randomize_(module: nn.Module, std: float = 0.2, seed: int = 0) -> nn.Module:
    """Overwrite every parameter with N(0, std^2) (LayerNorm gains 1 + N(0, 0.1^2)).

    GPT-2's own initialisation (std 0.02, zero biases) makes logits nearly flat and positions nearly
    invisible, so a wrong mask or a wrong position would move logits by less than the tolerances. With
    std 0.2 attention is sharp and the position signal large, which makes these comparisons sensitive.
    """
    g = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():  # a tied Parameter is visited once
        noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
        is_ln_gain = p.dim() == 1 and name.endswith("weight") and ".ln_" in "." + name
        p.copy_(1.0 + 0.1 * noise if is_ln_gain else std * noise)
    return module


def tiny_model(pos_encoding: str = "learned", seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return randomize_(GPT(tiny_config(pos_encoding, **overrides)), seed=seed).eval()


def random_ids(*shape: int, vocab: int = VOCAB, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


# ---- a tiny training run, and torchrun ----------------------------------------------------------------------------

TRAIN = dict(device="cpu", compile=False, progress=False, batch_size=4, eval_iters=2, eval_interval=1000,
             log_interval=1, max_iters=10, lr_decay_iters=10, warmup_iters=2, learning_rate=1e-2, min_lr=1e-3)
MODEL = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, dropout=0.0)
MODEL_FIELDS = {f.name for f in dataclasses.fields(GPTConfig)}


def configs(out_dir, dataset, **overrides) -> tuple[TrainConfig, GPTConfig]:
    values = {**TRAIN, **MODEL, "out_dir": str(out_dir), "dataset": str(dataset), **overrides}
    return (TrainConfig(**{k: v for k, v in values.items() if k not in MODEL_FIELDS}),
            GPTConfig(**{k: v for k, v in values.items() if k in MODEL_FIELDS}))


def run(out_dir, dataset, **overrides) -> dict:
    return train(*configs(out_dir, dataset, **overrides))


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def resumed_as_one_run(tmp_path, char_data, model_settings: dict, **train_settings) -> dict:
    """Six steps straight, and three then three more resumed: the same losses and weights, and the checkpoint holds
    model_settings. The straight run's result."""
    settings = dict(max_iters=6, lr_decay_iters=6, warmup_iters=2, eval_interval=3, **train_settings, **model_settings)
    whole = run(tmp_path / "a", char_data, **settings)
    first = run(tmp_path / "b", char_data, **{**settings, "max_iters": 3})
    second = run(tmp_path / "b", char_data, **settings, init_from="resume")
    assert first["train_losses"] + second["train_losses"] == whole["train_losses"]
    assert_same_state(second["model"].state_dict(), whole["model"].state_dict())
    saved = load_checkpoint(tmp_path / "a" / "ckpt.pt")
    assert {k: saved["model_args"][k] for k in model_settings} == model_settings
    return whole


def torchrun(args: list[str], env: dict, cwd: Path, processes: int = 2, check: bool = True) -> \
        subprocess.CompletedProcess:
    """Run args[0] with args[1:] on `processes` processes (torchrun --standalone, gloo on a CPU); it must end its
    process group's threads (the ends_its_threads fixture, which each test using this asks for, puts the checking
    script in cwd). check: assert that it exited 0, showing the end of its stderr if not."""
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             f"--nproc_per_node={processes}", str(cwd / "ends_its_threads.py"), *args],
                            capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


# ---- a script's main as its __main__ runs it, and the one line a fault must end with ------------------------------

SETTINGS = dict(device="cpu", compile=False, progress=False, batch_size=4, eval_iters=2, eval_interval=4,
                log_interval=1, max_iters=4, lr_decay_iters=4, warmup_iters=1, n_layer=1, n_head=2, n_embd=16,
                block_size=16)


def flags(out_dir, dataset, **overrides) -> list[str]:
    return [f"--{k}={v}" for k, v in {**SETTINGS, "out_dir": out_dir, "dataset": dataset, **overrides}.items()]


def cli(main, argv: list[str], capsys) -> tuple[int, str, str]:
    """Run a script's main as its __main__ does; (exit status, stdout, stderr)."""
    capsys.readouterr()
    try:
        main_guard(main, [str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert "weights_only" not in lines[0]  # never torch's advice to load pickled code


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "train.lock"}


# ---- the preparers as their scripts run them ----------------------------------------------------------------------

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 30


def char_preparer(folder: Path):
    """What data/shakespeare_char/prepare.py runs, writing to folder (its own folder is the repo's)."""
    return lambda argv: prepare_main(argv, folder, "char", lambda: TEXT, "")


def corpus_main():
    spec = importlib.util.spec_from_file_location("prepare_corpus_script", REPO / "data" / "corpus" / "prepare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


# ---- nanoGPT's files, as its train.py and data/shakespeare_char/prepare.py write them -----------------------------

CHARS = "\n !&',-.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # 63 characters


def nanogpt_weights(n_layer: int, n_embd: int, vocab_size: int, block_size: int, bias: bool,
                    seed: int = 0) -> dict[str, torch.Tensor]:
    """Random float32 weights under nanoGPT's state-dict keys; lm_head.weight is the same tensor as wte."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=g) * 0.3

    w = {"transformer.wte.weight": rand(vocab_size, n_embd), "transformer.wpe.weight": rand(block_size, n_embd)}
    shapes = {"ln_1": (n_embd,), "attn.c_attn": (3 * n_embd, n_embd), "attn.c_proj": (n_embd, n_embd),
              "ln_2": (n_embd,), "mlp.c_fc": (4 * n_embd, n_embd), "mlp.c_proj": (n_embd, 4 * n_embd)}
    for i in range(n_layer):
        for name, shape in shapes.items():
            w[f"transformer.h.{i}.{name}.weight"] = 1 + rand(*shape) if name.startswith("ln") else rand(*shape)
            if bias:
                w[f"transformer.h.{i}.{name}.bias"] = rand(shape[0])
    w["transformer.ln_f.weight"] = 1 + rand(n_embd)
    if bias:
        w["transformer.ln_f.bias"] = rand(n_embd)
    w["lm_head.weight"] = w["transformer.wte.weight"]
    return w


def nanogpt_optimizer_state(weights: dict[str, torch.Tensor]) -> dict:
    """AdamW's state after one step, grouped as nanoGPT's configure_optimizers does: named_parameters order
    (the tied lm_head once, as wte), matrices decayed, vectors not."""
    params = {k: torch.nn.Parameter(v.clone()) for k, v in weights.items() if k != "lm_head.weight"}
    groups = [{"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))
    for i, p in enumerate(params.values()):
        p.grad = torch.full_like(p, float(i + 1))  # each parameter's moments tell which it was
    optimizer.step()
    return optimizer.state_dict()


def write_nanogpt_run(folder: Path, n_layer=2, n_head=2, n_embd=16, vocab_size=63, block_size=32, bias=True,
                      dataset="shakespeare_char", compiled=False) -> Path:
    """out_dir/ckpt.pt as nanoGPT's train.py writes it; returns the path."""
    weights = nanogpt_weights(n_layer, n_embd, vocab_size, block_size, bias)
    model = {("_orig_mod." if compiled else "") + k: v for k, v in weights.items()}
    model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size, bias=bias,
                      vocab_size=vocab_size, dropout=0.0)
    config = {"out_dir": str(folder), "dataset": dataset, "batch_size": 12, "learning_rate": 1e-3, "bias": bias,
              "compile": compiled, "device": "cpu", "dtype": "float32", "init_from": "scratch"}
    checkpoint = {"model": model, "optimizer": nanogpt_optimizer_state(weights), "model_args": model_args,
                  "iter_num": 250, "best_val_loss": torch.tensor(1.4861), "config": config}
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, folder / "ckpt.pt")
    return folder / "ckpt.pt"


def write_meta(folder: Path, chars: str = CHARS) -> Path:
    """meta.pkl as nanoGPT's data/shakespeare_char/prepare.py writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)
    return folder / "meta.pkl"


def write_nanogpt_data(folder: Path, text: str) -> Path:
    """A nanoGPT char data folder: uint16 train.bin (first 90%) and val.bin, and meta.pkl."""
    chars = "".join(sorted(set(text)))
    ids = np.array([chars.index(c) for c in text], dtype=np.uint16)
    n = int(len(ids) * 0.9)
    write_meta(folder, chars)
    ids[:n].tofile(folder / "train.bin")
    ids[n:].tofile(folder / "val.bin")
    return folder


# ---- a small corpus of words (the study tests') -------------------------------------------------------------------


def corpus(n_words: int = 800) -> str:
    words = ["to", "be", "or", "not", "that", "is", "the", "question", "whether", "tis", "nobler", "in", "mind",
             "suffer", "slings", "arrows"]
    rng = random.Random(0)
    lines = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(n_words // 8)]
    return "\n".join(lines) + "\n"


def numpy_gpt_logits(model, idx: np.ndarray, scores) -> np.ndarray:
    """A GPT's logits (B, T, vocab) in NumPy float64 from its state dict W, GPT-2's block written out (LayerNorm,
    causal attention, tanh GELU MLP, the head tied to wte), for the references that test an encoding against its
    source: scores(W, layer, normed, q, k) gives the attention scores (B, H, T, T) before the softmax, scaled, biased
    and masked as the encoding has them, from the layer's normed input (B, T, C) and its q, k (B, H, T, D)."""
    c = model.config
    W = {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    B, T = idx.shape
    H, D = c.n_head, c.n_embd // c.n_head

    def layer_norm(x, prefix):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-5) * W[prefix + ".weight"] + W[prefix + ".bias"]

    def linear(x, prefix):
        return x @ W[prefix + ".weight"].T + W[prefix + ".bias"]

    x = W["input_layer.wte"][idx]
    for layer in range(c.n_layer):
        p = f"blocks.{layer}."
        normed = layer_norm(x, p + "ln_1")
        q, k, v = np.split(linear(normed, p + "attn.c_attn"), 3, axis=-1)
        q, k, v = (t.reshape(B, T, H, D).transpose(0, 2, 1, 3) for t in (q, k, v))
        s = scores(W, layer, normed, q, k)
        weights = np.exp(s - s.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        x = x + linear((weights @ v).transpose(0, 2, 1, 3).reshape(B, T, H * D), p + "attn.c_proj")
        h = linear(layer_norm(x, p + "ln_2"), p + "mlp.c_fc")
        x = x + linear(0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3))), p + "mlp.c_proj")
    return layer_norm(x, "ln_f") @ W["input_layer.wte"].T
