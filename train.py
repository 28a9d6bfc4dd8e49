"""Train a GPT. One process:
    python train.py config/train_shakespeare_char.py --device=cpu --compile=False --max_iters=2000
Several (DDP; each process reads different batches):
    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py
A run lives in out_dir; a new run there needs --overwrite=True, continuing it --init_from=resume.
Ctrl-C or SIGTERM saves at the end of the step and exits with 130 or 143.
"""

# Read top to bottom: the config, building a run (model, data, optimizer, compilation, processes), one step and
# the evaluation that saves, then the loop; the command line last. What a checkpoint holds is checkpoint.py's,
# what the run folder holds (lock, metrics.jsonl, wandb, signals) run_dir.py's.

import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from errors import OptionError, UserError, main_guard
from gpt.extend import METHODS, extend_for_training
from layers.positions import ENCODINGS
from model import GPT, GPTConfig
from options import flag_names, parse_options_and_choices
from text.dataset import check_recorded_tokens, get_batch, load_split, resolve_data_dir, sample_offsets
from text.tokenizer import bits_per_unit, from_description, read_description, token_byte_counts
from training.batch_schedule import batch_size_at, check_batch_schedule, sequences_before
from training.batches import Batch, BatchPrefetcher
from training.checkpoint import (
    SEED_LIMIT,
    all_finite,
    best_subset,
    check_init_from,
    check_resumable,
    check_same_optimizer,
    checkpoint_dict,
    checkpoint_model,
    continued_differences,
    load_for_resume,
    load_pretrained,
    random_state,
    refuse_other_shape,
    restore,
    save_checkpoint,
    saved_average,
)
from training.devices import DTYPES, autocast_context, busy_cpu_note, choose_device, choose_dtype, dtype_name
from training.ema import swap_in_average, update_average
from training.memory import check_batch_fits, check_model_fits
from training.nanogpt import continue_training, init_checkpoint
from training.optimizers import (
    MUON_OPTIONS,
    build_optimizer,
    check_optimizer_here,
    check_optimizer_settings,
    set_learning_rates,
    set_muon_momentum,
)
from training.parallel import (
    PARALLELS,
    check_sharding,
    end_processes,
    gradient_sync,
    is_sharded,
    max_over_processes,
    mean_over_processes,
    shard_model,
    wrap_for_training,
)
from training.run_dir import BEST, CHECKPOINT, Interrupted, MetricsLog, StopRequest, claim_out_dir, start_wandb
from training.schedule import check_schedule, get_lr, moved_schedule

