"""bench.py --what=train: the bare forward/backward/step loop on one fixed batch, plain (eager, foreach AdamW) and
with each change added (fused AdamW, compile, bfloat16 autocast on CPU), nanoGPT's if asked for, then
train.train() against the bare loop of the same settings, in alternating rounds; MFU against the peak, and the
optimizer step's own time (with --optimizer=muon, Muon's and AdamW's parts as train.py builds them). Every step is
the full batch: a batch-size schedule is turned off, and the description line says so."""

import contextlib
import importlib.util
import io
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

import torch

from benchmarks.common import BenchConfig, bench_clock, figure, synchronize
from errors import OptionError
from model import GPT, GPTConfig, has_fused_adamw
from text.dataset import get_batch, load_split, resolve_data_dir, sample_offsets
from text.tokenizer import read_description
from train import TrainConfig, model_vocab_size, tokens_per_iter, train, training_dtype
from training.devices import autocast_context, choose_device, choose_dtype, dtype_name
from training.optimizers import build_optimizer

# Dense bfloat16 tensor-core peaks (FLOP/s) from NVIDIA's data sheets; the first key found in the device name
# counts (so "H100 PCIe" before "H100"). Other GPUs get their measured matmul peak.
GPU_PEAK_FLOPS = {"H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}


def matmul_peak(device: torch.device, dtype: torch.dtype, clock, size: int = 2048, repeats: int = 10) -> float:
    """Best measured FLOP/s of a square matmul in dtype: the ceiling that MFU is relative to off the GPU."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        started = clock()
        a @ b
        synchronize(device)
        best = min(best, clock() - started)
    return 2 * size**3 / best


def data_sheet_peak(device: torch.device) -> float | None:
    """The dense bfloat16 peak of a known GPU from its data sheet (GPU_PEAK_FLOPS), else None."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in GPU_PEAK_FLOPS.items() if key in name), None)


def peak_flops(device: torch.device, dtype: torch.dtype, clock) -> tuple[float, str]:
    """The data-sheet peak of a known GPU in bfloat16, else the matmul peak measured here; and where it came from."""
    flops = data_sheet_peak(device) if dtype == torch.bfloat16 else None
    if flops is not None:
        return flops, f"{torch.cuda.get_device_name(device)} data sheet"
    return matmul_peak(device, dtype, clock), "measured"


@dataclass
class Variant:
    name: str  # the row's label
    compile: bool  # torch.compile the model
    fused: bool  # fused AdamW; nanoGPT's own optimizer decides for itself
    dtype: torch.dtype  # autocast dtype (float32: no autocast)
    nanogpt: bool = False  # nanoGPT's model and configure_optimizers instead of ours


def load_nanogpt(directory: str):
    """nanoGPT's model.py, imported from a checkout of karpathy/nanoGPT."""
    path = Path(directory) / "model.py"
    if not path.is_file():
        raise FileNotFoundError(f"nanogpt_dir={directory!r} has no model.py; give a checkout of karpathy/nanoGPT")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BareLoop:
    """Forward/backward/step on one fixed batch, with nothing around it; step() times one iteration."""

    def __init__(self, variant: Variant, bench: BenchConfig, config: TrainConfig, model_config: GPTConfig,
                 device: torch.device):
        torch.manual_seed(config.seed)
        self.variant, self.config, self.device = variant, config, device
        betas = (config.beta1, config.beta2)
        if variant.nanogpt:
            nanogpt = load_nanogpt(bench.nanogpt_dir)
            fields = ("block_size", "vocab_size", "n_layer", "n_head", "n_embd", "dropout", "bias")
            with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter counts
                self.model = nanogpt.GPT(nanogpt.GPTConfig(**{f: getattr(model_config, f) for f in fields}))
                self.model.to(device)
                self.optimizer = self.model.configure_optimizers(config.weight_decay, config.learning_rate, betas,
                                                                 device.type)
        else:
            self.model = GPT(model_config).to(device)
            self.optimizer = (build_optimizer(self.model, config, device.type) if config.optimizer == "muon" else
                              self.model.configure_optimizers(config.weight_decay, config.learning_rate, betas,
                                                              device.type, variant.fused))
        self.compiled = torch.compile(self.model) if variant.compile else self.model
        data = load_split(resolve_data_dir(config.dataset), "train", model_config.block_size)
        offsets = sample_offsets(len(data), model_config.block_size, config.batch_size,
                                 torch.Generator().manual_seed(0))
        self.x, self.y = get_batch(data, offsets, model_config.block_size, device)
        if variant.nanogpt:  # its loss views the targets, which must then be contiguous
            self.x, self.y = self.x.contiguous(), self.y.contiguous()

    def step(self, clock) -> tuple[float, float]:
        """Seconds by clock of one iteration and of its optimizer step alone."""
        config, device = self.config, self.device
        synchronize(device)
        started = clock()
        for _ in range(config.gradient_accumulation_steps):
            with autocast_context(device, self.variant.dtype):
                loss = self.compiled(self.x, self.y)[1] / config.gradient_accumulation_steps
            loss.backward()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), config.grad_clip)
        synchronize(device)
        optimizer_started = clock()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        ended = clock()
        return ended - started, ended - optimizer_started


