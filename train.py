"""Train a GPT. One process:
    python train.py config/train_shakespeare_char.py --device=cpu --compile=False --max_iters=2000
Several (DDP; each process reads different batches):
    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py
"""

import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
from dataset import get_batch, load_split, resolve_data_dir, sample_offsets
from model import GPT, GPTConfig
from options import main_guard, parse_options
from tokenizer import read_description


@dataclass
class TrainConfig:
    out_dir: str = "out"  # checkpoints (ckpt.pt: latest, for resume; best.pt: lowest val loss) and metrics.jsonl
    dataset: str = "python_docs_char"  # a prepared folder under data/ (run its prepare.py), or a path to one
    init_from: str = "scratch"  # scratch | resume (out_dir/ckpt.pt) | gpt2, gpt2-medium, ... | a local HF GPT-2 dir
    eval_interval: int = 250  # iterations between train/val loss estimates and checkpoints
    eval_iters: int = 200  # batches per loss estimate (the same batches every time)
    eval_only: bool = False  # estimate the losses once, then exit
    log_interval: int = 10  # iterations between progress-bar, metrics.jsonl and wandb updates
    wandb_log: bool = False  # also log metrics to Weights & Biases
    wandb_project: str = "nanogpt"  # wandb project name
    wandb_run_name: str = "run"  # wandb run name
    wandb_mode: str = "online"  # wandb mode: online | offline | disabled (offline and disabled need no login)
    gradient_accumulation_steps: int = 1  # micro-batches per optimizer step, over all processes together
    batch_size: int = 12  # sequences per micro-batch (per process)
    learning_rate: float = 6e-4  # peak learning rate
    max_iters: int = 5000  # optimizer steps in all
    max_seconds: float = 0.0  # also stop after this much training time (evaluation excluded); 0: no limit
    weight_decay: float = 0.1  # AdamW weight decay, on matrices only
    beta1: float = 0.9  # AdamW beta1
    beta2: float = 0.95  # AdamW beta2
    grad_clip: float = 1.0  # clip the gradient norm to this; 0: no clipping
    decay_lr: bool = True  # linear warmup then cosine decay; False: constant learning_rate
    warmup_iters: int = 100  # steps of linear warmup
    lr_decay_iters: int = 5000  # step where the cosine reaches min_lr (usually max_iters)
    min_lr: float = 6e-5  # final learning rate (usually learning_rate / 10)
    backend: str = "auto"  # DDP backend: auto (nccl on cuda, gloo otherwise) | nccl | gloo
    device: str = "auto"  # auto (cuda, then mps, then cpu) | cpu | cuda | cuda:1 | mps
    dtype: str = "auto"  # auto (bfloat16 on a GPU that has it, else float16; float32 elsewhere) | float32 | ...
    compile: bool = True  # torch.compile the model: a slow first step, faster ones after
    seed: int = 1337  # seeds the initialisation, dropout and the order of batches
    progress: bool = True  # show a tqdm progress bar

    def __post_init__(self) -> None:
        for name in ("eval_interval", "eval_iters", "log_interval", "gradient_accumulation_steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if self.max_iters < 0 or self.warmup_iters < 0:
            raise ValueError(f"max_iters={self.max_iters} and warmup_iters={self.warmup_iters} must be >= 0")
        if self.decay_lr and self.lr_decay_iters <= self.warmup_iters:
            raise ValueError(f"lr_decay_iters={self.lr_decay_iters} must exceed warmup_iters={self.warmup_iters}")
        if self.learning_rate <= 0 or self.min_lr < 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be > 0 and min_lr={self.min_lr} >= 0")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype={self.dtype!r} must be auto, float32, bfloat16 or float16")
        if self.wandb_mode not in ("online", "offline", "disabled"):
            raise ValueError(f"wandb_mode={self.wandb_mode!r} must be online, offline or disabled")
        if self.backend not in ("auto", "nccl", "gloo"):
            raise ValueError(f"backend={self.backend!r} must be auto, nccl or gloo")


def get_lr(it: int, config: TrainConfig) -> float:
    """Linear warmup to learning_rate, cosine decay to min_lr at lr_decay_iters, then min_lr."""
    if not config.decay_lr:
        return config.learning_rate
    if it < config.warmup_iters:
        return config.learning_rate * (it + 1) / (config.warmup_iters + 1)
    if it > config.lr_decay_iters:
        return config.min_lr
    progress = (it - config.warmup_iters) / (config.lr_decay_iters - config.warmup_iters)
    return config.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (config.learning_rate - config.min_lr)