# ---- the config ---------------------------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    out_dir: str = "out"  # checkpoints (ckpt.pt: latest, for resume; best.pt: lowest val loss) and metrics.jsonl
    dataset: str = "python_docs_char"  # a prepared folder under data/ (run its prepare.py), or a path to one
    init_from: str = "scratch"  # scratch | resume (out_dir/ckpt.pt) | gpt2, ... | a local HF GPT-2 dir | a ckpt.pt
    extend_positions: str = ""  # init_from a model and a larger block_size: interpolate|copy|ntk|yarn|keep (extend.py)
    finetune: bool = False  # init_from a ckpt.pt or run folder: its weights from step 0, fresh optimizer, not its run
    overwrite: bool = False  # let a new run (init_from other than resume) replace the run already in out_dir
    eval_interval: int = 250  # iterations between train/val loss estimates and checkpoints
    eval_iters: int = 200  # batches per loss estimate (the same batches every time)
    eval_only: bool = False  # estimate the losses once and print them; writes nothing to out_dir
    always_save_checkpoint: bool = True  # False (nanoGPT's flag): ckpt.pt only at evaluations that improved val loss
    log_interval: int = 10  # iterations between progress-bar, metrics.jsonl and wandb updates
    wandb_log: bool = False  # also log metrics to Weights & Biases
    wandb_project: str = "nanogpt"  # wandb project name
    wandb_run_name: str = "run"  # wandb run name
    wandb_mode: str = "online"  # wandb mode: online | offline | disabled (offline and disabled need no login)
    gradient_accumulation_steps: int = 1  # micro-batches per optimizer step, over all processes together
    batch_size: int = 12  # sequences per micro-batch (per process)
    batch_size_warmup: int = 0  # steps over which each micro-batch grows from batch_size_start to batch_size; 0: off
    batch_size_start: int = 0  # batch_size_warmup: the sequences per micro-batch at step 0, in [1, batch_size)
    learning_rate: float = 6e-4  # peak learning rate (AdamW's)
    head_learning_rate: float = 0.0  # tie_head=False: the head's own AdamW peak rate, scheduled alike; 0: learning_rate
    max_iters: int = 5000  # optimizer steps in all
    max_seconds: float = 0.0  # also stop after this much training time (evaluation excluded); 0: no limit
    weight_decay: float = 0.1  # matrices only, AdamW's and Muon's: a step multiplies them by 1 - their rate x this > 0
    beta1: float = 0.9  # AdamW beta1
    beta2: float = 0.95  # AdamW beta2
    optimizer: str = "adamw"  # adamw | muon (Muon for the blocks' matrices, AdamW for the rest: optimizers.py)
    muon_learning_rate: float = 0.02  # optimizer=muon: Muon's peak rate (Keller Jordan's); scheduled as learning_rate
    muon_momentum: float = 0.95  # optimizer=muon: Muon's Nesterov momentum
    muon_momentum_warmup: int = 0  # optimizer=muon: steps of momentum rising from muon_momentum_start; 0: none
    muon_momentum_start: float = 0.85  # muon_momentum_warmup: the momentum at step 0 (modded-nanogpt's: 0.85)
    muon_orthogonalize: str = "newton_schulz"  # optimizer=muon: newton_schulz (torch's Muon) | polar_express (2025)
    muon_orthogonalize_steps: int = 5  # optimizer=muon: its iterations (torch's ns_steps; polar_express: at most 5)
    muon_orthogonalize_dtype: str = "bfloat16"  # optimizer=muon: its products' dtype, bfloat16 (torch's) | float32
    muon_orthogonalize_scaling: str = "frobenius"  # optimizer=muon: its input's scaling, frobenius (torch's) | aol
    normuon: bool = False  # optimizer=muon: NorMuon, each neuron's orthogonalised update normalised (Li et al. 2025)
    cautious_weight_decay: bool = False  # optimizer=muon: decay Muon's weights only where the update's sign is theirs
    ema_decay: float = 0.0  # > 0: an EMA of the weights from ema_start on, evaluated and saved as the model at the end
    ema_start: int = 0  # ema_decay: the step after which the EMA averages the weights (it starts as step ema_start+1's)
    grad_clip: float = 1.0  # clip the gradient norm to this; 0: no clipping
    decay_lr: bool = True  # linear warmup then lr_schedule's decay; False: constant learning_rate
    lr_schedule: str = "cosine"  # cosine (to min_lr at lr_decay_iters) | wsd (warmup, stable, decay): schedule.py
    wsd_decay_fraction: float = 0.2  # wsd: the decay to min_lr takes the last round(fraction * max_iters) steps
    wsd_decay_shape: str = "1-sqrt"  # wsd: the decay's shape, linear | 1-sqrt (schedule.py)
    warmup_iters: int = 100  # steps of linear warmup
    lr_decay_iters: int = 5000  # step where the cosine reaches min_lr (at or before warmup_iters: no cosine)
    min_lr: float = 6e-5  # final learning rate (usually learning_rate / 10)
    backend: str = "auto"  # DDP backend: auto (nccl on cuda, gloo otherwise) | nccl | gloo
    parallel: str = "ddp"  # under torchrun: ddp (each process holds the whole model) | fsdp (each holds 1/N of it)
    device: str = "auto"  # auto (cuda, then mps, then cpu) | cpu | cuda | cuda:1 | mps
    dtype: str = "auto"  # auto (GPU: bfloat16, else float16; CPU and mps: float32) | float32 | bfloat16 | float16
    compile: bool = True  # torch.compile the model: a slow first step, faster ones after
    activation_checkpointing: bool = False  # recompute each Block in the backward pass: less memory, ~1/3 more compute
    seed: int = 1337  # seeds the initialisation, dropout and the order of batches
    progress: bool = True  # show a tqdm progress bar
    prefetch: bool = True  # build the next step's batches in a worker thread while this step computes

    def __post_init__(self) -> None:
        for name in ("eval_interval", "eval_iters", "log_interval", "gradient_accumulation_steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if min(self.max_iters, self.warmup_iters, self.lr_decay_iters) < 0:
            raise ValueError(f"max_iters={self.max_iters}, warmup_iters={self.warmup_iters} and lr_decay_iters="
                             f"{self.lr_decay_iters} must be >= 0")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate={self.learning_rate} must be a finite number > 0 (nanoGPT: 6e-4)")
        if not (math.isfinite(self.min_lr) and self.min_lr >= 0):
            raise ValueError(f"min_lr={self.min_lr} must be a finite number >= 0 (usually learning_rate / 10)")
        check_train_numbers(self)
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} must be one of {', '.join(DTYPES)}")
        if self.wandb_mode not in ("online", "offline", "disabled"):
            raise ValueError(f"wandb_mode={self.wandb_mode!r} must be online, offline or disabled")
        if self.backend not in ("auto", "nccl", "gloo"):
            raise ValueError(f"backend={self.backend!r} must be auto, nccl or gloo")
        if self.parallel not in PARALLELS:
            raise ValueError(f"parallel={self.parallel!r} must be one of {', '.join(PARALLELS)}")
        if not self.out_dir.strip():
            raise ValueError("out_dir is empty; name the folder of the run, e.g. --out_dir=out")
        check_init_from(self.init_from, ("scratch", "resume"))
        if self.finetune and self.init_from in ("scratch", "resume"):
            raise ValueError(f"finetune=True trains a checkpoint's weights from step 0, but init_from="
                             f"{self.init_from!r}; give --init_from=<run folder or ckpt.pt>, or drop --finetune")
        if self.extend_positions not in ("", *METHODS):
            raise ValueError(f"extend_positions={self.extend_positions!r} must be one of {', '.join(METHODS)} (or "
                             "empty: a block_size larger than init_from's is refused)")
        check_schedule(self)
        check_batch_schedule(self)
        check_optimizer_settings(self)
        check_average(self)


def check_train_numbers(config: TrainConfig) -> None:
    """The optimizer's and the clock's numbers: a NaN, inf or negative value is refused here, not met as a NaN
    loss (or a limit silently off) later. 0 stays "off" for grad_clip and max_seconds."""
    for name in ("weight_decay", "grad_clip", "max_seconds"):
        value = getattr(config, name)
        if not (math.isfinite(value) and value >= 0):
            off = " (0: off)" if name != "weight_decay" else ""
            raise ValueError(f"{name}={value} must be a finite number >= 0{off}")
    for name in ("beta1", "beta2"):
        if not 0.0 <= getattr(config, name) < 1.0:
            raise ValueError(f"{name}={getattr(config, name)} must be in [0, 1) (AdamW's moment decay; "
                             f"nanoGPT: beta1=0.9, beta2=0.95)")
    if not 0 <= config.seed < SEED_LIMIT:
        raise ValueError(f"seed={config.seed} must be in [0, 2**64)")