def training_variants(bench: BenchConfig, config: TrainConfig, device: torch.device) -> list[Variant]:
    """The plain loop, then one change added at a time, then nanoGPT's if asked for. The configured setting of
    train.py is the first variant named in `configured_variant`. On a CPU, compiled in the other of float32 and
    bfloat16 too: whether --dtype=bfloat16 would train faster on this CPU."""
    dtype = choose_dtype(config.dtype, device)
    has_fused = has_fused_adamw(device.type)
    if config.optimizer == "muon":  # as train.py builds it: its AdamW part fused where torch has it, no other choice
        variants = [Variant(f"plain: eager, Muon and {'fused' if has_fused else 'foreach'} AdamW", False, has_fused,
                            dtype)]
    else:
        variants = [Variant("plain: eager, foreach AdamW", False, False, dtype)]
        if has_fused:
            variants.append(Variant("+ fused AdamW", False, True, dtype))
    variants.append(Variant("+ compile", True, has_fused, dtype))
    if device.type == "cpu" and dtype == torch.float32:
        variants.append(Variant("+ bfloat16 autocast", True, has_fused, torch.bfloat16))
    elif device.type == "cpu" and dtype == torch.bfloat16:
        variants.append(Variant("+ compile, float32 instead", True, has_fused, torch.float32))
    if bench.nanogpt_dir:
        variants += [Variant("nanoGPT: eager", False, False, dtype, nanogpt=True),
                     Variant("nanoGPT: compile", True, False, dtype, nanogpt=True)]
    return variants


def configured_variant(variants: list[Variant], config: TrainConfig, device: torch.device) -> Variant:
    """Ours as train.py runs it: fused AdamW where torch has it, compiled as configured, the configured dtype."""
    dtype = choose_dtype(config.dtype, device)
    fused = has_fused_adamw(device.type)
    return next(v for v in variants if not v.nanogpt and (v.compile, v.fused, v.dtype) == (config.compile, fused,
                                                                                             dtype))


def bench_train(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig) -> tuple[str, list[dict]]:
    """(what was measured, in one line; the figures) of the training benchmark, in one process."""
    if config.optimizer != "adamw" and bench.nanogpt_dir:  # nanoGPT's loops are AdamW's: not the same recipe
        raise OptionError(f"optimizer={config.optimizer!r}: nanoGPT's loops train with AdamW only; drop "
                          "--nanogpt_dir to time ours alone, or drop --optimizer")
    device = choose_device(config.device)
    description = read_description(resolve_data_dir(config.dataset))
    model_config = replace(model_config, vocab_size=model_vocab_size(description))
    tokens_per_step = tokens_per_iter(config, model_config)
    dtype, dtype_reason = training_dtype(config, device)
    # A batch-size schedule's first steps are smaller: train.py's run would time them against the bare loop's full
    # batch and count each as full. Both sides time the full batch, the step a run takes once its batch has grown.
    schedule = (f"; batch-size schedule off (batch_size_warmup={config.batch_size_warmup}): every step the full "
                f"{tokens_per_step:,} tokens" if config.batch_size_warmup else "")
    config = replace(config, dtype=dtype_name(dtype), batch_size_warmup=0)
    clock = bench_clock(bench, device)
    variants = training_variants(bench, config, device)
    configured = configured_variant(variants, config, device)
    loops = [BareLoop(variant, bench, config, model_config, device) for variant in variants]
    for loop in loops:
        for _ in range(bench.warmup_steps):
            loop.step(clock)
    rates, optimizer_ms, configured_rates, train_rates = timed_rounds(bench, config, model_config, loops, configured,
                                                                      clock, tokens_per_step)
    flops_per_token = loops[0].model.flops_per_token(model_config.block_size)
    peaks = {dtype: peak_flops(device, dtype, clock) for dtype in {v.dtype for v in variants}}
    figures = loop_figures(bench, variants, rates, optimizer_ms, peaks, flops_per_token, tokens_per_step)
    row = f"train.py against its bare loop ({configured.name}), clock {bench.clock}"
    bare, train_rate = statistics.median(configured_rates), statistics.median(train_rates)
    figures += [figure("train.py", row, "bare loop tokens/s", bare, "tokens/s"),
                figure("train.py", row, "train.py tokens/s", train_rate, "tokens/s"),
                figure("train.py", row, "overhead", 1 - train_rate / bare, "%")]
    return (f"device {device}, {torch.get_num_threads()} threads, torch {torch.__version__}, clock {bench.clock}; "
            f"{bench.rounds} alternating rounds of {bench.bench_steps} steps (medians); dtype {dtype_name(dtype)} "
            f"({dtype_reason}){schedule}"), figures


