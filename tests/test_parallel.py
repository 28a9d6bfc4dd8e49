"""parallel.py and train.py --parallel=fsdp on 2 CPU processes (torchrun, gloo), against one process computing the
same batches: its gradients, weights, AdamW moments, losses and logits; and an FSDP run against itself resumed."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import needs_fsdp, torchrun

from model import GPT, GPTConfig
from train import TrainConfig, train
from training.checkpoint import load_checkpoint, model_from_checkpoint

REPO = Path(__file__).resolve().parents[1]
SETTINGS = dict(device="cpu", compile=False, progress=False, batch_size=4, eval_iters=2, log_interval=1,
                n_layer=2, n_head=2, n_embd=16, block_size=16, dropout=0.0, gradient_accumulation_steps=4,
                learning_rate=2e-3, min_lr=2e-4, warmup_iters=1, max_iters=4, lr_decay_iters=4, eval_interval=2,
                grad_clip=0.0)  # no clipping: AdamW's moments then show the gradients' scale
WORKER_CONFIG = dict(n_layer=2, n_head=2, n_embd=16, vocab_size=40, block_size=8)

# Run by torchrun: one FSDP accumulation step (2 micro-batches per rank) in three variants, then what the test
# compares: gathered gradients, each rank's shards, the logits of the sharded model and its full state dict.
WORKER = """
import sys, torch, torch.distributed as dist
from model import GPT, GPTConfig
from training.parallel import end_processes, full_model_state, gradient_sync, shard_model
dist.init_process_group("gloo")
rank, result = dist.get_rank(), {}
batches = torch.randint(0, 40, (4, 3, 9), generator=torch.Generator().manual_seed(1))
for dropout, checkpointing in ((0.0, False), (0.2, False), (0.2, True)):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**CONFIG, dropout=dropout))
    model.activation_checkpointing = checkpointing
    shard_model(model, torch.device("cpu"), torch.float32)
    torch.manual_seed(10 + rank)  # dropout masks differ between ranks, not between variants
    for micro in range(2):
        x = batches[2 * rank + micro]
        with gradient_sync(model, micro == 1):
            (model(x[:, :-1], x[:, 1:])[1] / 2).backward()
    result[dropout, checkpointing] = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
shards = [None, None]
dist.all_gather_object(shards, {n: p.to_local().detach() for n, p in model.named_parameters()})
model.eval()
logits = model(batches[0, :, :-1])[0].detach()
state = full_model_state(model)
if rank == 0:
    torch.save({"grads": result, "shards": shards, "logits": logits, "model": state}, sys.argv[1])