def check_average(config: TrainConfig) -> None:
    """The EMA's settings: a decay in [0, 1) (0: off) and a start that leaves it steps to average."""
    if not 0.0 <= config.ema_decay < 1.0:
        raise ValueError(f"ema_decay={config.ema_decay} must be in [0, 1) (0: no EMA; modded-nanogpt's horizon of "
                         "150 steps: 1 - 1/150 = 0.9933)")
    if config.ema_decay and not 0 <= config.ema_start < config.max_iters:
        raise ValueError(f"ema_start={config.ema_start} must be in [0, max_iters={config.max_iters}): the EMA "
                         "averages the steps after it")


class Diverged(UserError, FloatingPointError):
    """The loss or the weights went NaN or inf: a learning rate too high, usually. Nothing bad was saved."""


# ---- building a run -----------------------------------------------------------------------------------------------


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


def build_model(config: TrainConfig, model_config: GPTConfig, data_description: dict,
                explicit: frozenset[str] = frozenset()) -> tuple[GPT, dict | None]:
    """The model to train, and the checkpoint it resumes from (None unless init_from=resume).

    explicit names the settings the user gave: on resume, a model shape among them that differs from the
    checkpoint's is an error, not silently replaced by the checkpoint's.
    """
    if config.extend_positions and config.init_from in ("scratch", "resume"):
        raise UserError(f"--extend_positions={config.extend_positions} grows a trained model: give it with "
                        "--init_from=<run folder, ckpt.pt or GPT-2> (a resumed run keeps the extension it has)")
    if config.init_from == "resume":
        model, state = load_for_resume(Path(config.out_dir) / CHECKPOINT, model_config, data_description,
                                       config.dataset, explicit)
        check_same_optimizer(state, config.optimizer, Path(config.out_dir) / CHECKPOINT)
        return model, state
    if config.init_from == "scratch":
        model_config = replace(model_config, vocab_size=model_vocab_size(data_description))
        shards = int(os.environ.get("WORLD_SIZE", "1")) if config.parallel == "fsdp" else 1
        check_model_fits(model_config, choose_device(config.device), shards)
        return GPT(model_config), None
    if init_checkpoint(config.init_from) is not None:
        # A block_size given is extend_for_training's to refuse or to grow; every other shape is checkpoint_model's.
        model, state = checkpoint_model(init_checkpoint(config.init_from), model_config, data_description,
                                        explicit - {"block_size"})
        grew = extend_for_training(model, model_config.block_size, config.extend_positions, config.init_from,
                                   "block_size" in explicit)
        return model, None if grew or config.finetune else state  # an extended model finetunes from step 0
    if model_config.pos_encoding != "learned":
        raise UserError(f"init_from={config.init_from!r} starts from GPT-2's learned position table, but "
                        f"pos_encoding={model_config.pos_encoding!r}; set pos_encoding=learned or init_from=scratch")
    if data_description["kind"] != "gpt2":
        raise UserError(f"init_from={config.init_from!r} needs GPT-2 BPE data, but dataset={config.dataset!r} is "
                        f"tokenized as {data_description['kind']!r}")
    model = load_pretrained(config.init_from, dropout=model_config.dropout)
    refuse_other_shape(continued_differences(model_config, model.config, explicit - {"block_size"}),
                       f"a model continued from init_from={config.init_from!r}", "drop it to train GPT-2's shape")
    if model_config.block_size < model.config.block_size:
        model.crop_block_size(model_config.block_size)
    extend_for_training(model, model_config.block_size, config.extend_positions, config.init_from,
                        "block_size" in explicit)
    return model, None


def training_dtype(config: TrainConfig, device: torch.device, resumed: dict | None = None,
                   asked: bool = True) -> tuple[torch.dtype, str]:
    """The dtype to train in and why: devices.choose_dtype, which depends on the device alone, so that one command
    trains in one dtype whatever else the machine is doing. A resumed auto run keeps the dtype its checkpoint
    trained in (checkpoints record the dtype chosen, not "auto"; older code probed a CPU's bfloat16). asked: the
    dtype was given, not taken from the resumed run's settings."""
    recorded = (resumed or {}).get("config", {}).get("dtype")
    if config.init_from == "resume" and recorded in DTYPES and recorded != "auto":
        if config.dtype == "auto":
            return choose_dtype(recorded, device), f"auto: {recorded}, the dtype the resumed run trained in"
        if not asked and config.dtype == recorded:
            return choose_dtype(recorded, device), "the resumed run's, recorded in its checkpoint"
    dtype = choose_dtype(config.dtype, device)
    if config.dtype != "auto":
        return dtype, "as asked"
    return dtype, f"auto on {device.type}" + ("; --dtype=bfloat16 trains in bfloat16" if device.type == "cpu" else "")


@dataclass
class Run:
    """What a training holds between steps. model is the plain module (sharded in place under FSDP; its full
    state dict is what checkpoints hold), compiled is what evaluates (model or torch.compile(model)), wrapped
    what trains (compiled, or DDP around it)."""

    config: TrainConfig
    model_config: GPTConfig
    data_description: dict
    splits: dict
    device: torch.device
    dtype: torch.dtype
    rank: int
    world_size: int
    model: GPT
    compiled: torch.nn.Module
    wrapped: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    batch_generator: torch.Generator
    log: MetricsLog
    iter_num: int = 0
    best_val_loss: float = math.inf
    has_checkpoint: bool = False  # out_dir/ckpt.pt is this run's: resumed from, or saved since it started
    # UTF-8 bytes of the estimate's targets per split (the same batches every time): counted at the first one
    estimate_bytes: dict[str, int] | None = None
    batches: BatchPrefetcher | None = None  # each step's training batches (step_batches), set up last
    ema: dict[str, torch.Tensor] | None = None  # ema_decay: the average of the weights (ema.py), once it has begun
    training_weights: dict[str, torch.Tensor] | None = None  # the trained weights, once the EMA replaced them (end)

    @property
    def master(self) -> bool:
        return self.rank == 0

    @property
    def sharded(self) -> bool:
        """FSDP: evaluating and gathering the state for a checkpoint take every process, not rank 0 alone."""
        return is_sharded(self.model)

    @property
    def out_dir(self) -> Path:
        return Path(self.config.out_dir)

    @property
    def block_size(self) -> int:
        return self.model_config.block_size

    @property
    def tokens_per_iter(self) -> int:
        return tokens_per_iter(self.config, self.model_config)


