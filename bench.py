"""Speed, measured side by side in one process so that its ratios compare, and repeated in separate processes
(--repeats) so that every figure comes as the spread over them: median (min-max), as Markdown tables for the README.

    python bench.py config/train_shakespeare_char_cpu.py --compile=True     # training: each change vs the plain loop
    python bench.py config/train_shakespeare_char.py --what=sample --device=cpu   # decoding vs matmul floor
    python bench.py config/train_shakespeare_char.py --what=step --device=cpu     # the frozen step's choices undone
    python bench.py --what=tokenizer --input=input.txt --vocab_sizes=512,2048     # GPT-2 and learned BPEs

Training: the bare forward/backward/step loop on one fixed batch, plain (eager, foreach AdamW) and with each
change added (fused AdamW, compile, bfloat16 autocast on CPU), then train.train() against the bare loop of the
same settings (evaluation excluded), in alternating rounds; MFU against the GPU's peak where known, else against
this machine's matmul peak measured here.
Decoding: tokens/s from a random model after a prompt that fills the window, against the decode step's matrix
products alone in the same dtype (the floor) and against the crop-every-step loop without a cache (nanoGPT's
sample.py, float32 on a CPU); on a CPU in float32, the compiled runs again under bfloat16 autocast.
Step: the frozen CPU decode step as fast_decode.py compiles it, and with each of its choices undone (every guard
checked; the graph's wrapper in Python), compiled side by side and called in one randomized order.
Tokenizers: on one text, GPT-2's and a BPE learned from all of the text for each vocabulary size: seconds to learn
(bpe_train.learn_bpe), MB/s of tiktoken's encode_ordinary and of HF's own encoder, and tokens per UTF-8 byte.
"""

import contextlib
import importlib.util
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from unittest import mock

import torch
from torch.nn import functional as F

from errors import UserError, main_guard
from gpt.fast_decode import FROZEN_STEP_OPTIONS, compile_frozen_step, compiled_decode_step, frozen
from gpt.generate import generate
from gpt.model import GPT, GPTConfig, has_fused_adamw
from options import parse_options
from text.bpe_train import MAX_VOCAB_SIZE, MIN_VOCAB_SIZE, learn_bpe, train_hf
from text.dataset import get_batch, load_split, read_text, resolve_data_dir, sample_offsets
from text.tokenizer import GPT2Tokenizer, read_description
from train import TrainConfig, model_vocab_size, train, training_dtype
from training.devices import autocast_context, choose_device, choose_dtype, use_huge_pages

