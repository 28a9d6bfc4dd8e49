"""bench.py --what=nanogpt: nanoGPT's own train.py against this repository's on one recipe, whole runs. Each round
trains the config once with each, in alternating order, as separate processes on the same prepared data, and takes
each run's training time with evaluation excluded, the way --max_seconds counts it here: this train.py's own figure
(its last line), and for nanoGPT the sum of the times it prints for each step (--log_interval=1) over its first
max_iters steps (it trains one more), where a step that began with an evaluation (and a checkpoint) counts as the
median of the others. The models differ only where nanoGPT's train.py differs from GPT-2 (its bias=False default is
passed as this config's bias; its GELU is erf, its position table's std 0.02): docs/nanogpt.md.

    python bench.py config/speedrun_cpu_baseline.py --what=nanogpt --nanogpt_dir=../nanoGPT --rounds=5
"""

import pickle
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

from benchmarks.common import BenchConfig, figure
from errors import OptionError
from model import GPTConfig
from text.dataset import resolve_data_dir
from text.tokenizer import read_description
from train import TrainConfig

REPO = Path(__file__).resolve().parents[1]
# What nanoGPT's train.py takes from the command line, under the same names here
NANOGPT_SETTINGS = ("eval_interval", "eval_iters", "always_save_checkpoint", "gradient_accumulation_steps",
                    "batch_size", "block_size", "n_layer", "n_head", "n_embd", "dropout", "bias", "learning_rate",
                    "max_iters", "weight_decay", "beta1", "beta2", "grad_clip", "decay_lr", "warmup_iters",
                    "lr_decay_iters", "min_lr", "compile")
# Settings of this repository that nanoGPT's train.py has no way to follow: each must be what nanoGPT does (a CPU
# run: the CPU speedrun's baseline)
NANOGPT_ONLY = {"optimizer": "adamw", "lr_schedule": "cosine", "pos_encoding": "learned", "mlp_activation": "gelu",
                "qk_norm": False, "zero_init_proj": False, "logit_softcap": 0.0, "tie_head": True,
                "zero_init_head": False, "value_embeddings": 0, "value_residual": False, "x0_shortcut": False,
                "smear": False, "bigram_embedding": 0, "head_learning_rate": 0.0,
                "random_positions": 0, "position_scaling": "none", "activation_checkpointing": False,
                "init_from": "scratch", "max_seconds": 0.0, "device": "cpu"}
STEP_LINE = re.compile(r"^iter (\d+): loss [-+.\deinfa]+, time ([\d.]+)ms", re.MULTILINE)
DONE_LINE = re.compile(r"^done: \d+ iterations, .*, ([\d.]+) s of training", re.MULTILINE)


def setting(config: TrainConfig, model_config: GPTConfig, name: str) -> object:
    return getattr(config if hasattr(config, name) else model_config, name)


def spread(table: str, row: str, values: list[float], unit: str) -> list[dict]:
    """The figures of one row: median, min and max over the rounds."""
    return [figure(table, row, column, pick(values), unit)
            for column, pick in (("median", statistics.median), ("min", min), ("max", max))]


def check_nanogpt_recipe(config: TrainConfig, model_config: GPTConfig, nanogpt_dir: str) -> None:
    """One line, before anything trains, unless nanoGPT's train.py can train this config as it is."""
    if not (Path(nanogpt_dir) / "train.py").is_file():
        raise OptionError(f"nanogpt_dir={nanogpt_dir!r} has no train.py; give a checkout of karpathy/nanoGPT")
    for name, theirs in NANOGPT_ONLY.items():
        ours = setting(config, model_config, name)
        if ours != theirs:
            raise OptionError(f"{name}={ours!r}: nanoGPT's train.py only trains {name}={theirs!r}; give "
                              f"--{name}={theirs} to time it beside nanoGPT's")
    if config.dtype not in ("auto", "float32"):  # nanoGPT trains in float32 on a CPU, whatever its dtype says
        raise OptionError(f"dtype={config.dtype!r}: nanoGPT's train.py trains in float32 on a CPU; give "
                          "--dtype=float32 to time it beside nanoGPT's")


def nanogpt_folder(work: Path, data_dir: Path, nanogpt_dir: Path) -> None:
    """work/ as nanoGPT's train.py needs its working folder: configurator.py, and data/<name>/ with the prepared
    train.bin and val.bin and a meta.pkl of the characters (without one it would train a 50,304-token model)."""
    description = read_description(data_dir)
    if description["kind"] != "char" or description["dtype"] != "uint16":
        raise OptionError(f"dataset {str(data_dir)!r} holds {description['kind']} tokens as {description['dtype']}; "
                          "--what=nanogpt times a character dataset (uint16), which nanoGPT reads with a meta.pkl")
    chars = description["chars"]
    (work / "data" / data_dir.name).mkdir(parents=True)
    for name in ("train.bin", "val.bin"):
        (work / "data" / data_dir.name / name).symlink_to(data_dir.resolve() / name)
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
    (work / "data" / data_dir.name / "meta.pkl").write_bytes(pickle.dumps(meta))
    (work / "configurator.py").symlink_to(nanogpt_dir.resolve() / "configurator.py")


