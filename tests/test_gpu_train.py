"""The training paths that only a CUDA GPU runs: bf16 and fp16 autocast (with the grad scaler), the compiled
step, Muon under bf16 autocast and its resume, the GPU Muon config as written, FSDP2's bf16 mixed precision,
memory.py's estimate against the allocator's peak, and pinned-memory batches. Marked gpu: skipped without CUDA,
run with `python -m pytest -m gpu`.

Each checks against an independent run on the same GPU: fp32 for the low precisions, eager for the compiled
step, an unsharded fp32 model for FSDP, torch.cuda.max_memory_allocated for the estimate, the CPU batch for the
pinned copy.
"""

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from model import GPT, GPTConfig
from options import read_config_file
from text.dataset import get_batch, load_split, sample_offsets
from train import TrainConfig, train
from training.memory import per_gpu_bytes

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[1]
TRAIN = dict(device="cuda", compile=False, progress=False, batch_size=8, eval_iters=2, eval_interval=1000,
             log_interval=1, max_iters=60, lr_decay_iters=60, warmup_iters=5, learning_rate=1e-2, min_lr=1e-3)
MODEL = dict(n_layer=2, n_head=4, n_embd=64, block_size=64, dropout=0.0)


def train_losses(out_dir: Path, dataset: Path, **overrides) -> list[float]:
    values = {**TRAIN, **MODEL, "out_dir": str(out_dir), "dataset": str(dataset), **overrides}
    model_fields = {field.name for field in dataclasses.fields(GPTConfig)}
    result = train(TrainConfig(**{k: v for k, v in values.items() if k not in model_fields}),
                   GPTConfig(**{k: v for k, v in values.items() if k in model_fields}))
    return [record["loss"] for record in result["train_losses"]]


@pytest.fixture(scope="module")
def fp32_losses(tmp_path_factory, char_data) -> list[float]:
    """The reference: the same run in float32 (TF32 matmuls, as train.py sets them on CUDA)."""
    return train_losses(tmp_path_factory.mktemp("fp32"), char_data, dtype="float32")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_autocast_training_learns_and_follows_fp32(tmp_path, char_data, fp32_losses, dtype):
    """bf16 autocast, and fp16 with the grad scaler: the loss falls as in fp32, each step within 0.1 nats of it
    and the last ten within 0.05 on average (rounding of ~2^-8 relative per matmul moves the trajectory, not the
    learning; a step the scaler skipped for an overflow would shift it by one, which these bounds still allow)."""
    losses = train_losses(tmp_path, char_data, dtype=dtype)
    assert len(losses) == len(fp32_losses) == 60
    assert np.mean(losses[-5:]) < losses[0] - 0.5
    np.testing.assert_allclose(losses, fp32_losses, atol=0.1)
    assert abs(np.mean(losses[-10:]) - np.mean(fp32_losses[-10:])) < 0.05


def test_compiled_training_step_equals_eager(tmp_path, char_data):
    """torch.compile(model) trains the same steps: bf16 as train.py runs on a GPU, dropout 0 (compiled dropout
    draws other random numbers), 10 steps within 0.02 nats of eager."""
    settings = dict(dtype="bfloat16", max_iters=10, lr_decay_iters=10, warmup_iters=2)
    eager = train_losses(tmp_path / "eager", char_data, **settings)
    compiled = train_losses(tmp_path / "compiled", char_data, compile=True, **settings)
    assert len(compiled) == 10 and compiled[-1] < compiled[0]
    np.testing.assert_allclose(compiled, eager, atol=0.02)


MUON = dict(optimizer="muon", muon_learning_rate=0.02, learning_rate=3e-3, min_lr=3e-4)


@pytest.fixture(scope="module")
def muon_fp32_losses(tmp_path_factory, char_data) -> list[float]:
    return train_losses(tmp_path_factory.mktemp("muon_fp32"), char_data, dtype="float32", lr_schedule="wsd", **MUON)


def test_muon_under_bf16_autocast_learns_and_follows_fp32(tmp_path, char_data, muon_fp32_losses):
    """The CPU speedrun's optimizer and schedule on a GPU, as train.py runs them there (bf16 autocast): the loss
    falls as in fp32, within the bounds the AdamW runs above keep."""
    losses = train_losses(tmp_path, char_data, dtype="bfloat16", lr_schedule="wsd", **MUON)
    assert len(losses) == len(muon_fp32_losses) == 60
    assert np.mean(losses[-5:]) < losses[0] - 0.5
    np.testing.assert_allclose(losses, muon_fp32_losses, atol=0.1)
    assert abs(np.mean(losses[-10:]) - np.mean(muon_fp32_losses[-10:])) < 0.05