del model
end_processes()
"""


def train_argv(out_dir: Path, dataset: Path, **overrides) -> list[str]:
    return [f"--{k}={v}" for k, v in {**SETTINGS, "out_dir": out_dir, "dataset": dataset, **overrides}.items()]


def train_here(out_dir: Path, dataset: Path, **overrides) -> dict:
    from options import parse_options

    return train(*parse_options(train_argv(out_dir, dataset, **overrides), (TrainConfig, GPTConfig), prog="train.py",
                                description="", skip=("vocab_size",)))


def losses(out_dir: Path) -> list[float]:
    lines = (out_dir / "metrics.jsonl").read_text().splitlines()
    return [r["train_loss"] for r in map(json.loads, lines) if "train_loss" in r]


@needs_fsdp
@pytest.mark.slow
def test_fsdp_gradients_shards_activation_checkpointing_and_a_full_state_dict(tmp_path, script_env, ends_its_threads):
    (tmp_path / "worker.py").write_text(f"CONFIG = {WORKER_CONFIG!r}\n" + WORKER)
    torchrun([str(tmp_path / "worker.py"), str(tmp_path / "result.pt")], script_env, tmp_path)
    result = torch.load(tmp_path / "result.pt", weights_only=True)

    # One process, the same 4 micro-batches: the gradient of their mean loss.
    torch.manual_seed(0)
    single = GPT(GPTConfig(**WORKER_CONFIG))
    initial = {name: p.detach().clone() for name, p in single.named_parameters()}
    batches = torch.randint(0, 40, (4, 3, 9), generator=torch.Generator().manual_seed(1))
    for x in batches:
        (single(x[:, :-1], x[:, 1:])[1] / 4).backward()
    fsdp = result["grads"][0.0, False]
    assert list(fsdp) == [name for name, _ in single.named_parameters()]
    for name, p in single.named_parameters():
        assert p.grad.norm() > 0
        torch.testing.assert_close(fsdp[name], p.grad, rtol=1e-5, atol=1e-8, msg=name)

    # Activation checkpointing under FSDP: the same gradients, dropout included.
    plain, recomputed = result["grads"][0.2, False], result["grads"][0.2, True]
    for name in plain:
        torch.testing.assert_close(recomputed[name], plain[name], rtol=1e-6, atol=1e-9, msg=name)
    assert any(not torch.allclose(plain[name], fsdp[name]) for name in plain)  # dropout did change them

    # Each rank holds one half (rows) of every parameter, and the halves are the parameter.
    for name, p in initial.items():
        first, second = result["shards"][0][name], result["shards"][1][name]
        assert first.shape[0] == second.shape[0] == p.shape[0] // 2, name
        assert first.shape[1:] == p.shape[1:]
    torch.manual_seed(0)
    untrained = GPT(GPTConfig(**WORKER_CONFIG, dropout=0.2))
    for name, p in untrained.named_parameters():
        assert torch.equal(torch.cat([result["shards"][0][name], result["shards"][1][name]]), p.detach()), name

    # The full state dict loads into one process, tied head included, and gives the sharded model's logits.
    untrained.load_state_dict(result["model"])
    assert untrained.lm_head.weight is untrained.input_layer.wte
    assert torch.equal(untrained.eval()(batches[0, :, :-1])[0], result["logits"])


@needs_fsdp
@pytest.mark.slow
def test_fsdp_training_equals_one_process_and_resumes_exactly(tmp_path, char_data, script_env, ends_its_threads):
    torchrun([str(REPO / "train.py"), *train_argv(tmp_path / "fsdp", char_data, parallel="fsdp")], script_env,
             tmp_path)
    train_here(tmp_path / "one", char_data)
    fsdp, one = load_checkpoint(tmp_path / "fsdp" / "ckpt.pt"), load_checkpoint(tmp_path / "one" / "ckpt.pt")
    assert fsdp["iter_num"] == one["iter_num"] == 4 and fsdp["model"].keys() == one["model"].keys()
    for key, value in one["model"].items():
        torch.testing.assert_close(fsdp["model"][key], value, atol=1e-6, rtol=0, msg=key)
    assert fsdp["optimizer"]["param_groups"] == one["optimizer"]["param_groups"]
    for number, state in one["optimizer"]["state"].items():
        torch.testing.assert_close(fsdp["optimizer"]["state"][number]["exp_avg"], state["exp_avg"], atol=1e-8,
                                   rtol=1e-4)
        torch.testing.assert_close(fsdp["optimizer"]["state"][number]["exp_avg_sq"], state["exp_avg_sq"],
                                   atol=1e-11, rtol=1e-4)
    np.testing.assert_allclose(losses(tmp_path / "fsdp"), losses(tmp_path / "one"), rtol=1e-5)
    assert len(losses(tmp_path / "one")) == 4

    # Stopped at 2 and resumed under FSDP: the uninterrupted FSDP run, bit for bit.
    torchrun([str(REPO / "train.py"), *train_argv(tmp_path / "halves", char_data, parallel="fsdp", max_iters=2)],
             script_env, tmp_path)
    torchrun([str(REPO / "train.py"), *train_argv(tmp_path / "halves", char_data, parallel="fsdp",
                                                  init_from="resume")], script_env, tmp_path)
    halves = load_checkpoint(tmp_path / "halves" / "ckpt.pt")
    assert losses(tmp_path / "halves") == losses(tmp_path / "fsdp")
    for key, value in fsdp["model"].items():
        assert torch.equal(halves["model"][key], value), key
    for number, state in fsdp["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(halves["optimizer"]["state"][number][name], value), (number, name)

    # What FSDP saved, one process and the sampler load.
    import sample

    model, _ = sample.load_model("resume", str(tmp_path / "fsdp"))
    assert torch.equal(model.input_layer.wte, model_from_checkpoint(fsdp).input_layer.wte)


@needs_fsdp
@pytest.mark.slow
def test_a_single_process_checkpoint_resumes_under_fsdp(tmp_path, char_data, script_env, ends_its_threads):
    train_here(tmp_path / "one", char_data)
    train_here(tmp_path / "resumed", char_data, max_iters=2)
    torchrun([str(REPO / "train.py"), *train_argv(tmp_path / "resumed", char_data, parallel="fsdp",
                                                  init_from="resume")], script_env, tmp_path)
    one, resumed = load_checkpoint(tmp_path / "one" / "ckpt.pt"), load_checkpoint(tmp_path / "resumed" / "ckpt.pt")
    assert resumed["iter_num"] == 4
    for key, value in one["model"].items():
        torch.testing.assert_close(resumed["model"][key], value, atol=1e-6, rtol=0, msg=key)
    np.testing.assert_allclose(losses(tmp_path / "resumed"), losses(tmp_path / "one"), rtol=1e-5)


def test_an_unknown_parallel_is_refused():
    with pytest.raises(ValueError, match="parallel='zero' must be one of ddp, fsdp"):
        TrainConfig(parallel="zero")


# ---- a torch without FSDP2 (2.3 to 2.5: fully_shard is not public there) ---------------------------------------

# torch.distributed.fsdp made unimportable, as fully_shard is on those releases; then the quick start's modules
# import, one process trains (DDP's imports included), and --parallel=fsdp is refused in one line.
WITHOUT_FSDP = """
import runpy, sys
sys.modules["torch.distributed.fsdp"] = None  # `from torch.distributed.fsdp import ...` raises ImportError
import ablate, bench, sample  # noqa: F401
import torch
from training import parallel
from errors import UserError
assert parallel.FSDPModule is None and not parallel.is_sharded(torch.nn.Linear(1, 1))
try:
    parallel.check_sharding("fsdp", 2, torch.float32)
except UserError as e:
    print("refused:", e)
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""


def test_without_fsdp2_a_single_process_trains_and_fsdp_is_refused(tmp_path, char_data, script_env):
    result = subprocess.run([sys.executable, "-c", WITHOUT_FSDP, *train_argv(tmp_path / "out", char_data,
                                                                            max_iters=2)],
                            capture_output=True, text=True, env=script_env, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "refused: parallel='fsdp' needs torch 2.6 or newer" in result.stdout
    assert "--parallel=ddp" in result.stdout
    assert "done: 2 iterations" in result.stdout
    assert load_checkpoint(tmp_path / "out" / "ckpt.pt")["iter_num"] == 2


@needs_fsdp
def test_check_sharding_refuses_float16_and_passes_what_fsdp_runs():
    from errors import UserError
    from training.parallel import check_sharding

    with pytest.raises(UserError, match="not float16"):
        check_sharding("fsdp", 2, torch.float16)
    for parallel, world_size, dtype in (("fsdp", 2, torch.bfloat16), ("fsdp", 1, torch.float16),
                                        ("ddp", 2, torch.float16)):
        check_sharding(parallel, world_size, dtype)  # FSDP on 1 process is no FSDP: nothing to refuse