def timed_rounds(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig, loops: list[BareLoop],
                 configured: Variant, clock, tokens_per_step: int) -> tuple[dict, dict, list[float], list[float]]:
    """bench.rounds alternating rounds, each every bare loop's bench_steps steps then train.train() of the same
    settings: (tokens/s per variant and round, optimizer ms per variant and round, the configured variant's tokens/s
    per round, train.py's per round)."""
    # No warmup: a schedule's rates do not change a step's time, and a wsd decay must start after the warmup.
    run_config = replace(config, max_iters=bench.warmup_steps + bench.bench_steps, warmup_iters=0,
                         eval_interval=10**9, eval_iters=1, out_dir=f"{config.out_dir}-bench", progress=False,
                         overwrite=True)
    rates = {loop.variant.name: [] for loop in loops}
    optimizer_ms = {loop.variant.name: [] for loop in loops}
    configured_rates, train_rates = [], []
    for _ in range(bench.rounds):
        for loop in loops:
            times = [loop.step(clock) for _ in range(bench.bench_steps)]
            rates[loop.variant.name].append(tokens_per_step / statistics.median(t[0] for t in times))
            optimizer_ms[loop.variant.name].append(1e3 * statistics.median(t[1] for t in times))
            if loop.variant is configured:
                configured_rates.append(tokens_per_step / statistics.median(t[0] for t in times))
        # train.py times its steps by time.perf_counter; for this call the bench's clock stands in for it (the
        # time module's own attribute: for the call, every perf_counter in the process is the bench's clock),
        # so that with --clock=cpu both sides are timed alike and another job's load does not enter the overhead.
        with contextlib.redirect_stdout(io.StringIO()), mock.patch.object(time, "perf_counter", clock):
            timed = train(run_config, replace(model_config))["step_seconds"][bench.warmup_steps:]
        train_rates.append(tokens_per_step / statistics.median(timed))
    return rates, optimizer_ms, configured_rates, train_rates


def loop_figures(bench: BenchConfig, variants: list[Variant], rates: dict, optimizer_ms: dict, peaks: dict,
                 flops_per_token: float, tokens_per_step: int) -> list[dict]:
    """The matmul peaks, each variant's tokens/s, speed-up, MFU and optimizer step, and nanoGPT's against ours."""
    table = f"bare loop, {tokens_per_step:,} tokens/step"
    figures = [figure("matmul peak", f"{dtype_name(d)} ({source})", "GFLOP/s", p / 1e9, "GFLOP/s")
               for d, (p, source) in peaks.items()]
    plain = statistics.median(rates[variants[0].name])
    for variant in variants:
        rate = statistics.median(rates[variant.name])
        figures += [figure(table, variant.name, "tokens/s", rate, "tokens/s"),
                    figure(table, variant.name, "vs plain", rate / plain, "x"),
                    figure(table, variant.name, "MFU", rate * flops_per_token / peaks[variant.dtype][0], "%"),
                    figure(table, variant.name, "optimizer step", statistics.median(optimizer_ms[variant.name]),
                           "ms")]
    if bench.nanogpt_dir:
        theirs = tokens_per_step / statistics.median(rates["nanoGPT: compile"])
        for variant in variants:
            if variant.compile and not variant.nanogpt:
                ours = tokens_per_step / statistics.median(rates[variant.name])
                row = f"ours ({variant.name.removeprefix('+ ')}) against nanoGPT compiled"
                figures += [figure("per step", row, "ours", 1e3 * ours, "ms"),
                            figure("per step", row, "nanoGPT's", 1e3 * theirs, "ms"),
                            figure("per step", row, "time", ours / theirs - 1, "%")]
    return figures