@pytest.fixture
def deterministic_attention():
    """Attention by SDPA's math path, whose backward is deterministic: float32 attention on CUDA otherwise takes the
    memory-efficient kernel, whose backward may sum its key splits in another order each run (it does so
    deterministically only under torch.use_deterministic_algorithms), which would move two runs apart however
    exactly a resume restored the state."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        yield


def test_a_muon_run_resumed_on_the_gpu_continues_it(tmp_path, char_data, deterministic_attention):
    """Muon's momentum and AdamW's moments come back from ckpt.pt on CUDA: 30 steps, then a resume to 60, give the
    uninterrupted run's losses (a cosine over 60 steps in both, which the first 30 follow; to 1e-5: cuBLAS may
    choose other kernels in a new run, bit for bit is the CPU's test, test_optimizer.py)."""
    whole = train_losses(tmp_path / "whole", char_data, dtype="float32", **MUON)
    first = train_losses(tmp_path / "cut", char_data, dtype="float32", **{**MUON, "max_iters": 30})
    second = train_losses(tmp_path / "cut", char_data, dtype="float32", init_from="resume", **MUON)
    assert len(first) == len(second) == 30
    np.testing.assert_allclose(first + second, whole, rtol=0, atol=1e-5)


OPTIONS = dict(muon_orthogonalize="polar_express", normuon=True, cautious_weight_decay=True, muon_momentum_warmup=20,
               ema_decay=0.9, ema_start=20)  # the speedruns' optimizer options all on (test_optimizer_options.py)


def test_the_optimizer_options_learn_and_resume_on_the_gpu(tmp_path, char_data, deterministic_attention):
    """Our Muon step (Polar Express, NorMuon, cautious decay; its iteration in bfloat16) and the EMA on CUDA: the loss
    falls as the plain Muon run's does, and 30 steps then a resume to 60 give the uninterrupted run's losses (to 1e-5,
    as above; bit for bit is the CPU's test) and its average."""
    plain = train_losses(tmp_path / "plain", char_data, dtype="float32", **MUON)
    whole = train_losses(tmp_path / "whole", char_data, dtype="float32", **MUON, **OPTIONS)
    first = train_losses(tmp_path / "cut", char_data, dtype="float32", **{**MUON, **OPTIONS, "max_iters": 30})
    second = train_losses(tmp_path / "cut", char_data, dtype="float32", init_from="resume", **MUON, **OPTIONS)
    assert np.mean(whole[-10:]) < whole[0] - 1.0 and abs(np.mean(whole[-10:]) - np.mean(plain[-10:])) < 0.3
    np.testing.assert_allclose(first + second, whole, rtol=0, atol=1e-5)
    a, b = (torch.load(tmp_path / name / "ckpt.pt", weights_only=True) for name in ("whole", "cut"))
    for key, value in a["ema"].items():
        torch.testing.assert_close(b["ema"][key], value, rtol=0, atol=1e-5)


def test_the_gpu_muon_config_trains_as_written(tmp_path, char_data):
    """config/train_shakespeare_char_muon.py as a user runs it on a GPU (6 x 384, block 256, batch 64, dropout 0.2,
    bf16 autocast, compiled), cut to 200 steps of its schedule: every loss finite, the last ten at least 1.5 nats
    under the first (a model that learns nothing stays at ln(vocab))."""
    settings = read_config_file(str(REPO / "config" / "train_shakespeare_char_muon.py"))
    assert settings["optimizer"] == "muon" and settings["lr_schedule"] == "wsd"
    run = {**settings, "max_iters": 200, "eval_interval": 1000, "eval_iters": 2, "log_interval": 1,
           "progress": False, "dtype": "bfloat16", "compile": True, "device": "cuda"}
    losses = train_losses(tmp_path, char_data, **{k: v for k, v in run.items() if k not in ("out_dir", "dataset")})
    assert len(losses) == 200 and np.isfinite(losses).all()
    assert np.mean(losses[-10:]) < losses[0] - 1.5


