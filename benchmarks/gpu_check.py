"""bench.py --what=gpu_check: one command that checks a machine end to end, for a GPU lent for minutes. Its
sections, in order: the device and its measured matmul peak; the tests marked gpu (pytest -m gpu); the baby config
trained by train.train() eager and compiled, and the 124M shape's compiled step in bench's bare loop, each as
tokens/s and MFU against the measured peak; decoding through the cached, compiled and CUDA-graph paths against the
matmul floor and the memory-bandwidth floor. Each section has its own time limit and, by default, a process of its
own: a failure, a hang or a CUDA error there is recorded with its error line, and the sections after it still run.
On a CPU the shapes are tiny and the CUDA-only sections are skipped with the reason. Everything goes to one new
folder: check.json, summary.md (to paste into an issue) and each isolated section's output (<section>.log).
"""

import contextlib
import datetime
import gc
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from benchmarks.common import GPU_CHECK_ONLY, GPU_CHECK_READS, BenchConfig
from benchmarks.decode_speed import (
    bandwidth_floor,
    copy_bandwidth,
    decode_model,
    decode_rate,
    decode_step_rate,
    floor_pass,
)
from benchmarks.nanogpt_train import STEP_LINE, nanogpt_step_times
from benchmarks.train_speed import BareLoop, Variant, data_sheet_peak, matmul_peak
from errors import OptionError, UserError
from files import write_atomic
from gpt.fast_decode import compiled_decode_step
from model import GPT, GPTConfig, has_fused_adamw
from options import parse_options, without_flags
from text.dataset import resolve_data_dir
from train import TrainConfig, tokens_per_iter, train, training_dtype
from training.devices import autocast_context, choose_device, choose_dtype, dtype_name

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = "python_docs_char"  # needs no download: data/python_docs_char/prepare.py reads Python's own help
BABY_CONFIG, GPT2_CONFIG = "config/train_shakespeare_char.py", "config/train_gpt2.py"
GPT2_VOCAB = 50304  # GPT-2's 50,257 tokens padded to a multiple of 64, as train.py builds the 124M model
# On a CPU every training and decoding section runs this shape instead of the config's (and says so).
CPU_SHAPE = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32, "batch_size": 4}
GPT2_SHAPE = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024}  # config/train_gpt2.py's model


@dataclass(frozen=True)
class Check:
    """What every section is given."""
    bench: BenchConfig
    device: torch.device
    dataset: str  # --dataset: the corpus the training sections train on
    folder: Path  # the report's folder, where a section may leave a file of its own


@dataclass(frozen=True)
class Section:
    run: Callable[[Check], dict]  # {"line": its result in one line, "values": {...}[, "failed": its error line]}
    seconds: float  # its time limit (cut to what is left of --check_seconds)
    unable: Callable[[Check], str] = lambda check: ""  # why it cannot run in this check (skipped), or ""


class SectionTimeout(Exception):
    """A section in this process ran past its limit (isolate=False)."""


# ---- 1. the device --------------------------------------------------------------------------------------------------


