"""bench.py --what=sample and --what=step: decoding tokens/s against the decode step's matrix products alone (the
floor) and against the crop-every-step loop; the frozen CPU decode step as fast_decode.py compiles it, and with
each of its choices undone, compiled side by side and called in one randomized order."""

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import torch
from torch.nn import functional as F

from benchmarks.common import BenchConfig, bench_clock, figure, seconds
from errors import UserError
from gpt.fast_decode import FROZEN_STEP_OPTIONS, ISOLATION, compile_frozen_step, compiled_decode_step, frozen
from gpt.generate import generate
from model import GPT, GPTConfig
from train import TrainConfig
from training.devices import autocast_context, choose_device, choose_dtype, dtype_name


def floor_pass(model: GPT, dtype: torch.dtype = torch.float32) -> Callable[[], None]:
    """One pass of the decode step's matrix products alone in dtype (every Linear of the model, batch 1): the floor."""
    weights = [m.weight.detach().to(dtype) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = [torch.randn(1, w.size(1), device=w.device, dtype=dtype) for w in weights]

    def run() -> None:
        with torch.no_grad():
            for x, w in zip(inputs, weights, strict=True):
                F.linear(x, w)
    return run


def copy_bandwidth(device: torch.device, megabytes: int, repeats: int = 10) -> float:
    """Best measured bytes/s of copying one tensor of `megabytes` into another (each byte read once, written once)."""
    source = torch.empty(megabytes * 2**20, dtype=torch.uint8, device=device).fill_(1)
    target = torch.empty_like(source)
    best = min(seconds(lambda: target.copy_(source), time.perf_counter, device) for _ in range(repeats))
    return 2 * source.numel() / best


def bandwidth_floor(model: GPT, dtype: torch.dtype, bytes_per_second: float) -> float:
    """Tokens/s of batch 1 half-way through a full-size cache if a step did nothing but read its weights (every
    Linear's, in dtype) and the cache's keys and values once, at bytes_per_second: the memory-bandwidth floor."""
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    c = model.config
    cache = 2 * c.n_layer * (c.block_size // 2) * c.n_embd * model.lm_head.weight.element_size()
    return bytes_per_second / (weights * torch.finfo(dtype).bits // 8 + cache)


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
    undone each (docs/benchmarks.md's "measured on its own")."""
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
    if device.type != "cpu" or not ISOLATION:
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