# TrainConfig fields that say what this invocation does, not how the run trains: a resumed run takes every other
# setting (the device, dtype and compile too: they change the bits) from its checkpoint unless the user gives it.
THIS_PROCESS = ("out_dir", "init_from", "extend_positions", "finetune", "overwrite", "eval_only", "wandb_log",
                "wandb_project", "wandb_run_name", "wandb_mode", "progress", "prefetch", "max_seconds")
TRAIN_FIELDS = frozenset(f.name for f in fields(TrainConfig))
# Given on resume and other than the run's, these are not named: a longer max_iters is what continuing a run is for,
# and the dataset may lie at another path (the resume checks its tokens and split).
UNNAMED = ("max_iters", "dataset")


def resumed_settings(config: TrainConfig, trained: dict, given: frozenset[str]) -> tuple[TrainConfig, str]:
    """A resumed run's settings: its checkpoint's (trained), but for THIS_PROCESS's and those the user gave; and
    the line that names each given one that differs from the run's ("" if none)."""
    kept = {k: v for k, v in trained.items() if k in TRAIN_FIELDS and k not in THIS_PROCESS and k not in given}
    changed = [f"{k}={getattr(config, k)!r} (the run's: {v!r})" for k, v in trained.items()
               if k in given and k in TRAIN_FIELDS and k not in (*THIS_PROCESS, *UNNAMED) and getattr(config, k) != v]
    try:
        config = replace(config, **kept)
    except ValueError as e:
        raise UserError(f"the checkpoint's settings are not valid here ({e}); start a new run") from None
    return config, f"note: resuming with {', '.join(changed)}; every other setting is the run's" if changed else ""


def tokens_per_iter(config: TrainConfig, model_config: GPTConfig, step: int | None = None) -> int:
    """Tokens one optimizer step trains on: a full step's (step None), or step's under the batch-size schedule (the
    loop's tokens/s divides by these)."""
    batch = config.batch_size if step is None else batch_size_at(step, config)
    return config.gradient_accumulation_steps * batch * model_config.block_size


def tokens_trained(config: TrainConfig, model_config: GPTConfig, steps: int) -> int:
    """Tokens the first `steps` optimizer steps train on, under the batch-size schedule (steps x tokens_per_iter
    without it)."""
    return config.gradient_accumulation_steps * sequences_before(steps, config) * model_config.block_size


def set_up(config: TrainConfig, model_config: GPTConfig, rank: int, world_size: int, device: torch.device,
           data_dir: Path, data_description: dict, explicit: frozenset[str]) -> Run:
    """Data, model (new, pretrained or resumed), optimizer, compilation, DDP and the metrics log."""
    if config.gradient_accumulation_steps % world_size:
        raise UserError(f"gradient_accumulation_steps={config.gradient_accumulation_steps} must be a multiple of "
                        f"the number of processes ({world_size})")
    dtype = choose_dtype(config.dtype, device)
    check_sharding(config.parallel, world_size, dtype)
    check_optimizer_here(config.optimizer, config.parallel == "fsdp" and world_size > 1)
    if config.ema_decay and config.parallel == "fsdp" and world_size > 1:
        raise UserError("ema_decay is not supported with --parallel=fsdp on several processes (each holds a slice of "
                        "the weights to average; not tried here); use --parallel=ddp, or --ema_decay=0")
    if config.parallel == "fsdp" and world_size == 1 and rank == 0:
        print("note: --parallel=fsdp shards the model over the processes that torchrun starts; this is one "
              "process, which holds the whole model", file=sys.stderr)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(config.seed)
    model, resumed = build_model(config, model_config, data_description, explicit)
    dtype, dtype_reason = training_dtype(config, device, resumed, "dtype" in explicit)
    model.activation_checkpointing = config.activation_checkpointing
    check_batch_fits(config, model.config, device)
    splits = {split: load_split(data_dir, split, model.config.block_size) for split in ("train", "val")}
    if model.config.vocab_size < data_description["vocab_size"]:
        raise UserError(f"vocab_size={model.config.vocab_size} is smaller than the data's vocabulary "
                        f"({data_description['vocab_size']})")
    if world_size > 1 and config.parallel == "fsdp":
        shard_model(model, device, dtype)  # moves the model to the device group by group, keeping only the shards
    else:
        model.to(device)
    # After sharding: the optimizer must hold the shards.
    optimizer = build_optimizer(model, config, device.type)
    compiled = torch.compile(model) if config.compile else model
    wrapped = wrap_for_training(compiled, config.parallel, world_size, device)
    run = Run(config, model.config, data_description, splits, device, dtype, rank, world_size, model, compiled,
              wrapped, optimizer, torch.amp.GradScaler(device.type, enabled=dtype == torch.float16),
              torch.Generator().manual_seed(config.seed), MetricsLog(None, True))
    if resumed is not None and config.init_from == "resume":
        run.iter_num, run.best_val_loss = restore(resumed, model, optimizer, run.batch_generator, device,
                                                  run.out_dir / CHECKPOINT)
        run.ema = saved_average(resumed, model, device, run.out_dir / CHECKPOINT) if config.ema_decay else None
        run.has_checkpoint = True
        if run.iter_num > config.max_iters:  # equal: a run stopped in its final evaluation finishes it
            raise UserError(f"max_iters={config.max_iters} is below step {run.iter_num}, where the run in "
                            f"{run.out_dir} stands: no step would train; give a --max_iters above {run.iter_num} "
                            "to train it further")
    elif resumed is not None:  # init_from names a checkpoint: continue its run where the optimizer state fits
        run.iter_num, run.best_val_loss = continue_training(model, optimizer, resumed,
                                                            init_checkpoint(config.init_from), config.optimizer)
        if run.iter_num >= config.max_iters:
            raise UserError(f"init_from={config.init_from!r} continues its run from step {run.iter_num}, which "
                            f"max_iters={config.max_iters} does not pass: no step would train; give a larger "
                            "--max_iters, or --finetune=True to train its weights from step 0")
    run.batches = batch_prefetcher(run)
    if run.master:
        run.log = open_metrics_log(run)
        growing = (f" (growing from {tokens_per_iter(config, model.config, 0):,} at step 0 over "
                   f"{config.batch_size_warmup} steps)" if config.batch_size_warmup else "")
        print(f"{model.get_num_params():,} parameters, pos_encoding={model.config.pos_encoding}, device={device}, "
              f"dtype={dtype_name(dtype)} ({dtype_reason}), {world_size} process(es), "
              f"{run.tokens_per_iter:,} tokens/iter{growing}")
        if sys.stderr.isatty() and (note := busy_cpu_note(device)):  # for a person at a terminal: a log keeps numbers
            print(note, file=sys.stderr)
    return run


