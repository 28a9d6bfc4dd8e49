"""What every benchmark of bench.py shares: its settings (BenchConfig), the clocks, a figure's record."""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from text.bpe_train import MAX_VOCAB_SIZE, MIN_VOCAB_SIZE

# bench.py's BENCHMARKS in order, then the check (gpu_check.py)
WHAT = ("train", "sample", "step", "tokenizer", "study", "encodings", "nanogpt", "muon", "gpu_check")
# The settings of --what=gpu_check alone, and those it reads beside them (the rest do nothing there and are refused).
GPU_CHECK_ONLY = ("out", "sections", "isolate", "check_seconds")
GPU_CHECK_READS = ("what", "bench_steps", "warmup_steps", "max_new_tokens", "figures_file", "device", "dataset",
                   "nanogpt_dir")
TOKENIZER_ONLY = ("input", "vocab_sizes")  # the settings of --what=tokenizer alone (the others do nothing with them)


@dataclass
class BenchConfig:
    what: str = "train"  # train | sample | step | tokenizer | study | encodings | nanogpt | muon | gpu_check (bench.py)
    bench_steps: int = 30  # timed training steps per variant and round
    warmup_steps: int = 5  # untimed steps first (compilation, allocator warm-up)
    rounds: int = 3  # alternating rounds over the variants; the median round counts
    max_new_tokens: int = 500  # tokens per decoding run, after a prompt that fills the window (encodings: 1 token)
    crop_tokens: int = 50  # tokens timed for the crop-every-step loop (its cost per token is constant)
    sample_batch: int = 8  # the larger batch of the decoding benchmark
    sample_vocab_size: int = 65  # vocabulary of the random decoding model
    clock: str = "wall"  # wall | cpu: this process's CPU time, steadier on a shared machine (with OMP_NUM_THREADS=1)
    nanogpt_dir: str = ""  # a nanoGPT checkout: its model and optimizer (nanogpt, gpu_check: its train.py) timed beside
    repeats: int = 3  # separate processes, each the whole benchmark; every figure is their median (min-max)
    figures_file: str = ""  # set by --repeats for each of its processes: write the figures there as JSON
    input: str = ""  # --what=tokenizer: the UTF-8 text to measure on (required there)
    vocab_sizes: list[int] = field(default_factory=lambda: [512, 2048, 8192])  # --what=tokenizer: BPEs learned
    out: str = ""  # --what=gpu_check: a new folder for its report (check.json, summary.md); default gpu-check-<time>
    sections: list[str] = field(default_factory=list)  # --what=gpu_check: the sections to run (gpu_check.py); all
    isolate: bool = True  # --what=gpu_check: each section in a process of its own (a crash or CUDA error ends it alone)
    check_seconds: float = 540.0  # --what=gpu_check: time for the whole check; a section's limit is cut to what is left

    def __post_init__(self) -> None:
        if self.what not in WHAT:
            raise ValueError(f"what={self.what!r} must be one of {', '.join(WHAT)}")
        if not self.vocab_sizes or not all(MIN_VOCAB_SIZE <= v <= MAX_VOCAB_SIZE for v in self.vocab_sizes):
            raise ValueError(f"vocab_sizes={self.vocab_sizes} must be one or more sizes in [{MIN_VOCAB_SIZE}, "
                             f"{MAX_VOCAB_SIZE}] (256 bytes + <|endoftext|>, then the merges), e.g. 512,2048")
        if not (math.isfinite(self.check_seconds) and self.check_seconds > 0):
            raise ValueError(f"check_seconds={self.check_seconds} must be a number of seconds > 0 (default 540)")
        if self.clock not in ("wall", "cpu"):
            raise ValueError(f"clock={self.clock!r} must be wall or cpu")
        if min(self.bench_steps, self.rounds, self.max_new_tokens, self.crop_tokens, self.sample_batch,
               self.repeats) < 1 or self.warmup_steps < 0:
            raise ValueError("bench_steps, rounds, max_new_tokens, crop_tokens, sample_batch and repeats must be "
                             ">= 1, warmup_steps >= 0")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_clock(bench: BenchConfig, device: torch.device):
    """The clock of the timings: wall time, or this process's CPU time (a CPU-only measure: the GPU runs apart)."""
    if bench.clock == "cpu" and device.type != "cpu":
        raise ValueError(f"clock='cpu' measures CPU work only; device={device} needs clock='wall'")
    return time.process_time if bench.clock == "cpu" else time.perf_counter


def seconds(run: Callable[[], object], clock, device: torch.device) -> float:
    synchronize(device)
    started = clock()
    run()
    synchronize(device)
    return clock() - started


def figure(table: str, row: str, column: str, value: float, unit: str) -> dict:
    """One measured figure: a cell of a table, in a unit of FORMATS."""
    return {"table": table, "row": row, "column": column, "value": value, "unit": unit}