def choose_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def choose_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return getattr(torch, name)


def autocast_context(device: torch.device, dtype: torch.dtype):
    """Mixed precision where asked; fp32 runs with no autocast at all."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def init_distributed(config: TrainConfig) -> tuple[int, int, torch.device]:
    """(rank, world_size, device). Under torchrun each process takes its own GPU; otherwise rank 0 of 1."""
    device = choose_device(config.device)
    if "RANK" not in os.environ:
        return 0, 1, device
    backend = config.backend if config.backend != "auto" else ("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}")
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend)
    return dist.get_rank(), dist.get_world_size(), device


def model_vocab_size(data_description: dict) -> int:
    """The data's vocabulary; GPT-2's 50257 rounded up to 50304, a multiple of 64, for faster matmuls."""
    if data_description["kind"] == "gpt2":
        return 50304
    return data_description["vocab_size"]


def build_model(config: TrainConfig, model_config: GPTConfig, data_description: dict) -> tuple[GPT, dict | None]:
    """The model to train, and the checkpoint it resumes from (None unless init_from=resume)."""
    if config.init_from == "resume":
        state = load_checkpoint(Path(config.out_dir) / "ckpt.pt")
        if state["tokenizer"]["vocab_size"] != data_description["vocab_size"] or state["tokenizer"].get(
                "kind") != data_description["kind"]:
            raise ValueError(f"the checkpoint in {config.out_dir} was trained on a {state['tokenizer']['kind']} "
                             f"vocabulary of {state['tokenizer']['vocab_size']}, but dataset={config.dataset!r} "
                             f"has a {data_description['kind']} vocabulary of {data_description['vocab_size']}")
        return model_from_checkpoint(state), state
    if config.init_from == "scratch":
        return GPT(replace(model_config, vocab_size=model_vocab_size(data_description))), None
    if model_config.pos_encoding != "learned":
        raise ValueError(f"init_from={config.init_from!r} starts from GPT-2's learned position table, but "
                         f"pos_encoding={model_config.pos_encoding!r}; set pos_encoding=learned or init_from=scratch")
    if data_description["kind"] != "gpt2":
        raise ValueError(f"init_from={config.init_from!r} needs GPT-2 BPE data, but dataset={config.dataset!r} is "
                         f"tokenized as {data_description['kind']!r}")
    model = GPT.from_pretrained(config.init_from, dropout=model_config.dropout)
    if model_config.block_size < model.config.block_size:
        model.crop_block_size(model_config.block_size)
    return model, None


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, splits: dict, config: TrainConfig, block_size: int, device: torch.device,
                  dtype: torch.dtype) -> dict[str, float]:
    """Mean loss over eval_iters batches of each split; the same batches every call, so estimates compare."""
    model.eval()
    losses = {}
    for split, data in splits.items():
        generator = torch.Generator().manual_seed(config.seed)
        total = 0.0
        for _ in range(config.eval_iters):
            offsets = sample_offsets(len(data), block_size, config.batch_size, generator)
            x, y = get_batch(data, offsets, block_size, device)
            with autocast_context(device, dtype):
                total += model(x, y)[1].item()
        losses[split] = total / config.eval_iters
    model.train()
    return losses


class StopRequest:
    """Turns the first Ctrl-C into a request to save and stop at the end of the step; a second one aborts."""

    def __init__(self):
        self.requested = False
        self.previous = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self.handle)
        return self

    def handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def all_finite(model: torch.nn.Module) -> bool:
    return all(torch.isfinite(p).all() for p in model.parameters())


def train(config: TrainConfig, model_config: GPTConfig) -> dict:
    """Train as configured; returns the losses, timings and the trained model (rank 0 has the full picture)."""
    rank, world_size, device = init_distributed(config)
    master = rank == 0
    try:
        return _train(config, model_config, rank, world_size, device, master)
    finally:
        if world_size > 1:
            dist.destroy_process_group()


def _train(config: TrainConfig, model_config: GPTConfig, rank: int, world_size: int, device: torch.device,
           master: bool) -> dict:
    if config.gradient_accumulation_steps % world_size:
        raise ValueError(f"gradient_accumulation_steps={config.gradient_accumulation_steps} must be a multiple of "
                         f"the number of processes ({world_size})")
    local_steps = config.gradient_accumulation_steps // world_size
    dtype = choose_dtype(config.dtype, device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    out_dir = Path(config.out_dir)
    data_dir = resolve_data_dir(config.dataset)
    data_description = read_description(data_dir)

    torch.manual_seed(config.seed)
    model, resumed = build_model(config, model_config, data_description)
    model_config = model.config
    block_size = model_config.block_size
    splits = {split: load_split(data_dir, split, block_size) for split in ("train", "val")}
    if model_config.vocab_size < data_description["vocab_size"]:
        raise ValueError(f"vocab_size={model_config.vocab_size} is smaller than the data's vocabulary "
                         f"({data_description['vocab_size']})")
    model.to(device)
    optimizer = model.configure_optimizers(config.weight_decay, config.learning_rate, (config.beta1, config.beta2),
                                           device.type)
    batch_generator = torch.Generator().manual_seed(config.seed)
    iter_num, best_val_loss = 0, float("inf")
    if resumed is not None:
        optimizer.load_state_dict(resumed["optimizer"])
        iter_num, best_val_loss = resumed["iter_num"], resumed["best_val_loss"]
        torch.set_rng_state(resumed["rng"]["torch"])
        batch_generator.set_state(resumed["rng"]["batches"])
        if device.type == "cuda" and "cuda" in resumed["rng"]:
            torch.cuda.set_rng_state(resumed["rng"]["cuda"].cpu(), device)
        resumed = None  # free the checkpoint's copy of the weights

    raw_model = model
    if config.compile:
        model = torch.compile(model)
    train_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None) \
        if world_size > 1 else model
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)

    tokens_per_iter = config.gradient_accumulation_steps * config.batch_size * block_size
    if master:
        out_dir.mkdir(parents=True, exist_ok=True)
        print(f"{raw_model.get_num_params():,} parameters, pos_encoding={model_config.pos_encoding}, device={device}, "
              f"dtype={str(dtype).removeprefix('torch.')}, {world_size} process(es), {tokens_per_iter:,} tokens/iter")
    metrics_file = out_dir / "metrics.jsonl"
    if master and config.init_from != "resume":
        metrics_file.unlink(missing_ok=True)  # a new run in an old out_dir starts a new log
    run = None
    if config.wandb_log and master:
        import wandb

        run = wandb.init(project=config.wandb_project, name=config.wandb_run_name, mode=config.wandb_mode,
                         dir=str(out_dir), config={**asdict(config), **asdict(model_config)})

    def log(record: dict) -> None:
        with metrics_file.open("a") as file:
            file.write(json.dumps(record) + "\n")
        if run is not None:
            run.log({k: v for k, v in record.items() if k != "iter"}, step=record["iter"])

    def checkpoint_state() -> dict:
        rng = {"torch": torch.get_rng_state(), "batches": batch_generator.get_state()}
        if device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(device)
        return {"model_args": asdict(model_config), "model": raw_model.state_dict(),
                "optimizer": optimizer.state_dict(), "config": asdict(config), "iter_num": iter_num,
                "best_val_loss": best_val_loss, "tokenizer": data_description, "rng": rng}

    def save_latest() -> None:
        if not all_finite(raw_model):
            raise FloatingPointError(f"the weights hold NaN or inf at iteration {iter_num}; not overwriting "
                                     f"{out_dir / 'ckpt.pt'}, which is the last good checkpoint")
        save_checkpoint(checkpoint_state(), out_dir / "ckpt.pt")

    evals, train_losses, step_seconds, train_seconds = [], [], [], 0.0
    loss_sum = torch.zeros((), device=device)
    steps_in_window, window_seconds = 0, 0.0
    bar = tqdm(total=config.max_iters, initial=iter_num, disable=not (master and config.progress),
               dynamic_ncols=True, unit="it")
    with StopRequest() as stop:
        while True:
            # Every process must leave the loop at the same step, or DDP waits forever.
            interrupted, out_of_time = any_process(
                [stop.requested, 0 < config.max_seconds <= train_seconds], world_size, device)
            last = iter_num >= config.max_iters or out_of_time
            if master and (iter_num % config.eval_interval == 0 or last):
                losses = estimate_loss(model, splits, config, block_size, device, dtype)
                if not math.isfinite(losses["val"]):
                    raise FloatingPointError(f"val loss is {losses['val']} at iteration {iter_num}; stopping. The "
                                             f"last good checkpoint is {out_dir / 'ckpt.pt'}")
                evals.append({"iter": iter_num, "train_loss": losses["train"], "val_loss": losses["val"]})
                log({"iter": iter_num, "eval_train_loss": losses["train"], "val_loss": losses["val"]})
                bar.write(f"iter {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
                if losses["val"] < best_val_loss:
                    best_val_loss = losses["val"]
                    save_checkpoint({"model_args": asdict(model_config), "model": raw_model.state_dict(),
                                     "tokenizer": data_description, "iter_num": iter_num,
                                     "best_val_loss": best_val_loss}, out_dir / "best.pt")
                if not config.eval_only:
                    save_latest()
            if config.eval_only or last:
                break
            if interrupted:
                if master:
                    save_latest()
                    bar.write(f"interrupted: saved iteration {iter_num} to {out_dir / 'ckpt.pt'}; continue with "
                              "--init_from=resume")
                break

            started = time.perf_counter()
            lr = get_lr(iter_num, config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            offsets = sample_offsets(len(splits["train"]), block_size, tokens_per_iter // block_size, batch_generator)
            offsets = offsets.view(config.gradient_accumulation_steps, config.batch_size)
            for micro_step in range(local_steps):
                x, y = get_batch(splits["train"], offsets[rank * local_steps + micro_step], block_size, device)
                sync = world_size == 1 or micro_step == local_steps - 1
                with contextlib.nullcontext() if sync else train_model.no_sync(), autocast_context(device, dtype):
                    loss = train_model(x, y)[1] / local_steps
                scaler.scale(loss).backward()
                loss_sum += loss.detach()
            if config.grad_clip > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            iter_num += 1
            steps_in_window += 1

            log_now = iter_num % config.log_interval == 0 or iter_num == config.max_iters
            if log_now:
                if world_size > 1:
                    dist.all_reduce(loss_sum, op=dist.ReduceOp.AVG)
                train_loss = loss_sum.item() / steps_in_window
                if not math.isfinite(train_loss):
                    raise FloatingPointError(
                        f"train loss is {train_loss} at iteration {iter_num}; stopping. The last good checkpoint is "
                        f"{out_dir / 'ckpt.pt'}; try a lower learning_rate or grad_clip")
            elapsed = time.perf_counter() - started
            step_seconds.append(elapsed)
            train_seconds += elapsed
            window_seconds += elapsed
            bar.update(1)
            if log_now:
                tokens_per_sec = tokens_per_iter * steps_in_window / window_seconds
                train_losses.append({"iter": iter_num, "loss": train_loss})
                bar.set_postfix(loss=f"{train_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_sec:,.0f}")
                if master:
                    log({"iter": iter_num, "train_loss": train_loss, "lr": lr, "tokens_per_sec": tokens_per_sec})
                loss_sum.zero_()
                steps_in_window, window_seconds = 0, 0.0
    bar.close()
    if run is not None:
        run.finish()
    measured = step_seconds[1:] or step_seconds  # the first step includes compilation and warm-up
    return {"iter_num": iter_num, "best_val_loss": best_val_loss, "evals": evals, "train_losses": train_losses,
            "step_seconds": step_seconds, "train_seconds": train_seconds,
            "tokens_per_sec": tokens_per_iter * len(measured) / sum(measured) if measured else 0.0,
            "interrupted": interrupted, "model": raw_model, "out_dir": str(out_dir)}


def any_process(flags: list[bool], world_size: int, device: torch.device) -> list[bool]:
    """Each flag, true if it is true in any process."""
    if world_size == 1:
        return flags
    tensor = torch.tensor([float(f) for f in flags], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [bool(v) for v in tensor.tolist()]


def main(argv: list[str]) -> None:
    train_config, model_config = parse_options(argv, (TrainConfig, GPTConfig), prog="train.py",
                                               description=__doc__, skip=("vocab_size",))
    result = train(train_config, model_config)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"done: {result['iter_num']} iterations, best val loss {result['best_val_loss']:.4f}, "
              f"{result['tokens_per_sec']:,.0f} tokens/s")


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