def batch_prefetcher(run: Run) -> BatchPrefetcher:
    """This process's micro-batches of each step, drawn from the run's batch generator (batches.py)."""
    config, train_data = run.config, run.splits["train"]
    local_steps = config.gradient_accumulation_steps // run.world_size

    def draw(generator: torch.Generator, step: int) -> torch.Tensor:  # every process draws all micro-batches, takes
        # its own; the batch-size schedule keeps the first rows of each full one (the generator advances as without)
        return sample_offsets(len(train_data), run.block_size, run.tokens_per_iter // run.block_size,
                              generator).view(config.gradient_accumulation_steps,
                                              config.batch_size)[:, :batch_size_at(step, config)]

    def build(offsets: torch.Tensor) -> list[Batch]:
        return [get_batch(train_data, offsets[run.rank * local_steps + micro_step], run.block_size, run.device,
                          run.data_description["vocab_size"]) for micro_step in range(local_steps)]

    return BatchPrefetcher(run.batch_generator, draw, build, config.prefetch)


def open_metrics_log(run: Run) -> MetricsLog:
    """Rank 0's log: metrics.jsonl (none for eval_only; appended to on resume) and wandb if asked."""
    config = run.config
    wandb_run = None
    if config.wandb_log:
        wandb_run = start_wandb(config.out_dir, config.wandb_project, config.wandb_run_name, config.wandb_mode,
                                {**asdict(config), **asdict(run.model_config)})
    return MetricsLog(None if config.eval_only else run.out_dir / "metrics.jsonl",
                      append=config.init_from == "resume", wandb_run=wandb_run)


# ---- one step, and the evaluation that saves ----------------------------------------------------------------------


def run_checkpoint(run: Run, rng: dict | None = None) -> dict:
    """checkpoint.checkpoint_dict of the run as it stands (with the random state rng, default the current one);
    under FSDP every rank must call it."""
    config = replace(run.config, dtype=dtype_name(run.dtype))  # the dtype chosen, not "auto"
    return checkpoint_dict(run.model, run.optimizer, model_config=run.model_config, config=config,
                           tokenizer=run.data_description, iter_num=run.iter_num, best_val_loss=run.best_val_loss,
                           rng=random_state(run.batch_generator, run.device) if rng is None else rng, ema=run.ema,
                           training_weights=run.training_weights)


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, splits: dict, config: TrainConfig, block_size: int, device: torch.device,
                  dtype: torch.dtype, vocab_size: int | None = None,
                  poll: Callable[[], None] | None = None) -> dict[str, float]:
    """Mean loss over eval_iters batches of each split; the same batches every call, so estimates compare. poll()
    before each batch may end it (StopRequest.poll: a signal came)."""
    model.eval()
    losses = {}
    for split, data in splits.items():
        generator = torch.Generator().manual_seed(config.seed)
        total = 0.0
        for _ in range(config.eval_iters):
            if poll:
                poll()
            offsets = sample_offsets(len(data), block_size, config.batch_size, generator)
            x, y = get_batch(data, offsets, block_size, device, vocab_size)
            with autocast_context(device, dtype):
                total += model(x, y)[1].item()
        losses[split] = total / config.eval_iters
    model.train()
    return losses


def last_good(run: Run) -> str:
    """What a diverged run leaves: the checkpoint on disk, if it has written one."""
    if run.has_checkpoint and not run.config.eval_only:
        return f"The last good checkpoint is {run.out_dir / 'ckpt.pt'}"
    return "No checkpoint of this run was saved"


def estimate_bytes(splits: dict, config: TrainConfig, block_size: int, data_description: dict) -> dict[str, int]:
    """The UTF-8 bytes that the targets of estimate_loss's batches stand for, per split: the denominator of its
    bits per byte (loss * tokens / bytes / ln 2). Its batches are the same every call, so this is counted once."""
    byte_counts = torch.from_numpy(token_byte_counts(from_description(data_description)))
    counts = {}
    for split, data in splits.items():
        generator = torch.Generator().manual_seed(config.seed)
        batches = (sample_offsets(len(data), block_size, config.batch_size, generator)
                   for _ in range(config.eval_iters))  # one at a time: eval_iters may be large
        cpu = torch.device("cpu")
        counts[split] = sum(int(byte_counts[get_batch(data, offsets, block_size, cpu, len(byte_counts))[1]].sum())
                            for offsets in batches)
    return counts