def nanogpt_step_times(output: str, max_iters: int) -> list[float]:
    """Seconds of each of nanoGPT's first max_iters steps, from the lines its train.py prints (--log_interval=1)."""
    times = {int(step): float(ms) / 1000 for step, ms in STEP_LINE.findall(output)}
    if sorted(times)[:max_iters] != list(range(max_iters)):
        raise RuntimeError(f"nanoGPT's train.py printed steps {sorted(times)[:5]}..., not 0..{max_iters - 1}")
    return [times[i] for i in range(max_iters)]


def nanogpt_seconds(output: str, max_iters: int, eval_interval: int) -> float:
    """nanoGPT's training time from its per-step lines: its first max_iters steps, each that began with an
    evaluation counted as the median of the others."""
    times = nanogpt_step_times(output, max_iters)
    plain = [times[i] for i in range(max_iters) if i % eval_interval]
    typical = statistics.median(plain)
    return sum(plain) + typical * sum(1 for i in range(max_iters) if i % eval_interval == 0)


def our_seconds(output: str) -> float:
    found = DONE_LINE.search(output)
    if not found:
        raise RuntimeError(f"train.py's output has no 'done: ...' line:\n{output[-2000:]}")
    return float(found[1])


def flag_value(value: object) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def train_commands(config: TrainConfig, model_config: GPTConfig, nanogpt_dir: Path, data_dir: Path,
                   work: Path) -> dict[str, list[str]]:
    """The two command lines: nanoGPT's train.py with its settings from this config, and train.py with every
    setting of this config that is not its default (another encoding's would be refused as doing nothing)."""
    ours = [f"--{f.name}={flag_value(getattr(section, f.name))}" for section in (config, model_config)
            for f in fields(section) if f.name not in ("out_dir", "dataset", "progress", "vocab_size")
            and getattr(section, f.name) != f.default]
    theirs = [f"--{name}={flag_value(setting(config, model_config, name))}" for name in NANOGPT_SETTINGS]
    return {"nanoGPT's train.py": [sys.executable, str(nanogpt_dir.resolve() / "train.py"), *theirs,
                                   f"--dataset={data_dir.name}", "--device=cpu", "--dtype=float32",
                                   "--log_interval=1", f"--out_dir={work / 'out-nanogpt'}", "--wandb_log=False"],
            "train.py": [sys.executable, str(REPO / "train.py"), *ours, f"--dataset={data_dir.resolve()}",
                         "--progress=False", f"--out_dir={work / 'out-ours'}", "--overwrite=True"]}


def bench_nanogpt(bench: BenchConfig, config: TrainConfig, model_config: GPTConfig) -> tuple[str, list[dict]]:
    if not bench.nanogpt_dir:
        raise OptionError("--what=nanogpt times nanoGPT's own train.py: give --nanogpt_dir=PATH, a checkout of "
                          "karpathy/nanoGPT")
    check_nanogpt_recipe(config, model_config, bench.nanogpt_dir)
    data_dir, seconds = resolve_data_dir(config.dataset), {}
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        nanogpt_folder(work, data_dir, Path(bench.nanogpt_dir))
        commands = train_commands(config, model_config, Path(bench.nanogpt_dir), data_dir, work)
        for round_number in range(bench.rounds):
            order = list(commands) if round_number % 2 == 0 else list(reversed(commands))
            for name in order:
                print(f"round {round_number + 1} of {bench.rounds}: {name} ...", flush=True)
                done = subprocess.run(commands[name], cwd=work, capture_output=True, text=True)
                if done.returncode:
                    raise RuntimeError(f"{name} exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
                seconds.setdefault(name, []).append(
                    nanogpt_seconds(done.stdout, config.max_iters, config.eval_interval) if name != "train.py"
                    else our_seconds(done.stdout))
    table = f"whole runs, {config.max_iters} steps, training s (evaluation excluded), over {bench.rounds} rounds"
    ratios = [ours / theirs for ours, theirs in zip(seconds["train.py"], seconds["nanoGPT's train.py"],
                                                     strict=True)]
    figures = [f for name, values in seconds.items() for f in spread(table, name, values, "s")]
    figures += spread(table, "train.py / nanoGPT's, round by round", ratios, "x")
    header = (f"nanoGPT's train.py ({bench.nanogpt_dir}) against train.py: {config.max_iters} steps of batch "
              f"{config.batch_size} x {model_config.block_size}, {model_config.n_layer} layers x "
              f"{model_config.n_embd}, on {data_dir}, alternating over {bench.rounds} rounds")
    return header, figures