def device_section(check: Check) -> dict:
    """The device, torch, CUDA, and the best FLOP/s of a square matmul in the training dtype (bfloat16 on a GPU):
    the peak that the training sections' MFU is counted against."""
    device, dtype = check.device, choose_dtype("auto", check.device)
    values = {"device": str(device), "torch": torch.__version__, "cuda": torch.version.cuda,
              "python": platform.python_version(), "threads": torch.get_num_threads(), "dtype": dtype_name(dtype)}
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        values.update(name=properties.name, memory_gib=properties.total_memory / 2**30,
                      capability=f"{properties.major}.{properties.minor}", cudnn=torch.backends.cudnn.version(),
                      data_sheet_flops=data_sheet_peak(device))
    else:
        values["name"] = platform.processor() or platform.machine()
    # 8192: a 2048 matmul takes ~20 us on a large GPU, too short to reach its peak against the launch and the sync
    size = 8192 if device.type == "cuda" else 1024
    values["peak_flops"] = matmul_peak(device, dtype, time.perf_counter, size=size, repeats=20)
    sheet = values.get("data_sheet_flops")
    memory = f", {values['memory_gib']:.0f} GiB" if "memory_gib" in values else ""
    peak = (f"{values['peak_flops'] / 1e12:,.1f} TFLOP/s" if device.type == "cuda" else
            f"{values['peak_flops'] / 1e9:,.1f} GFLOP/s")
    line = (f"{values['name']}{memory}, torch {values['torch']}, CUDA {values['cuda'] or 'none'}; "
            f"{dtype_name(dtype)} matmul peak {peak} measured ({size}x{size})")
    line += f", {sheet / 1e12:,.0f} TFLOP/s on its data sheet" if sheet else ""
    return {"line": line, "values": values}


# ---- 2. the tests marked gpu ----------------------------------------------------------------------------------------

PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?)\b")