def bits_per_byte(run: Run, losses: dict[str, float]) -> dict[str, float]:
    """The estimate's mean loss per token (nats) as bits per UTF-8 byte of the text its targets stand for."""
    tokens = run.config.eval_iters * run.config.batch_size * run.block_size
    return {split: bits_per_unit(loss, tokens, run.estimate_bytes[split]) if run.estimate_bytes[split] else math.nan
            for split, loss in losses.items()}


def save_latest(run: Run, state: dict | None = None) -> None:
    """Write ckpt.pt from state (default: run_checkpoint(run)), unless its weights have diverged."""
    state = run_checkpoint(run) if state is None else state
    if not run.master:
        return
    if not all_finite(state["model"].values()):
        raise Diverged(f"the weights hold NaN or inf at iteration {run.iter_num}; not saving them. "
                       f"{last_good(run)}")
    save_checkpoint(state, run.out_dir / CHECKPOINT)
    run.has_checkpoint = True


def evaluate_and_save(run: Run, last: bool, bar: tqdm, stop: StopRequest | None = None) -> dict:
    """Estimate both losses, log them, and save best.pt (if val improved) and ckpt.pt. Rank 0 only, but every
    rank under FSDP: its forward passes and state gathering need them all; rank 0 alone writes. A signal
    (stop) interrupts the estimate alone, in one process: what follows it writes files."""
    with stop.interruptible(run.world_size == 1) if stop else contextlib.nullcontext():
        losses = estimate_loss(run.compiled, run.splits, run.config, run.block_size, run.device, run.dtype,
                               run.data_description["vocab_size"], stop.poll if stop else None)
        if run.estimate_bytes is None:  # here, not at set-up: a signal interrupts it too
            run.estimate_bytes = estimate_bytes(run.splits, run.config, run.block_size, run.data_description)
    if not math.isfinite(losses["val"]):
        raise Diverged(f"val loss is {losses['val']} at iteration {run.iter_num}; stopping. {last_good(run)}; "
                       "try a lower learning_rate or grad_clip")
    bpb = bits_per_byte(run, losses)
    record = {"iter": run.iter_num, "train_loss": losses["train"], "val_loss": losses["val"],
              "val_bits_per_byte": bpb["val"]}
    run.log.write({"iter": run.iter_num, "eval_train_loss": losses["train"], "val_loss": losses["val"],
                   "eval_train_bits_per_byte": bpb["train"], "val_bits_per_byte": bpb["val"]})
    if run.master:
        try:
            bar.write(f"iter {run.iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f} "
                      f"({bpb['val']:.4f} bits/byte)")
        except BrokenPipeError:  # train.py | head: the run saves and stops, as for SIGTERM
            if stop is None:
                raise
            stop.reader_gone()
    if run.config.eval_only:
        return record
    improved = losses["val"] < run.best_val_loss
    if improved:
        run.best_val_loss = losses["val"]
    if improved or last or run.config.always_save_checkpoint:
        state = run_checkpoint(run)  # gathered once (under FSDP, from every rank) for both files
        if improved and run.master:
            save_checkpoint(best_subset(state), run.out_dir / BEST)
        save_latest(run, state)
    return record


def train_step(run: Run, lr: float) -> torch.Tensor:
    """One optimizer step over this process's share of the micro-batches; returns their mean loss (on device)."""
    config = run.config
    set_learning_rates(run.optimizer, lr, config)
    set_muon_momentum(run.optimizer, run.iter_num, config)
    batches = run.batches.step_batches(run.iter_num)
    local_steps = len(batches)
    total = torch.zeros((), device=run.device)
    for micro_step, (x, y) in enumerate(batches):
        sync = run.world_size == 1 or micro_step == local_steps - 1
        with gradient_sync(run.wrapped, sync), autocast_context(run.device, run.dtype):
            loss = run.wrapped(x, y)[1] / local_steps
        run.scaler.scale(loss).backward()
        total += loss.detach()
    if config.grad_clip > 0:
        run.scaler.unscale_(run.optimizer)
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), config.grad_clip)
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.optimizer.zero_grad(set_to_none=True)
    run.iter_num += 1
    if config.ema_decay and run.iter_num > config.ema_start:  # within the step: a signal waits for it (defer)
        run.ema = update_average(run.ema, run.model, config.ema_decay)
    return total


# ---- the loop -----------------------------------------------------------------------------------------------------


def train(config: TrainConfig, model_config: GPTConfig, explicit: frozenset[str] | None = None) -> dict:
    """Train as configured; returns the losses, timings and the trained model (rank 0 has the full picture; under
    FSDP no model: its shards cannot run once the processes have ended).

    explicit: the settings the user gave (see build_model). result["interrupted"] is the number of the
    signal (SIGINT, SIGTERM) that stopped the run, or 0.
    """
    rank, world_size, device = init_distributed(config)
    try:
        result = train_in_process(config, model_config, explicit, rank, world_size, device)
    finally:
        if world_size > 1:
            end_processes()  # after train_in_process has let go of the wrapped model, so the group ends for good
    return result


def train_in_process(config: TrainConfig, model_config: GPTConfig, explicit: frozenset[str] | None, rank: int,
                     world_size: int, device: torch.device) -> dict:
    with contextlib.ExitStack() as stack:
        note, trained = "", None
        if config.init_from == "resume" and not Path(config.out_dir).is_file():  # a file: claim_out_dir says so
            trained, trained_model = check_resumable(Path(config.out_dir) / CHECKPOINT)
            config, note = resumed_settings(config, trained or {}, TRAIN_FIELDS if explicit is None else explicit)
            note = note if explicit is not None else ""  # a caller's config is all given, on purpose (a study's)
            if explicit is not None and trained_model is not None:  # the run's settings, the flags' among them
                refuse_unused(config, trained_model, explicit - set(FLAG_ONLY_SETTINGS), "drop it (a resumed run "
                              "keeps its checkpoint's model and optimizer)")
        explicit = frozenset({"dropout"}) if explicit is None else explicit  # a caller's model_config: its dropout
        data_dir = resolve_data_dir(config.dataset)
        data_description = read_description(data_dir)  # a dataset not there stops the run before out_dir is made
        check_recorded_tokens(data_dir, data_description, ("train", "val"))
        claim_out_dir(config.out_dir, stack, resume=config.init_from == "resume", overwrite=config.overwrite,
                      claim=rank == 0 and not config.eval_only)
        run = set_up(config, model_config, rank, world_size, device, data_dir, data_description, explicit)
        moved = moved_schedule(run.iter_num, trained, config) if trained else ""
        for line in (note, moved):
            if line and run.master:  # once the resume has passed its checks: a refusal stays one line
                print(line, file=sys.stderr)
        try:
            return train_loop(run)
        finally:
            run.batches.close()
            run.log.finish()


