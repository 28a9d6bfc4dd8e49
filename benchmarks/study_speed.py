"""bench.py --what=study: what a study's training step costs, the way ablate.py runs it. Each variant trains the
study's model with train.train() for --bench_steps steps in --jobs processes at once, each on its own torch threads,
eager or compiled, and the variants alternate over --rounds. A study is training throughput: the figure that counts
is steps a second of all its processes together, with a run's start (and its compilation) in the wall time.

    python bench.py config/baby_cpu.py --dataset=shakespeare_char --what=study --bench_steps=300 --repeats=1
"""

import contextlib
import io
import multiprocessing
import statistics
import tempfile
import time
from dataclasses import dataclass, replace

import torch

from benchmarks.common import BenchConfig, figure
from model import GPTConfig
from train import TrainConfig, train


@dataclass(frozen=True)
class StudyVariant:
    name: str
    compile: bool
    threads: int  # torch threads of each process
    jobs: int  # processes training at once


VARIANTS = (StudyVariant("eager, 1 thread, 1 job", False, 1, 1),
            StudyVariant("compiled, 1 thread, 1 job", True, 1, 1),
            StudyVariant("eager, 2 threads, 1 job", False, 2, 1),
            StudyVariant("eager, 1 thread each, 2 jobs", False, 1, 2),
            StudyVariant("compiled, 1 thread each, 2 jobs", True, 1, 2))


def timed_training(config: TrainConfig, model_config: GPTConfig, threads: int, results) -> None:
    """One job: train() in a temporary folder on `threads` torch threads; puts (median step seconds after the
    first, wall seconds of the whole call) on results."""
    torch.set_num_threads(threads)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        result = train(replace(config, out_dir=folder), model_config)
    results.put((statistics.median(result["step_seconds"][1:]), time.perf_counter() - started))


def run_variant(variant: StudyVariant, config: TrainConfig, model_config: GPTConfig) -> tuple[float, float]:
    """(steady steps a second of all the variant's jobs together, wall seconds until the last job ended)."""
    context = multiprocessing.get_context("spawn")  # a fresh interpreter each, as ablate.py's --jobs
    results = context.Queue()
    config = replace(config, compile=variant.compile)
    workers = [context.Process(target=timed_training, args=(config, model_config, variant.threads, results))
               for _ in range(variant.jobs)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    timings = [results.get() for _ in workers]
    for worker in workers:
        worker.join()
    return sum(1 / step for step, _ in timings), time.perf_counter() - started


def bench_study(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig) -> tuple[str, list[dict]]:
    """(what was measured, in one line; the figures): each variant's median over the rounds, and its throughput
    against the first (eager, one thread, one job)."""
    steps = bench.warmup_steps + bench.bench_steps
    config = replace(config, max_iters=steps, lr_decay_iters=steps, eval_interval=10**9, eval_iters=1,
                     progress=False, wandb_log=False, init_from="scratch", overwrite=False)
    rates = {v.name: [] for v in VARIANTS}
    walls = {v.name: [] for v in VARIANTS}
    for _ in range(bench.rounds):
        for variant in VARIANTS:
            rate, wall = run_variant(variant, config, model_config)
            rates[variant.name].append(rate)
            walls[variant.name].append(wall)
    base = statistics.median(rates[VARIANTS[0].name])
    table = f"study step, baby model ({steps} steps a job)"
    figures = []
    for variant in VARIANTS:
        rate = statistics.median(rates[variant.name])
        figures += [figure(table, variant.name, "steps/s, all jobs", rate, "steps/s"),
                    figure(table, variant.name, "vs eager, 1 job", rate / base, "x"),
                    figure(table, variant.name, "wall, start to end", statistics.median(walls[variant.name]), "s")]
    header = (f"study step: {config.dataset}, n_layer {model_config.n_layer}, n_embd {model_config.n_embd}, block "
              f"{model_config.block_size}, batch {config.batch_size}; {bench.rounds} alternating rounds (medians); "
              f"{torch.get_num_threads()} CPU threads here")
    return header, figures