# Dense bfloat16 tensor-core peaks (FLOP/s) from NVIDIA's data sheets; the first key found in the device name
# counts (so "H100 PCIe" before "H100"). Other GPUs get their measured matmul peak.
GPU_PEAK_FLOPS = {"H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12}
# --what=tokenizer's text when --input is not given: Tiny Shakespeare in the shared folder beside the checkout
DEFAULT_TOKENIZER_TEXT = Path(__file__).resolve().parent.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"


@dataclass
class BenchConfig:
    what: str = "train"  # train | sample | step | tokenizer
    bench_steps: int = 30  # timed training steps per variant and round
    warmup_steps: int = 5  # untimed steps first (compilation, allocator warm-up)
    rounds: int = 3  # alternating rounds over the variants; the median round counts
    max_new_tokens: int = 500  # tokens per decoding run, after a prompt that fills the window
    crop_tokens: int = 50  # tokens timed for the crop-every-step loop (its cost per token is constant)
    sample_batch: int = 8  # the larger batch of the decoding benchmark
    sample_vocab_size: int = 65  # vocabulary of the random decoding model
    clock: str = "wall"  # wall | cpu: this process's CPU time, steadier on a shared machine (with OMP_NUM_THREADS=1)
    nanogpt_dir: str = ""  # a checkout of karpathy/nanoGPT: its model and optimizer timed in the same rounds
    repeats: int = 3  # separate processes, each the whole benchmark; every figure is their median (min-max)
    figures_file: str = ""  # set by --repeats for each of its processes: write the figures there as JSON
    input: str = ""  # --what=tokenizer: the UTF-8 text; empty: ../shared/data/tinyshakespeare/input.txt
    vocab_sizes: list[int] = field(default_factory=lambda: [512, 2048, 8192])  # --what=tokenizer: BPEs learned

    def __post_init__(self) -> None:
        if self.what not in BENCHMARKS:
            raise ValueError(f"what={self.what!r} must be one of {', '.join(BENCHMARKS)}")
        if not self.vocab_sizes or not all(MIN_VOCAB_SIZE <= v <= MAX_VOCAB_SIZE for v in self.vocab_sizes):
            raise ValueError(f"vocab_sizes={self.vocab_sizes} must be one or more sizes in [{MIN_VOCAB_SIZE}, "
                             f"{MAX_VOCAB_SIZE}] (256 bytes + <|endoftext|>, then the merges), e.g. 512,2048")
        if self.clock not in ("wall", "cpu"):
            raise ValueError(f"clock={self.clock!r} must be wall or cpu")
        if min(self.bench_steps, self.rounds, self.max_new_tokens, self.crop_tokens, self.sample_batch,
               self.repeats) < 1 or self.warmup_steps < 0:
            raise ValueError("bench_steps, rounds, max_new_tokens, crop_tokens, sample_batch and repeats must be "
                             ">= 1, warmup_steps >= 0")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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


def peak_flops(device: torch.device, dtype: torch.dtype, clock) -> tuple[float, str]:
    """The data-sheet peak of a known GPU in bfloat16, else the matmul peak measured here; and where it came from."""
    if device.type == "cuda" and dtype == torch.bfloat16:
        name = torch.cuda.get_device_name(device)
        for key, flops in GPU_PEAK_FLOPS.items():
            if key in name:
                return flops, f"{name} data sheet"
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
            self.optimizer = self.model.configure_optimizers(config.weight_decay, config.learning_rate, betas,
                                                             device.type, variant.fused)
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
    device = choose_device(config.device)
    description = read_description(resolve_data_dir(config.dataset))
    model_config = replace(model_config, vocab_size=model_vocab_size(description))
    tokens_per_step = config.batch_size * config.gradient_accumulation_steps * model_config.block_size
    dtype, dtype_reason = training_dtype(config, device)
    config = replace(config, dtype=dtype_name(dtype))
    clock = bench_clock(bench, device)
    variants = training_variants(bench, config, device)
    configured = configured_variant(variants, config, device)
    loops = [BareLoop(variant, bench, config, model_config, device) for variant in variants]
    for loop in loops:
        for _ in range(bench.warmup_steps):
            loop.step(clock)
    run_config = replace(config, max_iters=bench.warmup_steps + bench.bench_steps, eval_interval=10**9,
                         eval_iters=1, out_dir=f"{config.out_dir}-bench", progress=False, overwrite=True)
    rates = {v.name: [] for v in variants}
    optimizer_ms = {v.name: [] for v in variants}
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
    flops_per_token = loops[0].model.flops_per_token(model_config.block_size)
    peaks = {dtype: peak_flops(device, dtype, clock) for dtype in {v.dtype for v in variants}}
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
    row = f"train.py against its bare loop ({configured.name}), clock {bench.clock}"
    bare, train_rate = statistics.median(configured_rates), statistics.median(train_rates)
    figures += [figure("train.py", row, "bare loop tokens/s", bare, "tokens/s"),
                figure("train.py", row, "train.py tokens/s", train_rate, "tokens/s"),
                figure("train.py", row, "overhead", 1 - train_rate / bare, "%")]
    return (f"device {device}, {torch.get_num_threads()} threads, torch {torch.__version__}, clock {bench.clock}; "
            f"{bench.rounds} alternating rounds of {bench.bench_steps} steps (medians); dtype {dtype_name(dtype)} "
            f"({dtype_reason})"), figures


def bench_clock(bench: BenchConfig, device: torch.device):
    """The clock of the timings: wall time, or this process's CPU time (a CPU-only measure: the GPU runs apart)."""
    if bench.clock == "cpu" and device.type != "cpu":
        raise ValueError(f"clock='cpu' measures CPU work only; device={device} needs clock='wall'")
    return time.process_time if bench.clock == "cpu" else time.perf_counter


def floor_pass(model: GPT, dtype: torch.dtype = torch.float32) -> Callable[[], None]:
    """One pass of the decode step's matrix products alone in dtype (every Linear of the model, batch 1): the floor."""
    weights = [m.weight.detach().to(dtype) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = [torch.randn(1, w.size(1), device=w.device, dtype=dtype) for w in weights]

    def run() -> None:
        with torch.no_grad():
            for x, w in zip(inputs, weights, strict=True):
                F.linear(x, w)
    return run


def seconds(run: Callable[[], object], clock, device: torch.device) -> float:
    synchronize(device)
    started = clock()
    run()
    synchronize(device)
    return clock() - started


def floor_around(floor: Callable[[], None], run: Callable[[], object], clock, device: torch.device,
                 passes: int = 10) -> tuple[float, float]:
    """(seconds of run, the floor's median seconds a pass over `passes` just before it and as many just after)."""
    before = [seconds(floor, clock, device) for _ in range(passes)]
    took = seconds(run, clock, device)
    after = [seconds(floor, clock, device) for _ in range(passes)]
    return took, statistics.median(before + after)


def decode_rate(model: GPT, prompt: torch.Tensor, new_tokens: int, clock, dtype: torch.dtype,
                floor: Callable[[], None], **kwargs) -> tuple[float, float]:
    """(tokens/s per sequence of generating new_tokens after prompt, its prompt's run included; the floor's
    tokens/s measured around it)."""
    def run() -> None:
        with autocast_context(prompt.device, dtype):
            generate(model, prompt, new_tokens, temperature=0.8, top_k=200, **kwargs)
    took, floor_seconds = floor_around(floor, run, clock, prompt.device)
    return new_tokens / took, 1 / floor_seconds


def decode_model(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig, device: torch.device) -> GPT:
    """The random model the decoding benchmarks time, seeded."""
    torch.manual_seed(config.seed)
    return GPT(replace(model_config, vocab_size=bench.sample_vocab_size, dropout=0.0)).to(device).eval()


@torch.no_grad()
def half_way_step(model: GPT, step) -> Callable[[], None]:
    """One call of step (a DecodeStep) for batch 1, half-way through a full-size cache, as the step alone is timed;
    each call writes the same position again."""
    cache = model.make_cache(1)
    device = model.input_layer.wte.device
    model(torch.zeros((1, model.config.block_size // 2), dtype=torch.long, device=device), cache=cache)
    token = torch.zeros((1, 1), dtype=torch.long, device=device)

    def one_step() -> None:  # the position made each call, as generate.decode makes it
        step(token, torch.full((1,), cache.length, device=device), cache)
    return one_step


@torch.no_grad()
def decode_step_rate(model: GPT, step, clock, floor: Callable[[], None], repeats: int = 50) -> tuple[float, float]:
    """(tokens/s of the decode step alone, batch 1, half-way through a full-size cache; the floor's tokens/s): a
    floor pass and a step in alternation, the median of each, so that what else the machine does meanwhile
    slows both alike; the step's time and the floor's are the same statistic of the same stretch of time."""
    device = model.input_layer.wte.device
    one_step = half_way_step(model, step)
    one_step()  # warm-up
    pairs = [(seconds(floor, clock, device), seconds(one_step, clock, device)) for _ in range(repeats)]
    return 1 / statistics.median(s for _, s in pairs), 1 / statistics.median(f for f, _ in pairs)


def decode_runs(bench: BenchConfig, device: torch.device, dtype: torch.dtype) -> dict[str, tuple]:
    """The generations the decoding benchmark times, name: (rows, new tokens, autocast dtype, generate's options).

    The crop loop in nanoGPT's precision, which has no autocast on a CPU; on a CPU in float32, the compiled runs
    again under bfloat16 autocast, where the compiled step folds the weights' casts into bfloat16 constants.
    """
    crop_dtype = torch.float32 if device.type == "cpu" else dtype
    runs = {"crop loop (no cache, slide=1)": (1, bench.crop_tokens, crop_dtype, {"use_cache": False, "slide": 1})}
    dtypes = [dtype, torch.bfloat16] if device.type == "cpu" and dtype == torch.float32 else [dtype]
    for rows in (1, bench.sample_batch):
        runs[f"KV cache, batch {rows}"] = (rows, bench.max_new_tokens, dtype, {})
        for run_dtype in dtypes:
            label = "" if run_dtype == torch.float32 else f", {dtype_name(run_dtype)}"
            runs[f"KV cache, compiled{label}, batch {rows}"] = (rows, bench.max_new_tokens, run_dtype,
                                                                 {"compile": True})
    return runs


def bench_sample(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig) -> tuple[str, list[dict]]:
    """(what was measured, in one line; the figures) of the decoding benchmark, in one process.

    Every "of the floor" is a ratio within one round (the step against floor passes in alternation, a generation
    against the floor passes around it; a batch's tokens/s of all its rows), and the figure is its median over the
    rounds.
    """
    device = choose_device(config.device)
    dtype = choose_dtype(config.dtype, device)
    model = decode_model(bench, config, model_config, device)
    block_size = model_config.block_size
    clock = bench_clock(bench, device)
    prompt = torch.randint(bench.sample_vocab_size, (1, block_size), device=device)
    runs = decode_runs(bench, device, dtype)
    steps = {"decode step alone, eager": model.decode_step, "decode step alone, compiled": compiled_decode_step(model)}
    floor_runs = {d: floor_pass(model, d) for d in dict.fromkeys([dtype, *(r[2] for r in runs.values())])}
    rates = {name: [] for name in [*runs, *steps]}
    ratios = {name: [] for name in rates}
    floors = {d: [] for d in floor_runs}

    def record(name: str, rate: float, floor_dtype: torch.dtype, floor: float) -> None:
        rates[name].append(rate)
        ratios[name].append(rate / floor)
        floors[floor_dtype].append(floor)
    for name, (rows, _, run_dtype, kwargs) in runs.items():
        started = time.perf_counter()
        decode_rate(model, prompt.expand(rows, -1), 8, clock, run_dtype, floor_runs[run_dtype], **kwargs)  # warm-up
        if kwargs.get("compile"):
            print(f"{name}: first call (compilation) {time.perf_counter() - started:.1f} s")
    for _ in range(bench.rounds):
        with autocast_context(device, dtype):
            for name, step in steps.items():
                rate, floor = decode_step_rate(model, step, clock, floor_runs[dtype])
                record(name, rate, dtype, floor)
        for name, (rows, new_tokens, run_dtype, kwargs) in runs.items():
            rate, floor = decode_rate(model, prompt.expand(rows, -1), new_tokens, clock, run_dtype,
                                      floor_runs[run_dtype], **kwargs)
            record(name, rate * rows, run_dtype, floor)
    crop = statistics.median(rates["crop loop (no cache, slide=1)"])
    table = "decoding, batch 1 unless named"
    figures = [figure(table, f"matmul floor, {dtype_name(d)}", "tokens/s", statistics.median(values), "tokens/s")
               for d, values in floors.items()]
    for name in [*steps, *runs]:
        rows = runs[name][0] if name in runs else 1
        label = name.replace(", batch 1", "").replace(f"batch {rows}", f"batch {rows} (all rows)")
        figures.append(figure(table, label, "tokens/s", statistics.median(rates[name]), "tokens/s"))
        figures.append(figure(table, label, "of the floor", statistics.median(ratios[name]), "%"))
        if name in runs:
            figures.append(figure(table, label, "vs the crop loop", statistics.median(rates[name]) / crop, "x"))
    return (f"device {device}, {torch.get_num_threads()} threads, torch {torch.__version__}, clock {bench.clock}; "
            f"{model.get_num_params():,} parameters, block_size {block_size}; prompt of {block_size} tokens, "
            f"{bench.max_new_tokens} new ({bench.crop_tokens} for the crop loop), temperature 0.8, top_k 200; "
            f"{bench.rounds} alternating rounds (medians); floors in the run's dtype, measured beside each run"
            ), figures


def step_variants() -> dict[str, dict]:
    """torch.compile's arguments for the frozen CPU decode step as fast_decode.py ships it, and with one of its choices
    undone each (the README's "measured on its own")."""
    shipped = FROZEN_STEP_OPTIONS["options"]
    return {"as shipped": shipped,
            "every guard checked": {k: v for k, v in shipped.items() if k != "guard_filter_fn"},
            "Python wrapper (no cpp_wrapper)": {**shipped, "cpp_wrapper": False}}


@torch.no_grad()
def bench_step_variants(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig) -> tuple[str, list[dict]]:
    """(what was measured; the figures): each variant of the frozen decode step compiled side by side in this
    process, then called in a randomized order, bench.rounds * 100 calls each, batch 1, half-way through the cache.

    Randomized because in a fixed order the variant that runs right after another kind of work comes out slower
    (measured): the median seconds a call, and each against the shipped one as a ratio of the two medians.
    """
    device = choose_device(config.device)
    if device.type != "cpu" or "isolate_recompiles" not in FROZEN_STEP_OPTIONS:
        raise UserError("--what=step times the frozen CPU decode step's variants side by side, which needs "
                        "--device=cpu and a torch with torch.compile(isolate_recompiles=...) (2.13); use --what=sample")
    model = decode_model(bench, config, model_config, device)
    clock = bench_clock(bench, device)
    steps = {name: half_way_step(model, frozen(model, compile_frozen_step(options)))
             for name, options in step_variants().items()}
    for name, step in steps.items():
        started = time.perf_counter()
        step()
        print(f"{name}: first call (compilation) {time.perf_counter() - started:.1f} s")
    calls = [name for name in steps for _ in range(100 * bench.rounds)]
    random.Random(config.seed).shuffle(calls)
    seconds_a_call = {name: [] for name in steps}
    for name in calls:
        seconds_a_call[name].append(seconds(steps[name], clock, device))
    medians = {name: statistics.median(values) for name, values in seconds_a_call.items()}
    table = "frozen decode step, batch 1, randomized order"
    figures = []
    for name, median in medians.items():
        figures += [figure(table, name, "a step", median * 1e3, "ms"),
                    figure(table, name, "vs as shipped", median / medians["as shipped"], "x")]
    return (f"device cpu, {torch.get_num_threads()} threads, torch {torch.__version__}, clock {bench.clock}; "
            f"{model.get_num_params():,} parameters, position {model_config.block_size // 2} of "
            f"{model_config.block_size}; "
            f"{100 * bench.rounds} calls of each variant in one randomized order"), figures


def tokenizer_text(bench: BenchConfig) -> tuple[str, str]:
    """(path, text) that --what=tokenizer measures on; a missing or unreadable file, or a vocabulary the text is too
    short to learn, is the user's to fix, found before anything is timed."""
    if not bench.input and not DEFAULT_TOKENIZER_TEXT.is_file():
        raise UserError(f"--what=tokenizer needs a text: {DEFAULT_TOKENIZER_TEXT} does not exist; pass "
                        "--input=PATH (a UTF-8 text file)")
    path = bench.input or str(DEFAULT_TOKENIZER_TEXT)
    text = read_text(path, "--input")
    size, merges = len(text.encode("utf-8")), max(bench.vocab_sizes) - MIN_VOCAB_SIZE
    if merges > size:  # each merge joins at least one pair of the text's bytes (as train_hf checks)
        raise UserError(f"vocab_sizes={bench.vocab_sizes}: {max(bench.vocab_sizes)} needs {merges:,} merges, more "
                        f"than the {size:,} bytes of {path} allow; use smaller --vocab_sizes or a longer --input")
    return path, text


def encode_rate(encode, text: str, clock, rounds: int) -> float:
    """MB/s (UTF-8 bytes) of encode(text), the median of rounds calls."""
    times = []
    for _ in range(rounds):
        started = clock()
        encode(text)
        times.append(clock() - started)
    return len(text.encode("utf-8")) / statistics.median(times) / 1e6


def bench_tokenizer(bench: BenchConfig, *_: object) -> tuple[str, list[dict]]:
    """(what was measured, in one line; the figures) of the tokenizer benchmark, in one process: a BPE learned
    from all of the text for each of vocab_sizes (learn_bpe timed; HF's trained tokenizer, learned again by
    train_hf, for its own encoder), then GPT-2's."""
    import tiktoken
    import tokenizers

    path, text = tokenizer_text(bench)
    size = len(text.encode("utf-8"))
    clock = bench_clock(bench, torch.device("cpu"))
    table, figures = "tokenizer", []
    for vocab_size in bench.vocab_sizes:
        started = clock()
        learned = learn_bpe([text], vocab_size, size, size, progress=False).encoding
        learn_seconds = clock() - started
        hf = train_hf([text], vocab_size, size, size, progress=False)
        row = f"bpe {vocab_size}"
        figures += [figure(table, row, "time to learn", learn_seconds, "s"),
                    figure(table, row, "tiktoken encode",
                           encode_rate(learned.encode_ordinary, text, clock, bench.rounds), "MB/s"),
                    figure(table, row, "HF's own encode", encode_rate(hf.encode, text, clock, bench.rounds), "MB/s"),
                    figure(table, row, "tokens per byte", len(learned.encode_ordinary(text)) / size, "tokens/byte")]
    gpt2 = GPT2Tokenizer().encoding  # the last row: a table's columns come in the order its first row has them
    row = f"GPT-2 ({gpt2.n_vocab:,})"
    figures += [figure(table, row, "tiktoken encode", encode_rate(gpt2.encode_ordinary, text, clock, bench.rounds),
                       "MB/s"),
                figure(table, row, "tokens per byte", len(gpt2.encode_ordinary(text)) / size, "tokens/byte")]
    return (f"{size:,} bytes of {path}, each BPE learned from all of it; clock {bench.clock}; encode MB/s the "
            f"median of {bench.rounds} calls on the whole text; tiktoken {tiktoken.__version__}, tokenizers "
            f"{tokenizers.__version__}"), figures


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def figure(table: str, row: str, column: str, value: float, unit: str) -> dict:
    """One measured figure: a cell of a table, in a unit of FORMATS."""
    return {"table": table, "row": row, "column": column, "value": value, "unit": unit}


FORMATS = {"tokens/s": "{:,.0f}", "x": "{:.2f}x", "%": "{:.1%}", "ms": "{:.2f} ms", "GFLOP/s": "{:,.1f}",
           "s": "{:.2f} s", "MB/s": "{:.1f} MB/s", "tokens/byte": "{:.3f}"}


def spread_cell(values: list[float], unit: str) -> str:
    """median (min-max) of one figure over the processes; one value is marked as measured once."""
    text = FORMATS[unit].format
    if len(values) == 1:
        return f"{text(values[0])} (once)"
    return f"{text(statistics.median(values))} ({text(min(values))}–{text(max(values))})"


def spread_tables(processes: list[list[dict]]) -> str:
    """Markdown tables of every figure over the processes that measured it, rows and columns in first-seen order."""
    values: dict[tuple[str, str, str], list[float]] = {}
    units, layout = {}, {}
    for figures in processes:
        for f in figures:
            key = (f["table"], f["row"], f["column"])
            values.setdefault(key, []).append(f["value"])
            units[key] = f["unit"]
            rows, columns = layout.setdefault(f["table"], ({}, {}))
            rows[f["row"]], columns[f["column"]] = None, None
    lines = []
    for table, (rows, columns) in layout.items():
        lines += [f"| {table} | " + " | ".join(columns) + " |", "| --- |" + " ---: |" * len(columns)]
        for row in rows:
            cells = [spread_cell(values[(table, row, c)], units[(table, row, c)]) if (table, row, c) in values
                     else "" for c in columns]
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def load_averages() -> str:
    return "/".join(f"{load:.2f}" for load in os.getloadavg())


BENCHMARKS = {"train": bench_train, "sample": bench_sample, "step": bench_step_variants,  # --what: its benchmark
              "tokenizer": bench_tokenizer}


def measure_once(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig) -> dict:
    """This process's benchmark: what was measured, the load averages (1, 5, 15 min) before and after, figures."""
    load_before = load_averages()
    header, figures = BENCHMARKS[bench.what](bench, config, model_config)
    return {"header": header, "load": f"{load_before} -> {load_averages()}", "figures": figures}


def measure_in_processes(argv: list[str], repeats: int) -> list[dict]:
    """measure_once in `repeats` separate processes, one after the other (each its own compilation, allocator,
    and place in the machine's load): what one process measures is not all a figure varies by."""
    results = []
    with tempfile.TemporaryDirectory() as directory:
        for repeat in range(repeats):
            path = Path(directory) / f"{repeat}.json"
            print(f"process {repeat + 1} of {repeats} ...", flush=True)
            done = subprocess.run([sys.executable, __file__, *argv, "--repeats=1", f"--figures_file={path}"])
            if done.returncode == 2:  # a user's mistake found there, which it printed as its one line
                sys.exit(2)
            done.check_returncode()
            results.append(json.loads(path.read_text()))
    return results


def main(argv: list[str]) -> None:
    bench, config, model_config = parse_options(argv, (BenchConfig, TrainConfig, GPTConfig), prog="bench.py",
                                                description=__doc__, skip=("vocab_size",))
    if bench.what in ("sample", "step"):
        use_huge_pages()  # as sample.py, whose decoding these time (no tensor exists yet); train.py does not ask
    if bench.what == "tokenizer":
        tokenizer_text(bench)  # a bad --input or --vocab_sizes is one line here, before any process starts
    if bench.figures_file:
        Path(bench.figures_file).write_text(json.dumps(measure_once(bench, config, model_config)))
        return
    results = ([measure_once(bench, config, model_config)] if bench.repeats == 1
               else measure_in_processes(argv, bench.repeats))
    headers = dict.fromkeys(r["header"] for r in results)  # each distinct header once
    print("\n".join(headers))
    print(f"{len(results)} process(es), each cell the median (min–max) over them; load "
          f"averages (1/5/15 min) before -> after each: {'; '.join(r['load'] for r in results)}\n")
    print(spread_tables([r["figures"] for r in results]))


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