def train_loop(run: Run) -> dict:
    config = run.config
    evals, train_losses, step_seconds, step_tokens, train_seconds = [], [], [], [], 0.0
    window = {"loss": torch.zeros((), device=run.device), "steps": 0, "tokens": 0, "seconds": 0.0}
    bar = tqdm(total=config.max_iters, initial=run.iter_num, disable=not (run.master and config.progress),
               dynamic_ncols=True, unit="it")
    alone = run.world_size == 1  # only there may a signal cut work short: no process waits for this one
    with StopRequest() as stop:
        run.optimizer.register_step_pre_hook(stop.defer)  # a step that has begun changing the weights finishes
        while True:
            # Every process must leave the loop at the same step, or DDP waits forever.
            stopped_by, out_of_time = max_over_processes(
                [stop.signal, float(0 < config.max_seconds <= train_seconds)], run.world_size, run.device)
            last = run.iter_num >= config.max_iters or bool(out_of_time)
            before_step = None  # the random state at the end of the last complete step, when a signal cuts one
            try:
                if last:
                    use_average(run, bar)
                if (run.master or run.sharded) and (run.iter_num % config.eval_interval == 0 or last):
                    evals.append(evaluate_and_save(run, last, bar, stop))
                if config.eval_only or last:
                    stopped_by = 0
                    break
                if not stopped_by:
                    started = time.perf_counter()
                    lr = get_lr(run.iter_num, config)
                    before_step = random_state(run.batch_generator, run.device) if alone else None
                    with stop.interruptible(alone):
                        window["loss"] += train_step(run, lr)
            except Interrupted:
                stopped_by = stop.signal
            if stopped_by:
                stop_and_save(run, stopped_by, before_step, bar)
                break
            window["steps"] += 1
            step_tokens.append(tokens_per_iter(config, run.model_config, run.iter_num - 1))  # the step just trained
            window["tokens"] += step_tokens[-1]
            log_now = run.iter_num % config.log_interval == 0 or run.iter_num == config.max_iters
            train_loss = mean_train_loss(run, window) if log_now else None
            elapsed = time.perf_counter() - started
            step_seconds.append(elapsed)
            train_seconds += elapsed
            window["seconds"] += elapsed
            bar.update(1)
            if log_now:
                train_losses.append({"iter": run.iter_num, "loss": train_loss})
                log_train(run, window, train_loss, lr, bar)
    bar.close()
    first = 1 if len(step_seconds) > 1 else 0  # the first step includes compilation and warm-up
    measured, measured_tokens = step_seconds[first:], step_tokens[first:]
    return {"iter_num": run.iter_num, "best_val_loss": run.best_val_loss, "evals": evals,
            "train_losses": train_losses, "step_seconds": step_seconds, "train_seconds": train_seconds,
            "tokens_per_sec": sum(measured_tokens) / sum(measured) if measured else 0.0,
            "best_val_bits_per_byte": bits_per_byte(run, {"val": run.best_val_loss})["val"]
            if run.estimate_bytes else math.nan,
            "interrupted": int(stopped_by), "out_dir": str(run.out_dir),
            "dtype": dtype_name(run.dtype),
            "model": None if run.sharded else run.model}  # a sharded model holds the process group (end_processes)


def use_average(run: Run, bar: tqdm) -> None:
    """At the end, an EMA run's model becomes the average (ema.py), which the last evaluation measures and saves; a
    run stopped (max_seconds) before the average began says so."""
    if run.ema is not None and run.training_weights is None:
        run.training_weights = swap_in_average(run.model, run.ema)
    elif run.ema is None and run.config.ema_decay and run.master:
        bar.write(f"note: the run ended at iteration {run.iter_num}, before ema_start={run.config.ema_start}: the "
                  "model is the trained weights, not an average")


def stop_and_save(run: Run, stopped_by: int, rng: dict | None, bar: tqdm) -> None:
    """Save the last complete step to ckpt.pt (with rng, the random state before a step that a signal cut
    short) and say how to continue."""
    name = signal.Signals(int(stopped_by)).name
    if run.config.eval_only:  # which writes nothing
        bar.write(f"interrupted ({name}) during the evaluation")
        return
    if run.master or run.sharded:
        save_latest(run, run_checkpoint(run, rng))
    if run.master:
        bar.write(f"interrupted ({name}): saved iteration {run.iter_num} to {run.out_dir / 'ckpt.pt'}; continue "
                  "with --init_from=resume")


def mean_train_loss(run: Run, window: dict) -> float:
    """The mean training loss of the steps since the last log line, over every process; NaN stops the run."""
    train_loss = mean_over_processes(window["loss"], run.world_size).item() / window["steps"]
    if not math.isfinite(train_loss):
        raise Diverged(f"train loss is {train_loss} at iteration {run.iter_num}; stopping. {last_good(run)}; "
                       "try a lower learning_rate or grad_clip")
    return train_loss


