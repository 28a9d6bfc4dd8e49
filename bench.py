"""Speed, measured in one run so that the figures compare (timings across runs and days do not).

    python bench.py config/train_shakespeare_char_cpu.py              # training: bare loop vs train.py, MFU
    python bench.py config/train_shakespeare_char.py --what=sample    # sampling: KV cache vs none

Training: the bare forward/backward/step loop on one fixed batch, against train.train() on the same model and
config (evaluation excluded), in alternating rounds; MFU against this machine's own matmul peak, measured here.
Sampling: tokens/s of cached and uncached generation from random weights, batch 1.
"""

import statistics
import sys
import time
from dataclasses import dataclass, replace

import torch

from dataset import get_batch, load_split, resolve_data_dir, sample_offsets
from devices import autocast_context, choose_device, choose_dtype
from model import GPT, GPTConfig
from options import main_guard, parse_options
from tokenizer import read_description
from train import TrainConfig, model_vocab_size, train


@dataclass
class BenchConfig:
    what: str = "train"  # train | sample
    bench_steps: int = 50  # timed training steps per round
    warmup_steps: int = 10  # untimed steps first (compilation, allocator warm-up)
    rounds: int = 3  # alternating rounds of bare loop and train(); the median round counts
    max_new_tokens: int = 500  # tokens per sampling run
    sample_vocab_size: int = 65  # vocabulary of the random sampling model

    def __post_init__(self) -> None:
        if self.what not in ("train", "sample"):
            raise ValueError(f"what={self.what!r} must be train or sample")
        if min(self.bench_steps, self.rounds, self.max_new_tokens) < 1 or self.warmup_steps < 0:
            raise ValueError("bench_steps, rounds and max_new_tokens must be >= 1, warmup_steps >= 0")


def matmul_peak(device: torch.device, dtype: torch.dtype, size: int = 2048, repeats: int = 10) -> float:
    """Best measured FLOP/s of a square matmul in the training dtype: the ceiling that MFU is relative to."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_loop_seconds(config: TrainConfig, model_config: GPTConfig, device: torch.device, steps: int,
                      warmup_steps: int) -> list[float]:
    """Seconds per step of forward/backward/step on one fixed batch: the loop with nothing around it."""
    dtype = choose_dtype(config.dtype, device)
    torch.manual_seed(config.seed)
    model = GPT(model_config).to(device)
    optimizer = model.configure_optimizers(config.weight_decay, config.learning_rate, (config.beta1, config.beta2),
                                           device.type)
    compiled = torch.compile(model) if config.compile else model
    data = load_split(resolve_data_dir(config.dataset), "train", model_config.block_size)
    offsets = sample_offsets(len(data), model_config.block_size, config.batch_size, torch.Generator().manual_seed(0))
    x, y = get_batch(data, offsets, model_config.block_size, device)
    seconds = []
    for step in range(warmup_steps + steps):
        synchronize(device)
        started = time.perf_counter()
        for _ in range(config.gradient_accumulation_steps):
            with autocast_context(device, dtype):
                loss = compiled(x, y)[1] / config.gradient_accumulation_steps
            loss.backward()
        if config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        if step >= warmup_steps:
            seconds.append(time.perf_counter() - started)
    return seconds


def bench_train(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig) -> None:
    device = choose_device(config.device)
    dtype = choose_dtype(config.dtype, device)
    description = read_description(resolve_data_dir(config.dataset))
    model_config = replace(model_config, vocab_size=model_vocab_size(description))
    tokens_per_step = config.batch_size * config.gradient_accumulation_steps * model_config.block_size
    peak = matmul_peak(device, dtype)
    run_config = replace(config, max_iters=bench.warmup_steps + bench.bench_steps, eval_interval=10**9,
                         eval_iters=1, out_dir=f"{config.out_dir}-bench", progress=True, overwrite=True)
    bare_rates, train_rates = [], []
    for _ in range(bench.rounds):
        bare = bare_loop_seconds(config, model_config, device, bench.bench_steps, bench.warmup_steps)
        bare_rates.append(tokens_per_step / statistics.mean(bare))
        result = train(run_config, replace(model_config))
        timed = result["step_seconds"][bench.warmup_steps:]
        train_rates.append(tokens_per_step / statistics.mean(timed))
    bare_rate, train_rate = statistics.median(bare_rates), statistics.median(train_rates)
    flops_per_token = GPT(model_config).flops_per_token(model_config.block_size)
    print(f"device {device}, dtype {str(dtype).removeprefix('torch.')}, {torch.get_num_threads()} threads; "
          f"matmul peak {peak / 1e9:,.1f} GFLOP/s")
    print(f"bare loop : {bare_rate:10,.0f} tokens/s  MFU {bare_rate * flops_per_token / peak:6.1%}  "
          f"rounds {', '.join(f'{r:,.0f}' for r in bare_rates)}")
    print(f"train.py  : {train_rate:10,.0f} tokens/s  MFU {train_rate * flops_per_token / peak:6.1%}  "
          f"rounds {', '.join(f'{r:,.0f}' for r in train_rates)}")
    print(f"train.py overhead vs bare loop: {1 - train_rate / bare_rate:+.1%}")


def bench_sample(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig) -> None:
    device = choose_device(config.device)
    torch.manual_seed(config.seed)
    model = GPT(replace(model_config, vocab_size=bench.sample_vocab_size, dropout=0.0)).to(device).eval()
    prompt = torch.zeros((1, 1), dtype=torch.long, device=device)
    rates = {}
    for use_cache in (True, False):
        model.generate(prompt, 8, use_cache=use_cache)  # warm-up
        synchronize(device)
        started = time.perf_counter()
        model.generate(prompt, bench.max_new_tokens, temperature=0.0, use_cache=use_cache)
        synchronize(device)
        rates[use_cache] = bench.max_new_tokens / (time.perf_counter() - started)
    print(f"device {device}, {torch.get_num_threads()} threads; {model.get_num_params():,} parameters, "
          f"block_size {model_config.block_size}, {bench.max_new_tokens} new tokens, batch 1")
    print(f"KV cache : {rates[True]:8,.0f} tokens/s")
    print(f"no cache : {rates[False]:8,.0f} tokens/s")
    print(f"speed-up : {rates[True] / rates[False]:8.1f}x")


def main(argv: list[str]) -> None:
    bench, config, model_config = parse_options(argv, (BenchConfig, TrainConfig, GPTConfig), prog="bench.py",
                                                description=__doc__, skip=("vocab_size",))
    if bench.what == "train":
        bench_train(bench, config, model_config)
    else:
        bench_sample(bench, config, model_config)


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