def pytest_counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line ("2 failed, 40 passed, 3 skipped, 1100 deselected in 61.20s")."""
    summaries = [line for line in output.splitlines() if re.search(r"\bin [\d.]+s\b", line)
                 and PYTEST_COUNT.search(line)]
    if not summaries:
        return {}
    return {("errors" if kind.startswith("error") else kind): int(n)
            for n, kind in PYTEST_COUNT.findall(summaries[-1])}


def gpu_tests_section(check: Check) -> dict:
    """python -m pytest -m gpu, its output in gpu_tests.txt: the counts, and each failing test's line. Tests are
    spread one by one over pytest-xdist's workers (--dist=load), not file by file: the gpu tests are in a few files."""
    output_file = check.folder / "gpu_tests.txt"
    # At most 8 workers on the one GPU, and the cores shared among their compilers: a worker per core of a 16-core
    # machine, each compiling in a pool of 16 processes (inductor's default), would start 256 compiler processes.
    cores = os.cpu_count() or 1
    workers = min(8, cores)
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", f"--numprocesses={workers}", "--dist=load",
               "--durations=5", "-p", "no:cacheprovider"]
    environment = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": str(max(1, cores // workers))}
    with output_file.open("w") as output:
        status = subprocess.run(command, cwd=REPO, stdout=output, stderr=subprocess.STDOUT,
                                env=environment).returncode
    text = output_file.read_text(errors="replace")
    counts = pytest_counts(text)
    failing = [line for line in text.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    if status not in (0, 1, 5) or not counts:  # 5: none collected; other statuses are pytest's own trouble
        last = next((line for line in reversed(text.splitlines()) if line.strip()), "")
        raise RuntimeError(f"pytest -m gpu ended with status {status}: {last}")
    line = ", ".join(f"{n} {kind}" for kind, n in counts.items() if kind != "deselected")
    if check.device.type != "cuda":
        line += " (no CUDA here: each gpu test skips itself)"
    result = {"line": line, "values": {"counts": counts, "failing": failing, "output": output_file.name}}
    if failing or status == 1:
        result["failed"] = f"{line}; {failing[0] if failing else 'see ' + output_file.name}"
    return result


# ---- 3. training ----------------------------------------------------------------------------------------------------


def prepared_dataset(dataset: str) -> Path:
    """The dataset's folder; the default, python_docs_char, is prepared first where it is missing (no download)."""
    try:
        return resolve_data_dir(dataset)
    except UserError:
        if dataset != DEFAULT_DATASET:
            raise
    subprocess.run([sys.executable, str(REPO / "data" / DEFAULT_DATASET / "prepare.py")], check=True)
    return resolve_data_dir(dataset)


def train_settings(check: Check, config_file: str, **overrides) -> tuple[TrainConfig, GPTConfig, str]:
    """config_file's settings with the check's device, dataset and steps, and overrides; on a CPU, CPU_SHAPE for its
    model and batch. And the train.py command of the same settings, for the report."""
    steps = check.bench.warmup_steps + check.bench.bench_steps
    flags = {"dataset": check.dataset, "device": str(check.device), "max_iters": steps, "eval_iters": 1,
             "eval_interval": 10**9, "log_interval": 1, **overrides,  # log_interval=1: a sync ends each step's time
             **(CPU_SHAPE if check.device.type == "cpu" else {})}
    argv = [str(REPO / config_file), *(f"--{k}={v}" for k, v in flags.items())]
    config, model_config = parse_options([*argv, "--progress=False", "--overwrite=True"], (TrainConfig, GPTConfig),
                                         "train.py", "")
    return config, model_config, " ".join(["python train.py", config_file, *argv[1:]])


def cpu_note(check: Check) -> str:
    return (f"; on a CPU: {CPU_SHAPE['n_layer']} layers of {CPU_SHAPE['n_embd']}, block {CPU_SHAPE['block_size']}, "
            f"batch {CPU_SHAPE['batch_size']}, not the config's shape" if check.device.type == "cpu" else "")


def train_run(check: Check, compile: bool) -> dict:
    """The baby config (config/train_shakespeare_char.py) trained by train.train() for warmup_steps + bench_steps
    steps, eager or compiled: tokens/s over the median step after the warmup, and its FLOP/s (MFU: gpu_check)."""
    prepared_dataset(check.dataset)
    config, model_config, command = train_settings(check, BABY_CONFIG, compile=compile)
    with tempfile.TemporaryDirectory() as out_dir:
        result = train(replace(config, out_dir=out_dir), model_config)
    if result["interrupted"]:
        raise KeyboardInterrupt
    model, seconds = result["model"], result["step_seconds"]
    rate = tokens_per_iter(config, model_config) / statistics.median(seconds[check.bench.warmup_steps:])
    values = {"tokens_per_s": rate, "achieved_flops": rate * model.flops_per_token(model_config.block_size),
              "first_step_s": seconds[0], "steps": len(seconds), "dtype": result["dtype"],
              "parameters": model.get_num_params(), "command": command}
    line = (f"{rate:,.0f} tokens/s ({result['dtype']}, {values['parameters'] / 1e6:.2f}M parameters; first step "
            f"{seconds[0]:.1f} s, then the median of {check.bench.bench_steps} after {check.bench.warmup_steps})"
            + cpu_note(check))
    return {"line": line, "values": values}


def train_124m_section(check: Check) -> dict:
    """The 124M shape (config/train_gpt2.py's model, GPT-2's vocabulary) compiled, as bench.py --what=train times
    it: forward, backward and the optimizer step on one fixed batch. Not through train.train(), whose model takes
    the dataset's vocabulary: no offline dataset has GPT-2's (its tokens are the char data's here). 4 micro-batches
    of 12 x 1024 a step, not the config's 40 (the same MFU within ~1%: the optimizer's share). Eager on a CPU,
    where compiling would take longer than the steps."""
    prepared_dataset(check.dataset)
    cuda = check.device.type == "cuda"
    config, model_config, command = train_settings(check, GPT2_CONFIG, compile=cuda,
                                                   gradient_accumulation_steps=4 if cuda else 1)
    model_config = replace(model_config, vocab_size=GPT2_VOCAB)
    dtype, _ = training_dtype(config, check.device)
    loop = BareLoop(Variant("124M", config.compile, has_fused_adamw(check.device.type), dtype), check.bench, config,
                    model_config, check.device)
    seconds = [loop.step(time.perf_counter)[0] for _ in range(config.max_iters)]
    rate = tokens_per_iter(config, model_config) / statistics.median(seconds[check.bench.warmup_steps:])
    values = {"tokens_per_s": rate, "achieved_flops": rate * loop.model.flops_per_token(model_config.block_size),
              "first_step_s": seconds[0], "steps": len(seconds), "dtype": dtype_name(dtype), "compile": config.compile,
              "parameters": loop.model.get_num_params(), "settings": command.replace("python train.py ", "")}
    line = (f"{rate:,.0f} tokens/s ({dtype_name(dtype)}, {'compiled' if config.compile else 'eager'}, "
            f"{values['parameters'] / 1e6:.1f}M parameters, {tokens_per_iter(config, model_config):,} tokens a step; "
            f"first step {seconds[0]:.1f} s)" + cpu_note(check))
    return {"line": line, "values": values}


def nanogpt_124m_section(check: Check) -> dict:
    """nanoGPT's own train.py (--nanogpt_dir) on train_124m's shape and batch (GPT-2's biases, which nanoGPT leaves
    out by default; compiled in bfloat16 on a GPU, eager in float32 on a CPU), on random tokens below GPT-2's 50,257
    in a data folder of its own (no meta.pkl: it builds its 50,304-token head, as train_124m). Tokens/s of the median
    step after the warmup, from the step times it prints (--log_interval=1: its loss.item() ends each step's time),
    and its FLOP/s counted by this repository's formula for the same shape: its MFU against the measured peak, not
    the A100's that it prints. Its steps draw their batches from the data (ours repeat one), as its train.py does."""
    cuda = check.device.type == "cuda"
    config, model_config, _ = train_settings(check, GPT2_CONFIG, compile=cuda,
                                             gradient_accumulation_steps=4 if cuda else 1)
    model_config = replace(model_config, vocab_size=GPT2_VOCAB)
    steps, dtype = config.max_iters, training_dtype(config, check.device)[0]
    nanogpt_dir = Path(check.bench.nanogpt_dir).resolve()
    settings = {"batch_size": config.batch_size, "gradient_accumulation_steps": config.gradient_accumulation_steps,
                "compile": config.compile, **{name: getattr(model_config, name) for name in
                                              ("block_size", "n_layer", "n_head", "n_embd", "bias", "dropout")},
                "device": str(check.device), "dtype": dtype_name(dtype), "max_iters": steps, "eval_interval": 10**9,
                "eval_iters": 1, "log_interval": 1, "always_save_checkpoint": False, "wandb_log": False,
                "dataset": "gpu_check", "out_dir": "out"}
    with tempfile.TemporaryDirectory() as directory:  # its working folder: data/gpu_check/ and configurator.py
        work = Path(directory)
        (work / "data" / "gpu_check").mkdir(parents=True)
        tokens = torch.randint(50257, (64 * model_config.block_size * config.batch_size,),
                               generator=torch.Generator().manual_seed(0))
        for split in ("train.bin", "val.bin"):
            (work / "data" / "gpu_check" / split).write_bytes(tokens.numpy().astype("uint16").tobytes())
        (work / "configurator.py").symlink_to(nanogpt_dir / "configurator.py")
        command = [sys.executable, str(nanogpt_dir / "train.py"), *(f"--{k}={v}" for k, v in settings.items())]
        done = subprocess.run(command, cwd=work, capture_output=True, text=True)
    print(done.stdout + done.stderr, flush=True)  # into the section's log
    if done.returncode:
        last = next((line for line in reversed((done.stdout + done.stderr).splitlines()) if line.strip()), "")
        raise RuntimeError(f"nanoGPT's train.py exited {done.returncode} after printing "
                           f"{len(STEP_LINE.findall(done.stdout))} of {steps} steps: {last}")
    times = nanogpt_step_times(done.stdout, steps)
    rate = tokens_per_iter(config, model_config) / statistics.median(times[check.bench.warmup_steps:])
    with torch.device("meta"):  # the FLOP count of the shape, without its weights
        flops = GPT(model_config).flops_per_token(model_config.block_size)
    values = {"tokens_per_s": rate, "achieved_flops": rate * flops, "first_step_s": times[0], "steps": steps,
              "dtype": dtype_name(dtype), "compile": config.compile, "nanogpt_dir": str(nanogpt_dir),
              "settings": " ".join(command[2:])}
    line = (f"{rate:,.0f} tokens/s (nanoGPT's train.py, {dtype_name(dtype)}, "
            f"{'compiled' if config.compile else 'eager'}, {tokens_per_iter(config, model_config):,} tokens a step; "
            f"first step {times[0]:.1f} s)" + cpu_note(check))
    return {"line": line, "values": values}


# ---- 4. decoding ----------------------------------------------------------------------------------------------------


def decode_run(check: Check, path: str, weights_dtype: torch.dtype = torch.float32) -> dict:
    """Decoding of the 124M shape (random weights, GPT-2's vocabulary) through one path: cached (the eager step
    with a KV cache), compiled (on CUDA without CUDA graphs; on a CPU the frozen step of fast_decode.py) or graphs
    (fast_decode.py's compiled step: CUDA graphs). The decode step alone, batch 1, half-way through a full cache,
    against the matmul floor measured beside it (decode_speed.py) and against the bandwidth floor (every weight and
    the cache read once at the copy bandwidth measured here); then a generation through generate() where it has
    the path. Under autocast as sample.py runs (float32 weights), or with the weights cast to weights_dtype."""
    device, dtype = check.device, choose_dtype("auto", check.device)
    shape = {**GPT2_SHAPE, **(CPU_SHAPE if device.type == "cpu" else {})}
    shape.pop("batch_size", None)
    bench = replace(check.bench, sample_vocab_size=GPT2_VOCAB)
    model = decode_model(bench, TrainConfig(), GPTConfig(**shape), device).to(weights_dtype)
    run_dtype = dtype if weights_dtype == torch.float32 else weights_dtype  # autocast only over float32 weights
    floor = floor_pass(model, run_dtype)
    if path == "cached":
        step = model.decode_step
    elif path == "compiled" and device.type == "cuda":  # inductor's default mode: no CUDA graphs
        step = torch.compile(model.decode_step, fullgraph=True, dynamic=False)
    else:
        step = compiled_decode_step(model)
    started = time.perf_counter()
    with autocast_context(device, run_dtype):
        step_rate, floor_rate = decode_step_rate(model, step, time.perf_counter, floor)
    bandwidth = copy_bandwidth(device, 1024 if device.type == "cuda" else 64)
    bound = bandwidth_floor(model, weights_dtype, bandwidth)  # the weights as stored: a step reads them all
    values = {"step_tokens_per_s": step_rate, "matmul_floor_tokens_per_s": floor_rate,
              "of_matmul_floor": step_rate / floor_rate, "copy_bytes_per_s": bandwidth,
              "bandwidth_floor_tokens_per_s": bound, "of_bandwidth_floor": step_rate / bound,
              "weights": dtype_name(weights_dtype), "matmuls": dtype_name(run_dtype),
              "parameters": model.get_num_params(), "step_seconds_with_compile": time.perf_counter() - started}
    line = (f"step alone {step_rate:,.0f} tokens/s: {step_rate / bound:.1%} of the bandwidth floor ({bound:,.0f}; "
            f"{bandwidth / 1e9:,.0f} GB/s copy), {step_rate / floor_rate:.1%} of the matmul floor ({floor_rate:,.0f}); "
            f"{dtype_name(weights_dtype)} weights, {dtype_name(run_dtype)} matmuls")
    if path != "compiled" or device.type == "cpu":  # generate() has no compiled path without CUDA graphs on CUDA
        block = model.config.block_size
        prompt = torch.randint(GPT2_VOCAB, (1, block // 2), device=device)
        new_tokens = min(check.bench.max_new_tokens, block // 2)  # within the window: no slide, decoding alone
        kwargs = {} if path == "cached" else {"compile": True}
        decode_rate(model, prompt, 8, time.perf_counter, run_dtype, floor, **kwargs)  # warm-up (and compilation)
        rate, _ = decode_rate(model, prompt, new_tokens, time.perf_counter, run_dtype, floor, **kwargs)
        values["generate_tokens_per_s"] = rate
        line += f"; generate() {rate:,.0f} tokens/s ({new_tokens} tokens after {block // 2})"
    if path == "graphs":
        from torch._dynamo.utils import counters  # the compiler's record of graphs it could not capture

        values["cudagraph_skips"] = skips = dict(counters["inductor"]).get("cudagraph_skips", 0)
        if skips:
            line += f"; CUDA graphs skipped {skips} time(s): the figures are without them"
    if device.type == "cpu":
        line += f"; on a CPU: {shape['n_layer']} layers of {shape['n_embd']}, block {shape['block_size']}, not 124M"
    return {"line": line, "values": values}


def without_cuda_graphs(check: Check) -> str:
    return "" if check.device.type == "cuda" else f"CUDA graphs need a CUDA device; this run's device is {check.device}"


def without_nanogpt(check: Check) -> str:
    return "" if check.bench.nanogpt_dir else ("no --nanogpt_dir: give a checkout of karpathy/nanoGPT to time its "
                                               "train.py beside train_124m")


# name: the section, in the order they run, which is the order of what a GPU lent for minutes must give first: the
# peak, the figures issue 55's goals name (the 124M step's MFU beside nanoGPT's, the CUDA-graph decode against its
# floor), the gpu tests, then the rest. The limits are a GPU's (H200: see docs/benchmarks.md).
SECTIONS = {
    "device": Section(device_section, 90),
    "train_124m": Section(train_124m_section, 180),
    "nanogpt_124m": Section(nanogpt_124m_section, 150, without_nanogpt),
    "decode_cuda_graphs": Section(lambda check: decode_run(check, "graphs"), 150, without_cuda_graphs),
    "gpu_tests": Section(gpu_tests_section, 240),
    "decode_cuda_graphs_bf16": Section(lambda check: decode_run(check, "graphs", torch.bfloat16), 150,
                                       without_cuda_graphs),
    "train_baby": Section(lambda check: train_run(check, compile=False), 90),
    "train_baby_compiled": Section(lambda check: train_run(check, compile=True), 150),
    "decode_cached": Section(lambda check: decode_run(check, "cached"), 90),
    "decode_compiled": Section(lambda check: decode_run(check, "compiled"), 150),
}


# ---- running the sections -------------------------------------------------------------------------------------------


def error_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def run_here(section: Section, check: Check, limit: float) -> dict:
    """The section in this process, stopped by SIGALRM at its limit."""
    def expire(signum, frame):
        raise SectionTimeout(f"timed out after {limit:.3g} s (its limit)")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return section.run(check)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        gc.collect()
        if check.device.type == "cuda":
            torch.cuda.empty_cache()


def last_line(path: Path) -> str:
    return next((line for line in reversed(path.read_text(errors="replace").splitlines()) if line.strip()), "")


def run_isolated(name: str, check: Check, argv: list[str], limit: float) -> dict:
    """The section in a process of its own (bench.py with --sections=name), its output in <name>.log; killed with
    everything it started (its process group) at its limit or when this process is interrupted."""
    result_file, log = check.folder / f".{name}.json", check.folder / f"{name}.log"
    own = without_flags(argv, ("sections", "out", "figures_file"))  # a second --sections=... would be refused
    command = [sys.executable, str(REPO / "bench.py"), *own, f"--sections={name}", f"--out={check.folder}",
               f"--figures_file={result_file}"]
    with log.open("w") as output:
        child = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            status = child.wait(timeout=limit)
        except BaseException as stop:  # its limit, Ctrl-C, SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            if isinstance(stop, subprocess.TimeoutExpired):
                raise SectionTimeout(f"timed out after {limit:.3g} s (its limit)") from None
            raise
    if status != 0:
        raise RuntimeError(f"exit status {status}: {last_line(log)}" if status > 0 else
                           f"killed by {signal.Signals(-status).name}: {last_line(log)}")
    result = json.loads(result_file.read_text())
    result_file.unlink()
    return result


def new_folder(out: str) -> Path:
    """--out, made now (refused if it exists: a report is never overwritten), or gpu-check-<date>-<time>[-N]."""
    if out:
        folder = Path(out)
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            raise UserError(f"out={out!r} already exists; give a new folder (a check's report is never overwritten) "
                            "or leave --out out for a new gpu-check-<time> folder") from None
        return folder
    stamp = datetime.datetime.now().strftime("gpu-check-%Y%m%d-%H%M%S")
    for number in range(1, 1000):
        folder = Path(stamp if number == 1 else f"{stamp}-{number}")
        with contextlib.suppress(FileExistsError):
            folder.mkdir()
            return folder
    raise UserError(f"{stamp}-1 to -999 all exist; give --out=FOLDER")


def add_mfu(report: dict) -> None:
    """Each training section's MFU: its FLOP/s against the matmul peak that the device section measured."""
    peak = report["sections"].get("device", {}).get("values", {}).get("peak_flops")
    for record in report["sections"].values():
        achieved = record.get("values", {}).get("achieved_flops")
        if achieved is not None and "mfu" not in record["values"]:
            record["values"]["mfu"] = achieved / peak if peak else None
            record["line"] += (f"; MFU {achieved / peak:.1%} of the measured peak" if peak else
                               "; MFU: no measured peak (the device section did not run)")


def summary(report: dict) -> str:
    """The report as Markdown, to paste into an issue."""
    sections = report["sections"]
    statuses = [r["status"] for r in sections.values()]
    device = sections.get("device", {}).get("values", {}).get("name", report["device"])
    lines = [f"### GPU check: {device}", "",
             f"`{report['command']}` ({report['started']}): torch {report['torch']}, CUDA {report['cuda'] or 'none'}; "
             f"{statuses.count('ok')} ok, {statuses.count('failed')} failed, {statuses.count('skipped')} skipped "
             f"in {report['seconds']:.0f} s.", "",
             "| section | status | seconds | result |", "| --- | --- | ---: | --- |"]
    for name, record in sections.items():
        seconds = f"{record['seconds']:.1f}" if "seconds" in record else ""
        text = record.get("line") or record.get("reason") or record.get("error", "")
        lines.append(f"| {name} | {record['status']} | {seconds} | {text.replace('|', '/')} |")
    failed = [f"- {name}: {record['error']}" for name, record in sections.items() if record["status"] == "failed"]
    return "\n".join(lines + (["", "Failed:", *failed] if failed else [])) + "\n"


def write_report(folder: Path, report: dict) -> None:
    write_atomic(folder / "check.json", json.dumps(report, indent=1) + "\n")
    write_atomic(folder / "summary.md", summary(report))


def run_section(name: str, check: Check, argv: list[str], limit: float) -> dict:
    """One section's record: ok with its result, or failed with its error line (its traceback printed)."""
    started = time.monotonic()
    try:
        result = (run_isolated(name, check, argv, limit) if check.bench.isolate else
                  run_here(SECTIONS[name], check, limit))
        record = {"status": "failed" if "failed" in result else "ok", **result}
        if "failed" in result:
            record["error"] = record.pop("failed")
    except Exception as error:
        if not isinstance(error, SectionTimeout | UserError) and not check.bench.isolate:
            traceback.print_exc()  # our own bug, or the GPU's: loud here, one line in the summary
        record = {"status": "failed", "error": str(error) if isinstance(error, SectionTimeout) else error_line(error)}
    return {**record, "seconds": time.monotonic() - started}


def raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def check_options(bench: BenchConfig, chosen: set[str]) -> None:
    """The settings this check does not read, and section names it does not have, refused before it starts."""
    unused = sorted(chosen - set(GPU_CHECK_ONLY) - set(GPU_CHECK_READS))
    if unused:
        raise OptionError(f"--what=gpu_check trains and decodes shapes of its own; {', '.join(unused)} would do "
                          f"nothing (it reads --device, --dataset, --bench_steps, --warmup_steps, --max_new_tokens, "
                          f"--nanogpt_dir and {', '.join('--' + name for name in GPU_CHECK_ONLY)})")
    missing = [name for name in ("train.py", "configurator.py") if not (Path(bench.nanogpt_dir) / name).is_file()]
    if bench.nanogpt_dir and missing:
        raise OptionError(f"nanogpt_dir={bench.nanogpt_dir!r} has no {' or '.join(missing)}; give a checkout of "
                          "karpathy/nanoGPT, or leave --nanogpt_dir out to skip the nanogpt_124m section")
    unknown = [name for name in bench.sections if name not in SECTIONS]
    if unknown:
        raise OptionError(f"sections={','.join(unknown)}: no such section; the sections are {','.join(SECTIONS)}")


def gpu_check(bench: BenchConfig, config: TrainConfig, chosen: set[str], argv: list[str]) -> dict:
    """Run the check's sections (all, or --sections), each within its limit and what is left of check_seconds;
    write check.json and summary.md after each; return the report. With figures_file set, this is one isolated
    section's process: run its one section here and write its result there."""
    check_options(bench, chosen)
    device = choose_device(config.device)
    if bench.figures_file:
        (name,) = bench.sections
        result = SECTIONS[name].run(Check(bench, device, config.dataset, Path(bench.out)))
        Path(bench.figures_file).write_text(json.dumps(result))
        return result
    if config.dataset != DEFAULT_DATASET:
        resolve_data_dir(config.dataset)  # a bad --dataset is one line now, not a failure in every training section
    check = Check(bench, device, config.dataset, new_folder(bench.out))
    report = {"command": " ".join(["python bench.py", *argv]), "folder": str(check.folder),
              "started": datetime.datetime.now().isoformat(timespec="seconds"), "device": str(device),
              "torch": torch.__version__, "cuda": torch.version.cuda, "seconds": 0.0, "sections": {}}
    print(f"gpu check on {device}: {len(bench.sections or SECTIONS)} section(s), at most {bench.check_seconds:.0f} s; "
          f"report in {check.folder}/", flush=True)
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        for name, section in SECTIONS.items():
            left = bench.check_seconds - (time.monotonic() - started)
            if bench.sections and name not in bench.sections:
                record = {"status": "skipped", "reason": "not in --sections"}
            elif reason := section.unable(check):
                record = {"status": "skipped", "reason": reason}
            elif left < 1:
                record = {"status": "skipped", "reason": f"out of time (--check_seconds={bench.check_seconds:.0f})"}
            else:
                limit = min(section.seconds, left)
                print(f"{name} (limit {limit:.3g} s) ...", flush=True)
                try:
                    record = run_section(name, check, argv, limit)
                except KeyboardInterrupt:
                    report["sections"][name] = {"status": "failed", "error": "interrupted (Ctrl-C or SIGTERM)"}
                    raise
            report["sections"][name] = record
            if record["status"] != "skipped":
                print(f"{name}: {record['status']}, {record['seconds']:.1f} s: {record.get('line') or record['error']}",
                      flush=True)
            add_mfu(report)
            report["seconds"] = time.monotonic() - started
            write_report(check.folder, report)
    finally:
        signal.signal(signal.SIGTERM, previous)
        report["seconds"] = time.monotonic() - started
        write_report(check.folder, report)
    print(f"\n{summary(report)}\n(written to {check.folder / 'summary.md'} and {check.folder / 'check.json'})")
    return report