def log_train(run: Run, window: dict, train_loss: float, lr: float, bar: tqdm) -> None:
    tokens_per_sec = window["tokens"] / window["seconds"]
    bar.set_postfix(loss=f"{train_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_sec:,.0f}")
    if run.master:
        run.log.write({"iter": run.iter_num, "train_loss": train_loss, "lr": lr, "tokens_per_sec": tokens_per_sec})
    window["loss"].zero_()
    window["steps"], window["tokens"], window["seconds"] = 0, 0, 0.0


# ---- the command line ---------------------------------------------------------------------------------------------


# A schedule's own settings: given in a config file they may be a base's (the CPU configs build on baby_cpu.py,
# nanoGPT's cosine recipe, whose lr_decay_iters the wsd configs inherit), so train.py refuses them unread only as
# its flags (a study's cells as theirs).
SCHEDULE_SETTINGS = ("warmup_iters", "min_lr", "lr_decay_iters")
# Weights & Biases' settings, read only with wandb_log: nanoGPT's config files set them with wandb_log = False (on if
# you like), so train.py refuses them unread only as its flags, like the schedule's.
WANDB_SETTINGS = ("wandb_project", "wandb_run_name", "wandb_mode")
FLAG_ONLY_SETTINGS = SCHEDULE_SETTINGS + WANDB_SETTINGS


def unused_settings(config: TrainConfig, model_config: GPTConfig, given: Iterable[str]) -> list[str]:
    """The given settings that would do nothing in this run, each said with why: another position encoding's (the
    settings each encoding reads: positions.py), the cosine schedule's or the wsd schedule's under the other, a
    schedule's under a constant rate, Muon's under AdamW, a warmup's start without the warmup, a cautious decay of
    nothing, the EMA's start without an EMA, the batch's start without its warmup, wandb's without wandb_log."""
    unused = []
    for name in given:
        if name in SCHEDULE_SETTINGS and not config.decay_lr:
            unused.append(f"{name} is a setting of the learning-rate schedule, and this run's rate is constant "
                          "(decay_lr=False)")
        elif name == "lr_decay_iters" and config.lr_schedule != "cosine":
            unused.append(f"lr_decay_iters is a setting of lr_schedule=cosine, and this run's schedule is "
                          f"{config.lr_schedule} (its decay ends at max_iters)")
        owners = [encoding for encoding, kind in ENCODINGS.items() if name in kind.settings]
        if owners and model_config.pos_encoding not in owners:
            unused.append(f"{name} is a setting of pos_encoding={'|'.join(owners)}, and this run's is "
                          f"{model_config.pos_encoding}")
        if name.startswith("wsd_") and not (config.decay_lr and config.lr_schedule == "wsd"):
            unused.append(f"{name} is a setting of lr_schedule=wsd, and this run's schedule is "
                          f"{config.lr_schedule if config.decay_lr else 'constant (decay_lr=False)'}")
        if name == "gelu" and model_config.mlp_activation != "gelu":
            unused.append(f"gelu is a setting of mlp_activation=gelu, and this run's is {model_config.mlp_activation}")
        if name == "head_learning_rate" and model_config.tie_head:
            unused.append("head_learning_rate is a setting of tie_head=False, and this run's head is the token table")
        if (name.startswith("muon_") or name in MUON_OPTIONS) and config.optimizer != "muon":
            unused.append(f"{name} is a setting of optimizer=muon, and this run's optimizer is {config.optimizer}")
        elif name == "muon_momentum_start" and not config.muon_momentum_warmup:
            unused.append("muon_momentum_start is a setting of muon_momentum_warmup, and this run's is 0")
        elif name == "cautious_weight_decay" and config.cautious_weight_decay and not config.weight_decay:
            unused.append("cautious_weight_decay masks the weight decay, and this run's weight_decay is 0")
        if name == "ema_start" and not config.ema_decay:
            unused.append("ema_start is a setting of ema_decay, and this run's is 0 (no EMA)")
        if name in WANDB_SETTINGS and not config.wandb_log:
            unused.append(f"{name} is a setting of wandb_log, and this run's is False (no metrics go to Weights & "
                          "Biases; --wandb_log=True sends them)")
        if name == "batch_size_start" and not config.batch_size_warmup:
            unused.append("batch_size_start is a setting of batch_size_warmup, and this run's is 0 (the batch is "
                          f"batch_size={config.batch_size} from step 0)")
    return unused


def refuse_unused(config: TrainConfig, model_config: GPTConfig, given: Iterable[str], fix: str) -> None:
    """One line naming every given setting that would do nothing in this run (unused_settings), and fix."""
    unused = unused_settings(config, model_config, given)
    if unused:
        raise OptionError(f"{'; '.join(unused)}: it would do nothing; {fix}")


def main(argv: list[str]) -> None:
    (train_config, model_config), chosen = parse_options_and_choices(
        argv, (TrainConfig, GPTConfig), prog="train.py", description=__doc__, skip=("vocab_size",))
    flags = flag_names(argv)
    given = [name for name in chosen if name in flags or name not in FLAG_ONLY_SETTINGS]
    if train_config.init_from == "resume":  # a resumed run's settings are its checkpoint's (train_in_process's),
        given = [name for name in given if name in WANDB_SETTINGS]  # but wandb's are this process's
    refuse_unused(train_config, model_config, given, "drop it, or set the encoding, schedule, optimizer or switch it "
                  "belongs to")
    result = train(train_config, model_config, frozenset(chosen))
    if result["interrupted"]:
        sys.exit(128 + result["interrupted"])  # the shell's convention: 130 for Ctrl-C, 143 for SIGTERM
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"done: {result['iter_num']} iterations, best val loss {result['best_val_loss']:.4f} "
              f"({result['best_val_bits_per_byte']:.4f} bits/byte), "
              f"{result['tokens_per_sec']:,.0f} tokens/s, {result['train_seconds']:.2f} s of training "
              "(evaluation excluded)")


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