# Run by torchrun on 1 process with nccl: parallel.shard_model's bf16 policy against the same model unsharded in
# fp32 on one batch, then one AdamW step of each.
FSDP_WORKER = """
import sys, torch, torch.distributed as dist
from model import GPT, GPTConfig
from training.parallel import end_processes, full_model_state, shard_model
dist.init_process_group("nccl")
device = torch.device("cuda", 0)
torch.cuda.set_device(device)
config = GPTConfig(n_layer=2, n_head=4, n_embd=64, vocab_size=96, block_size=32, dropout=0.0)
torch.manual_seed(0)
reference = GPT(config).to(device)
torch.manual_seed(0)
model = GPT(config)
shard_model(model, device, torch.bfloat16)
seen = []
model.get_submodule("blocks.0.mlp.c_fc").register_forward_pre_hook(lambda m, args: seen.append(str(m.weight.dtype)))
x = torch.randint(0, 96, (4, 33), generator=torch.Generator().manual_seed(1)).to(device)
loss, reference_loss = model(x[:, :-1], x[:, 1:])[1], reference(x[:, :-1], x[:, 1:])[1]
loss.backward()
reference_loss.backward()
named = dict(reference.named_parameters())
errors = {n: ((p.grad.full_tensor() - named[n].grad).norm() / named[n].grad.norm()).item()
          for n, p in model.named_parameters()}
result = {"loss": loss.item(), "reference_loss": reference_loss.item(), "seen": seen, "grad_errors": errors,
          "param_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
          "grad_dtypes": sorted({str(p.grad.dtype) for p in model.parameters()})}
for m in (model, reference):
    torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.0).step()
full, plain = full_model_state(model), reference.state_dict()
result["step_difference"] = max((full[k].float() - plain[k].float().cpu()).abs().max().item() for k in plain)
torch.save(result, sys.argv[1])
del model
end_processes()
"""


def test_fsdp_bf16_mixed_precision_on_one_gpu(tmp_path, script_env):
    """shard_model's policy: the forward computes with bf16 weights, the master weights and their gradients stay
    fp32 (reduce_dtype), the loss and gradients stay within bf16's reach of the fp32 model's, and one AdamW step
    moves the fp32 master as it moves the fp32 model (Adam's first step is lr x sign(gradient): at most 2 lr
    apart where a tiny gradient's sign differs)."""
    (tmp_path / "worker.py").write_text(FSDP_WORKER)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
                    str(tmp_path / "worker.py"), str(tmp_path / "result.pt")], check=True, env=script_env,
                   cwd=REPO, timeout=300)
    result = torch.load(tmp_path / "result.pt", weights_only=True)
    assert result["seen"] == ["torch.bfloat16"]
    assert result["param_dtypes"] == result["grad_dtypes"] == ["torch.float32"]
    assert result["loss"] == pytest.approx(result["reference_loss"], rel=1e-2)
    assert max(result["grad_errors"].values()) < 0.05, result["grad_errors"]
    assert result["step_difference"] <= 2e-3 + 1e-6


@pytest.mark.parametrize("vocab_size, checkpointing", [(50304, False), (512, False), (512, True)])
def test_memory_estimate_against_the_allocators_peak(vocab_size, checkpointing):
    """GPT-2 124M's shape, 8 x 1024 tokens, bf16 autocast, fused AdamW: a training step's peak
    (torch.cuda.max_memory_allocated, after the first step made AdamW's state) within 15% of
    memory.per_gpu_bytes on one GPU. The estimate counts every gradient beside every activation, which never
    coexist in full, and leaves out the backward's transient gradients and the cuBLAS workspace: 15% covers
    both ways. The printed ratio says how close it is."""
    config = GPTConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=vocab_size, dropout=0.0)
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = GPT(config).to(device)
    model.activation_checkpointing = checkpointing
    optimizer = model.configure_optimizers(0.1, 1e-4, (0.9, 0.95), "cuda")
    x = torch.randint(0, vocab_size, (8, 1025), device=device)
    peaks = []
    for _ in range(2):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x[:, :-1], x[:, 1:])[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del loss
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated(device))
    estimate = sum(per_gpu_bytes(config, "ddp", 1, 8 * 1024, checkpointing).values())
    print(f"vocab_size={vocab_size}, checkpointing={checkpointing}: peak {peaks[-1] / 1e9:.2f} GB, estimate "
          f"{estimate / 1e9:.2f} GB, ratio {peaks[-1] / estimate:.3f}")
    assert peaks[-1] == pytest.approx(estimate, rel=0.15)


def test_pinned_batches_arrive_whole(char_data, monkeypatch):
    """get_batch on CUDA copies through pinned memory without blocking: 50 batches in a row, each pinned buffer
    dropped while its copy may still run, equal the CPU's batches once the GPU has caught up."""
    pinned = []
    real_pin = torch.Tensor.pin_memory
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a: pinned.append(1) or real_pin(self, *a))
    data = load_split(char_data, "train", 64)
    generator = torch.Generator().manual_seed(0)
    offsets = [sample_offsets(len(data), 64, 32, generator) for _ in range(50)]
    on_gpu = [get_batch(data, o, 64, torch.device("cuda")) for o in offsets]
    torch.cuda.synchronize()
    assert len(pinned) == 2 * 50
    for o, (x, y) in zip(offsets, on_gpu, strict=True):
        cpu_x, cpu_y = get_batch(data, o, 64, torch.device("cpu"))
        assert x.is_cuda and torch.equal(x.cpu(), cpu_x) and torch.equal(y.cpu(), cpu_y)
