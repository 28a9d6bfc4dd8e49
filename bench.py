"""Speed, measured side by side in one process so that its ratios compare, and repeated in separate processes
(--repeats) so that every figure comes as the spread over them: median (min-max), as Markdown tables
(docs/benchmarks.md keeps them).

    python bench.py config/speedrun_cpu_baseline.py --compile=True     # training: each change vs the plain loop
    python bench.py config/train_shakespeare_char.py --what=sample --device=cpu   # decoding vs matmul floor
    python bench.py config/train_shakespeare_char.py --what=step --device=cpu     # the frozen step's choices undone
    python bench.py --what=tokenizer --input=input.txt --vocab_sizes=512,2048     # GPT-2 and learned BPEs
    python bench.py config/baby_cpu.py --what=study --bench_steps=300 --repeats=1  # a study's step, eager/compiled,
                                                                                   # 1 or 2 threads, 1 or 2 jobs
    python bench.py config/baby_cpu.py --what=encodings --clock=cpu --max_new_tokens=256  # each position encoding
                                                                                         # vs learned
    python bench.py config/speedrun_cpu_baseline.py --what=nanogpt --nanogpt_dir=../nanoGPT --repeats=1
                                                                 # whole runs: nanoGPT's own train.py vs ours
    python bench.py config/speedrun_cpu_gpt2.py --what=muon --clock=cpu   # Muon's step at 5, 4, 3, 2 iterations
    python bench.py --what=gpu_check   # a GPU machine end to end in under 10 minutes: its peak, the gpu tests,
                                       # training's MFU, decoding vs its floors; a report to paste (gpu_check.py)

Training: the bare forward/backward/step loop on one fixed batch, plain (eager, foreach AdamW) and with each
change added (fused AdamW, compile, bfloat16 autocast on CPU), then train.train() against the bare loop of the
same settings (evaluation excluded), in alternating rounds; MFU against the GPU's peak where known, else against
this machine's matmul peak measured here.
Decoding: tokens/s from a random model after a prompt that fills the window, against the decode step's matrix
products alone in the same dtype (the floor) and against the crop-every-step loop without a cache (nanoGPT's
sample.py, float32 on a CPU); on a CPU in float32, the compiled runs again under bfloat16 autocast.
Step: the frozen CPU decode step as fast_decode.py compiles it, and with each of its choices undone (every guard
checked; the graph's wrapper in Python), compiled side by side and called in one randomized order.
Study: a study's training step as ablate.py runs it, eager or compiled, on 1 or 2 threads, in 1 or 2 jobs at once:
steps a second of all jobs together, and each variant's wall time with its start and compilation.
Encodings: each position encoding (and learned on random positions) against learned, in alternating rounds: an
eager training step on one fixed batch at block_size and at 4x block_size with a quarter of the batch, and eager
decoding of one sequence with a KV cache, one token a call: ms a step, tokens/s, and each as a time over learned's.
Tokenizers: on one text, GPT-2's and a BPE learned from all of the text for each vocabulary size: seconds to learn
(bpe_train.learn_bpe), MB/s of tiktoken's encode_ordinary and of HF's own encoder, and tokens per UTF-8 byte.
nanoGPT: whole training runs of nanoGPT's own train.py and of ours on one CPU recipe and one character dataset,
alternating over the rounds, as separate processes: each one's training seconds with evaluation excluded, and the
ratio round by round.
Muon: one Muon step on the model's block matrices at muon_orthogonalize_steps 5, 4, 3 and 2, Newton-Schulz and Polar
Express, in alternating rounds: ms a step, each as a time over its method's at 5, and the orthogonalised matrices'
distance from the exact polar factor U V^T, for Gaussian matrices and for the model's gradients.
GPU check: the device and its measured matmul peak, pytest -m gpu, the baby config trained eager and compiled and
the 124M shape's compiled step (tokens/s, MFU), decoding through the cached, compiled and CUDA-graph paths against
the matmul and bandwidth floors; each section with its own time limit, in its own process; a report in a new folder
(check.json, summary.md). On a CPU: tiny shapes, and the CUDA-only sections skipped with the reason.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import GPU_CHECK_ONLY, TOKENIZER_ONLY, BenchConfig
from benchmarks.decode_speed import bench_sample, bench_step_variants
from benchmarks.encoding_speed import bench_encodings
from benchmarks.gpu_check import gpu_check
from benchmarks.muon_speed import bench_muon
from benchmarks.nanogpt_train import bench_nanogpt
from benchmarks.study_speed import bench_study
from benchmarks.tokenizer_speed import bench_tokenizer, tokenizer_text
from benchmarks.train_speed import bench_train
from errors import OptionError, main_guard
from model import GPTConfig
from options import parse_options_and_choices
from train import TrainConfig
from training.devices import use_huge_pages

FORMATS = {"tokens/s": "{:,.0f}", "steps/s": "{:.2f}", "x": "{:.2f}x", "%": "{:.1%}", "ms": "{:.2f} ms",
           "GFLOP/s": "{:,.1f}", "s": "{:.2f} s", "MB/s": "{:.1f} MB/s", "tokens/byte": "{:.3f}",
           "relative": "{:.3f}"}


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
              "tokenizer": bench_tokenizer, "study": bench_study, "encodings": bench_encodings,
              "nanogpt": bench_nanogpt, "muon": bench_muon}


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
    (bench, config, model_config), chosen = parse_options_and_choices(
        argv, (BenchConfig, TrainConfig, GPTConfig), prog="bench.py", description=__doc__, skip=("vocab_size",))
    if bench.what == "gpu_check":
        gpu_check(bench, config, set(chosen), argv)
        return
    if set(chosen) & set(GPU_CHECK_ONLY):
        raise OptionError(f"{', '.join(sorted(set(chosen) & set(GPU_CHECK_ONLY)))}: settings of --what=gpu_check, "
                          f"which would do nothing with --what={bench.what}; drop them")
    if bench.what != "tokenizer" and set(chosen) & set(TOKENIZER_ONLY):
        raise OptionError(f"{', '.join(sorted(set(chosen) & set(TOKENIZER_ONLY)))}: settings of --what=tokenizer, "
                          f"which would do nothing with --what={bench.what}; drop them, or give --what=tokenizer")
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
