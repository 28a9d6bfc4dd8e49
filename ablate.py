"""Controlled studies: train every cell of a grid under the same seeds, batches, initialisation and budget, then
evaluate every final model the same way and compare the cells seed by seed.
    python ablate.py config/ablate_positions.py
    python ablate.py config/ablate_positions.py --variants=learned,none --seeds=2 --max_iters=500

Cells. --variants lists cells; a cell is a pos_encoding value ("rope"), or name=value settings of any
GPTConfig/TrainConfig field separated by spaces ("pos_encoding=sinusoidal sinusoidal_amplitude=1.0", or
"sinusoidal sinusoidal_amplitude=1.0"). --grid adds the cross product "name=v1,v2;name2=v3,v4" (";" between fields,
"," between values). A cell's settings override the config file and flags; everything else is the same for all.

Each (cell, seed) run trains in this process with train.train() into <study_dir>/<cell>/seed<N>/ and leaves
there its checkpoints, train.log, done.json (the training record with every setting that changes the numbers) and
eval.json (the evaluation). A rerun reuses finished runs, refuses one made with other settings, and restarts
unfinished ones from scratch; runs go seed by seed, so a study cut short still has whole seeds for every cell.

Evaluation of every final model (ckpt.pt) on the whole val split, at each length L in eval_multipliers:
  nonoverlapping  the split cut into consecutive windows of L tokens; every token scored once, with the tokens
                  before it in its window as context (the protocol of Press et al.)
  sliding         the same windows, but no token sees more than sliding_window tokens (itself included): the
                  windows are scored in pieces of sliding_window tokens that advance by sliding_stride
The results (results.md, .csv, .json and the plots) go to <study_dir>.
"""

import contextlib
import csv
import io
import itertools
import json
import math
import re
import shutil
import signal
import sys
import threading
import time
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

import ablate_plots
from checkpoint import load_checkpoint, read_checkpoint
from dataset import load_split, resolve_data_dir
from devices import autocast_context, choose_device, choose_dtype
from errors import OptionError, UserError, main_guard
from files import atomic_files
from model import GPT, GPTConfig
from options import _convert, parse_options
from paired_stats import CONFIDENCE, holm, interval, paired
from positions import encoding_of
from tokenizer import read_description
from train import TrainConfig, build_model, train

# Set by the study for each run: a run starts from scratch in its own folder and keeps its final checkpoint.
PER_RUN = ("vocab_size", "seed", "out_dir", "init_from", "eval_only", "overwrite", "always_save_checkpoint")
NEUTRAL = ("progress", "out_dir", "wandb_log", "wandb_project", "wandb_run_name", "wandb_mode")  # change no number
PROTOCOLS = ("nonoverlapping", "sliding")
CHECKPOINT = "ckpt.pt"  # the final model of each run (see the module docstring)

# The cells of README's study; the other registered encodings (positions.POS_ENCODINGS: t5) join with --variants.
STUDY_CELLS = ("learned", "sinusoidal", "rope", "alibi", "none")


@dataclass
class AblateConfig:
    study_dir: str = "out-ablate"  # study folder: one sub-folder per run (<cell>/seed<N>) and the results
    variants: list[str] = field(default_factory=lambda: list(STUDY_CELLS))  # cells: "rope", "name=value name=value"
    grid: str = ""  # more cells, the cross product of "name=v1,v2;name2=v3,v4"; added after variants
    seeds: int = 5  # runs per cell, seeded first_seed, first_seed+1, ...
    first_seed: int = 1337  # seed of each cell's first run: initialisation and batch order
    eval_multipliers: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0])  # eval lengths / block_size
    protocols: list[str] = field(default_factory=lambda: list(PROTOCOLS))  # nonoverlapping | sliding
    sliding_window: int = 0  # most tokens a sliding-window forward holds (context + the token); 0: block_size
    sliding_stride: int = 0  # tokens a sliding window advances (scored per piece); 0: a quarter of the window
    eval_batch_size: int = 64  # windows per forward pass in the evaluation
    reference: str = ""  # the cell that the paired-difference plot compares every other cell to; "": the first
    threads: int = 0  # torch CPU threads; 0: torch's default. 1 is faster when other jobs share a small CPU

    def __post_init__(self) -> None:
        unknown = [p for p in self.protocols if p not in PROTOCOLS]
        if unknown or not self.protocols:
            raise ValueError(f"protocols={self.protocols} must be values among {PROTOCOLS}")
        if self.threads < 0 or self.sliding_window < 0 or self.sliding_stride < 0:
            raise ValueError(f"threads={self.threads}, sliding_window={self.sliding_window} and sliding_stride="
                             f"{self.sliding_stride} must be >= 0 (0: the default)")
        if self.seeds < 1 or self.eval_batch_size < 1:
            raise ValueError(f"seeds={self.seeds} and eval_batch_size={self.eval_batch_size} must be at least 1")
        if not self.eval_multipliers or min(self.eval_multipliers) <= 0:
            raise ValueError(f"eval_multipliers={self.eval_multipliers} must be positive numbers")
        if not self.variants and not self.grid:
            raise ValueError("no cells to compare: give --variants=learned,none or --grid=name=v1,v2")


# ---------------------------------------------------------------------------------------------------- cells


def field_types() -> dict[str, tuple[type, object]]:
    """Every setting a cell may change: {name: (its dataclass, its type hint)}."""
    types_ = {}
    for section in (TrainConfig, GPTConfig):
        hints = typing.get_type_hints(section)
        types_.update({f.name: (section, hints[f.name]) for f in fields(section) if f.name not in PER_RUN})
    return types_


def parse_setting(text: str) -> tuple[str, object]:
    """"name=value" as (name, typed value); a bare word is a pos_encoding value."""
    name, has_value, value = text.partition("=")
    if not has_value:
        name, value = "pos_encoding", text
    known = field_types()
    if name not in known:
        raise OptionError(f"cell setting {text!r}: {name!r} is not a GPTConfig/TrainConfig field (or is set per "
                          f"run: {', '.join(PER_RUN)}); see python train.py --help")
    return name, _convert(name, value, known[name][1])


def study_cells(ablate: AblateConfig) -> list[dict[str, object]]:
    """The cells to compare, in order: --variants, then the --grid cross product. Each is {field: value}."""
    cells = [dict(parse_setting(part) for part in variant.split()) for variant in ablate.variants]
    axes = []
    for part in filter(None, (p.strip() for p in ablate.grid.split(";"))):
        name, has_values, values = part.partition("=")
        if not has_values or not values:
            raise OptionError(f"grid part {part!r} must look like name=v1,v2")
        axes.append([parse_setting(f"{name.strip()}={v.strip()}") for v in values.split(",")])
    cells += [dict(combination) for combination in itertools.product(*axes)] if axes else []
    names = [cell_name(c) for c in cells]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise OptionError(f"cells {repeated} are listed more than once; list each cell once")
    return cells


def cell_name(cell: dict[str, object]) -> str:
    """"sinusoidal sinusoidal_amplitude=1.0": the pos_encoding first, bare, then the other settings."""
    parts = [str(cell["pos_encoding"])] if "pos_encoding" in cell else []
    return " ".join(parts + [f"{k}={v}" for k, v in cell.items() if k != "pos_encoding"]) or "base"


def cell_dir(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", name)


def run_plan(ablate: AblateConfig, train_config: TrainConfig, model_config: GPTConfig) -> list[dict]:
    """One entry per (cell, seed), seed by seed: everything identical except the cell's settings, seed, out_dir."""
    cells = study_cells(ablate)
    configs = []
    for cell in cells:
        overrides = {s: {k: v for k, v in cell.items() if field_types()[k][0] is s} for s in (TrainConfig, GPTConfig)}
        configs.append((cell_name(cell), replace(train_config, **overrides[TrainConfig]),
                        replace(model_config, **overrides[GPTConfig])))
    plan = []
    for seed in range(ablate.first_seed, ablate.first_seed + ablate.seeds):
        for name, cell_train, cell_model in configs:
            run_dir = Path(ablate.study_dir) / cell_dir(name) / f"seed{seed}"
            plan.append({"variant": name, "seed": seed, "dir": run_dir, "model_config": cell_model,
                         "train_config": replace(cell_train, out_dir=str(run_dir), seed=seed, progress=False,
                                                 init_from="scratch", eval_only=False, overwrite=False,
                                                 always_save_checkpoint=True)})
    return plan


def initial_model(run: dict) -> GPT:
    """The model a run starts from, rebuilt exactly as train() builds it (same seed, same code path)."""
    description = read_description(resolve_data_dir(run["train_config"].dataset))
    torch.manual_seed(run["seed"])
    model, _ = build_model(run["train_config"], replace(run["model_config"]), description)
    return model


# ---------------------------------------------------------------------------------------------------- training


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside path, then rename: a reader never sees half a file."""
    with atomic_files(path) as (temp,):
        temp.write_text(text)


def settings(run: dict) -> dict:
    """Everything that changes a run's numbers: both configs (less NEUTRAL fields) and the data's description."""
    description = read_description(resolve_data_dir(run["train_config"].dataset))
    return {"train_config": {k: v for k, v in asdict(run["train_config"]).items() if k not in NEUTRAL},
            "model_config": asdict(run["model_config"]), "data": description}


def changed_settings(stored: dict, current: dict) -> list[str]:
    """Settings that differ, or that the stored run does not record (made by older code: its value is unknown)."""
    missing = object()
    return sorted(name for section in current for name, value in current[section].items()
                  if stored.get(section, {}).get(name, missing) != value)


def latest_logged(metrics_file: Path) -> tuple[int, float | None]:
    """(step, train loss) of the last train line of a run's metrics.jsonl; (0, None) before the first."""
    if not metrics_file.exists():
        return 0, None
    for line in reversed(metrics_file.read_text().splitlines()):
        with contextlib.suppress(json.JSONDecodeError):  # a line still being written
            record = json.loads(line)
            if "train_loss" in record:
                return record["iter"], record["train_loss"]
    return 0, None


def follow(metrics_file: Path, bar: tqdm, start: int, stop: threading.Event) -> None:
    """Move the study's bar with the run's logged steps: train() runs with its own bar off, so one bar remains."""
    shown = -1
    while not stop.wait(0.5):
        step, loss = latest_logged(metrics_file)
        if step != shown:  # redraw only on news: a log file of the bar stays small
            shown, bar.n = step, start + step
            bar.set_postfix_str(f"step {step}" + (f", loss {loss:.3f}" if loss is not None else ""))


def train_run(run: dict, bar: tqdm, start: int) -> tuple[dict | None, int]:
    """Train one run (or read back its done.json): (its record, 0), or (None, the signal) when Ctrl-C or SIGTERM
    stopped it."""
    done_file = run["dir"] / "done.json"
    if done_file.exists():
        record = json.loads(done_file.read_text())
        changed = changed_settings(record["settings"], settings(run))
        if changed:
            raise UserError(f"{run['dir']} was trained with other settings or older code ({', '.join(changed)}); "
                            "delete it or choose another --study_dir")
        return record, 0
    shutil.rmtree(run["dir"], ignore_errors=True)  # an unfinished run starts again from scratch
    run["dir"].mkdir(parents=True)
    stop = threading.Event()
    watcher = threading.Thread(target=follow, args=(run["dir"] / "metrics.jsonl", bar, start, stop), daemon=True)
    watcher.start()
    try:
        # train() prints its eval lines; they go to the run's train.log so that the terminal keeps one bar.
        with (run["dir"] / "train.log").open("w") as log, contextlib.redirect_stdout(log):
            result = train(run["train_config"], replace(run["model_config"]))
    finally:
        stop.set()
        watcher.join()
    if result["interrupted"]:
        return None, result["interrupted"]
    record = {"variant": run["variant"], "seed": run["seed"], "parameters": result["model"].get_num_params(),
              "iter_num": result["iter_num"], "final_val_estimate": result["evals"][-1]["val_loss"],
              "tokens_per_sec": result["tokens_per_sec"], "train_seconds": result["train_seconds"],
              "evals": result["evals"], "train_losses": result["train_losses"], "settings": settings(run)}
    write_atomic(done_file, json.dumps(record, indent=1))
    return record, 0


# ---------------------------------------------------------------------------------------------------- evaluation


def eval_lengths(block_size: int, multipliers: list[float]) -> list[int]:
    return sorted({max(1, round(m * block_size)) for m in multipliers})


def forward_pieces(n_targets: int, length: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """How the protocols cut the val split: (start, size, scored_from) for each forward pass.

    The n_targets targets are cut into consecutive windows of `length` (the last one shorter). A window of at
    most `window` tokens is one forward; a longer one goes through pieces of `window` tokens advancing by
    `stride`: the first piece scores all its tokens, each later one the tokens past the previous piece's end.
    Tokens start+scored_from .. start+size-1 are scored by the piece, each exactly once.
    """
    pieces = []
    for window_start in range(0, n_targets, length):
        size = min(length, n_targets - window_start)
        if size <= window:
            pieces.append((window_start, size, 0))
            continue
        starts = [*range(0, size - window, stride), size - window]
        ends = [s + window for s in starts]
        pieces += [(window_start + s, window, 0 if i == 0 else ends[i - 1] - s) for i, s in enumerate(starts)]
    return pieces


def token_losses(losses_of: Callable, data: np.ndarray, length: int, window: int, stride: int,
                 batch_size: int) -> np.ndarray:
    """The loss of every val target data[1:], scored as forward_pieces says; losses_of(x, y) -> (B, T) losses."""
    n_targets = len(data) - 1
    out = np.full(n_targets, np.nan)
    pieces = np.array(forward_pieces(n_targets, length, window, stride), dtype=np.int64)
    tokens = torch.from_numpy(np.asarray(data, dtype=np.int64))
    for size in np.unique(pieces[:, 1]):
        same = pieces[pieces[:, 1] == size]
        for batch in np.array_split(same, math.ceil(len(same) / batch_size)):
            index = torch.from_numpy(batch[:, :1] + np.arange(size)[None, :])
            losses = np.asarray(losses_of(tokens[index], tokens[index + 1]), dtype=np.float64)
            scored = np.arange(size)[None, :] >= batch[:, 2:3]
            out[index.numpy()[scored]] = losses[scored]
    assert not np.isnan(out).any(), "a val token was not scored"  # forward_pieces covers every target
    return out


def by_position(losses: np.ndarray, length: int) -> list[float]:
    """Mean loss at each position 0..length-1 of the windows (targets i sit at position i % length)."""
    positions = np.arange(len(losses)) % length
    return (np.bincount(positions, losses, minlength=length) / np.bincount(positions, minlength=length)).tolist()


def model_losses(model: GPT, device: torch.device, dtype: torch.dtype) -> Callable:
    @torch.no_grad()
    def losses_of(x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
        with autocast_context(device, dtype):
            logits, _ = model(x.to(device))  # uncached forward over the whole piece
        return F.cross_entropy(logits.float().transpose(1, 2), y.to(device), reduction="none").cpu().numpy()

    return losses_of


def sliding_geometry(ablate: AblateConfig, block_size: int) -> tuple[int, int]:
    """The sliding protocol's window and stride: by default block_size, and a quarter of the window."""
    window = ablate.sliding_window or block_size
    return window, ablate.sliding_stride or max(1, window // 4)


def protocol_window(protocol: str, length: int, window: int) -> int:
    return length if protocol == "nonoverlapping" else min(window, length)


def evaluate_model(model: GPT, val: np.ndarray, lengths: list[int], ablate: AblateConfig, device: torch.device,
                   dtype: torch.dtype) -> dict[str, dict[str, dict | None]]:
    """{protocol: {length: {"loss", "per_position"} or None where the model has no positions that far}}."""
    model.eval()
    window, stride = sliding_geometry(ablate, model.config.block_size)
    losses_of = model_losses(model, device, dtype)
    results: dict[str, dict[str, dict | None]] = {}
    for protocol in ablate.protocols:
        results[protocol] = {}
        for length in lengths:
            widest = protocol_window(protocol, length, window)
            if widest > (encoding_of(model.config).max_length() or widest):
                results[protocol][str(length)] = None  # a learned table has block_size rows
                continue
            same = results.get("nonoverlapping", {}).get(str(length)) if widest == length else None
            if same is None:
                losses = token_losses(losses_of, val, length, widest, stride, ablate.eval_batch_size)
                same = {"loss": float(losses.mean()), "per_position": by_position(losses, length)}
            results[protocol][str(length)] = same
    return results


def evaluate_run(run: dict, ablate: AblateConfig) -> dict:
    """The run's final model on the whole val split under each protocol and length; cached in eval.json."""
    block_size = run["model_config"].block_size
    lengths = eval_lengths(block_size, ablate.eval_multipliers)
    window, stride = sliding_geometry(ablate, block_size)
    key = {"checkpoint": CHECKPOINT, "lengths": lengths, "protocols": ablate.protocols, "window": window,
           "stride": stride}
    eval_file = run["dir"] / "eval.json"
    if eval_file.exists():
        cached = json.loads(eval_file.read_text())
        if cached["key"] == key:
            return cached
    device = choose_device(run["train_config"].device)
    dtype = choose_dtype(run["train_config"].dtype, device)
    model = read_checkpoint(run["dir"] / CHECKPOINT)[0].to(device)
    val = load_split(resolve_data_dir(run["train_config"].dataset), "val", max(lengths))
    started = time.perf_counter()
    protocols = evaluate_model(model, val, lengths, ablate, device, dtype)
    result = {"key": key, "tokens": len(val) - 1, "seconds": time.perf_counter() - started, "protocols": protocols}
    write_atomic(eval_file, json.dumps(result))
    return result


# ---------------------------------------------------------------------------------------------------- statistics


def seed_values(records: list[dict], variant: str, protocol: str, length: int) -> dict[int, float] | None:
    """{seed: loss} of a cell under one protocol and length; None when the cell cannot run it."""
    entries = ablate_plots.seed_entries(records, variant, protocol, length)
    return None if entries is None else {seed: entry["loss"] for seed, entry in entries.items()}


def comparisons(records: list[dict], pairs: list[tuple], lengths: list[int]) -> list[dict]:
    """Paired differences for pairs of (cell, protocol) at each length, with Holm's correction per length."""
    rows = []
    for length in lengths:
        found = []
        for (a, pa), (b, pb) in pairs:
            va, vb = seed_values(records, a, pa, length), seed_values(records, b, pb, length)
            if va is None or vb is None:
                continue
            seeds = sorted(set(va) & set(vb))
            found.append({"a": a, "a_protocol": pa, "b": b, "b_protocol": pb, "length": length,
                          **paired([va[s] for s in seeds], [vb[s] for s in seeds])})
        for row, rejected in zip(found, holm([r["p"] for r in found]), strict=True):
            row["significant"] = bool(row["low"] > 0 or row["high"] < 0)
            row["holm"] = rejected
        rows += found
    return rows


def summarize(records: list[dict], lengths: list[int], protocols: list[str]) -> list[dict]:
    """One row per cell: mean and interval over its seeds at each protocol and length."""
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in records):
        runs = [r for r in records if r["variant"] == variant]
        row = {"variant": variant, "seeds": [r["seed"] for r in runs], "parameters": runs[0]["parameters"],
               "steps": float(np.mean([r["iter_num"] for r in runs])),
               "train_seconds": interval([r["train_seconds"] for r in runs]),
               "tokens_per_sec": interval([r["tokens_per_sec"] for r in runs]), "loss": {}}
        for protocol in protocols:
            for n in lengths:
                values = seed_values(records, variant, protocol, n)
                row["loss"][f"{protocol} {n}"] = None if values is None else interval(list(values.values()))
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------------- results


def fmt(value: tuple[float, float] | None, digits: int = 4) -> str:
    """"mean ± half-width of the interval"; n/a where a cell cannot run."""
    if value is None:
        return "n/a"
    mean, half = value
    return f"{mean:,.{digits}f}" if math.isnan(half) else f"{mean:,.{digits}f} ± {half:,.{digits}f}"


def length_label(n: int, block_size: int) -> str:
    return f"L={n} ({n / block_size:g}x)"


def markdown_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(cells) + " |" for cells in [columns, ["---"] * len(columns), *rows]]


def comparison_table(rows: list[dict], block_size: int) -> list[str]:
    def side(name: str, protocol: str, other: str) -> str:
        return f"{name} ({protocol})" if protocol != other else name

    cells = [[length_label(r["length"], block_size), side(r["a"], r["a_protocol"], r["b_protocol"]),
              side(r["b"], r["b_protocol"], r["a_protocol"]), f"{r['mean']:+.4f}",
              f"[{r['low']:+.4f}, {r['high']:+.4f}]", f"{r['p']:.2g}", f"{r['a_wins']}/{r['b_wins']}",
              "**yes**" if r["significant"] else "no", "**yes**" if r["holm"] else "no"] for r in rows]
    columns = ["length", "a", "b", "mean a − b", f"{CONFIDENCE:.0%} CI", "p (paired t)", "seeds a/b lower",
               "CI excludes 0", "after Holm"]
    return markdown_table(columns, cells)


def study_comparisons(records: list[dict], cells: list[str], lengths: list[int], ablate: AblateConfig,
                      block_size: int) -> dict[str, list[dict]]:
    """The families of paired tests the results report; Holm's correction applies within each (and length)."""
    between = list(itertools.combinations(cells, 2))
    families = {"training length": comparisons(records, [((a, "nonoverlapping"), (b, "nonoverlapping"))
                                                         for a, b in between], [block_size])}
    longer = [n for n in lengths if n > block_size]
    if "sliding" in ablate.protocols and "nonoverlapping" in ablate.protocols:
        families["extrapolation against the sliding window"] = comparisons(
            records, [((c, "nonoverlapping"), (c, "sliding")) for c in cells], longer)
    for protocol in ablate.protocols:
        families[f"longer, {protocol}"] = comparisons(records, [((a, protocol), (b, protocol)) for a, b in between],
                                                      longer)
    return families


FAMILY_NOTES = {
    "training length": "Every pair of cells at L = block_size, non-overlapping windows (the headline).",
    "extrapolation against the sliding window": "Each cell's own final model: the whole window as context "
    "(non-overlapping) minus at most the sliding window. Negative: looking further back than it was trained "
    "to helps; positive: it hurts, and the sliding window is the better way to use that model on long text.",
    "longer, nonoverlapping": "Pairs of cells past the training length, non-overlapping windows.",
    "longer, sliding": "Pairs of cells past the training length, sliding window.",
}


def header_lines(ablate: AblateConfig, plan: list[dict], records: list[dict]) -> list[str]:
    first, model_config = plan[0]["train_config"], plan[0]["model_config"]
    window, stride = sliding_geometry(ablate, model_config.block_size)
    budget = f"{first.max_iters} steps" + (f" or {first.max_seconds:g} s of training" if first.max_seconds else "")
    train_minutes = sum(r["train_seconds"] for r in records) / 60
    eval_minutes = sum(r["eval"]["seconds"] for r in records) / 60
    seeds = sorted({r["seed"] for r in records})
    lines = [
        f"# Study: {', '.join(dict.fromkeys(r['variant'] for r in plan))}", "",
        f"Dataset `{first.dataset}` ({records[0]['eval']['tokens']:,} val tokens); n_layer {model_config.n_layer}, "
        f"n_head {model_config.n_head}, n_embd {model_config.n_embd}, block_size {model_config.block_size}, batch "
        f"{first.batch_size}, learning rate {first.learning_rate:g}; budget {budget} per run; seeds "
        f"{seeds[0]}..{seeds[-1]} for every cell (one seed gives every cell the same initialisation of the shared "
        f"weights and the same batches). Compute: {train_minutes:.1f} min of training and {eval_minutes:.1f} min of "
        f"evaluation in all, {torch.get_num_threads()} torch thread(s).", "",
        f"Each number is the mean over {len(seeds)} seed(s) ± the half-width of its {CONFIDENCE:.0%} t confidence "
        f"interval. Every run's **final** model ({CHECKPOINT}) is scored on the **whole** val split at each length L"
        + (": *nonoverlapping*: consecutive windows of L tokens, every token scored once with the tokens before it "
           "in its window as context" if "nonoverlapping" in ablate.protocols else "")
        + (f"; *sliding*: the same windows, but no forward pass holds more than {window} tokens (pieces advance by "
           f"{stride}, so a token past position {window} has {window - stride}..{window - 1} tokens of context). "
           "At L = block_size both are the same number, the headline val loss" if "sliding" in ablate.protocols
           else "") + ".",
    ]
    if any(entry is None for r in records for by_length in r["eval"]["protocols"].values()
           for entry in by_length.values()):
        lines += ["", "n/a: a learned table has no rows past block_size."]
    return lines


def write_results(study_dir: Path, rows: list[dict], families: dict[str, list[dict]], records: list[dict],
                  lengths: list[int], header: list[str], study: dict, plots: list[str]) -> None:
    block_size = study["block_size"]
    keys = [k for k in rows[0]["loss"] if not (k.startswith("sliding") and int(k.split()[1]) <= study["window"])]
    columns = ["cell", "parameters", "steps", "train s/run"] + [
        f"{k.split()[0]} {length_label(int(k.split()[1]), block_size)}" for k in keys]
    table = [[row["variant"], f"{row['parameters']:,}", f"{row['steps']:g}", f"{row['train_seconds'][0]:.0f}"]
             + [fmt(row["loss"][k]) for k in keys] for row in rows]
    lines = header + ["", *markdown_table(columns, table)]
    for family, found in families.items():
        if found:
            lines += ["", f"## Paired differences: {family}", "", FAMILY_NOTES[family], "",
                      *comparison_table(found, block_size)]
    lines += ["", f"Paired: seed s of one cell against seed s of the other. p: two-sided paired t test. *CI excludes "
              f"0*: significant at {1 - CONFIDENCE:.0%} on its own; *after Holm*: still significant when the whole "
              "table at that length is corrected for multiple comparisons (Holm 1979).", ""]
    lines += [f"![{name}]({name}.png)" for name in plots]
    write_atomic(study_dir / "results.md", "\n".join(lines) + "\n")

    table_csv = io.StringIO()
    writer = csv.writer(table_csv)
    writer.writerow(["cell", "protocol", "length", "mean", "ci_half_width", "seeds", "parameters", "steps"])
    for row in rows:
        for k, value in row["loss"].items():
            protocol, n = k.split()
            writer.writerow([row["variant"], protocol, n, *(("n/a", "n/a") if value is None else value),
                             len(row["seeds"]), row["parameters"], row["steps"]])
    write_atomic(study_dir / "results.csv", table_csv.getvalue())
    runs = [{k: v for k, v in r.items() if k != "settings"} for r in records]
    write_atomic(study_dir / "results.json", json.dumps(
        {**study, "summary": rows, "comparisons": families, "runs": runs}, indent=1))


def position_tables(plan: list[dict]) -> dict | None:
    """The learned position table of the first learned run, at initialisation and at the end."""
    learned = next((run for run in plan if run["model_config"].pos_encoding == "learned"), None)
    if learned is None:
        return None
    final = load_checkpoint(learned["dir"] / CHECKPOINT)
    return {"cell": learned["variant"], "seed": learned["seed"], "tables": {
        "at initialisation (step 0)": initial_model(learned).input_layer.wpe.detach().float(),
        f"after training (step {final['iter_num']})": final["model"]["input_layer.wpe"].float()}}


def train_and_evaluate(plan: list[dict], ablate: AblateConfig, max_iters: int, show: bool) -> tuple[list[dict], int]:
    """Every run's record with its evaluation, in plan order, and 0; or ([], the signal) when one stopped it."""
    records = []
    bar = tqdm(total=len(plan) * max_iters, unit="step", dynamic_ncols=True, disable=not show)
    for i, run in enumerate(plan):
        start = i * max_iters
        bar.set_description(f"run {i + 1}/{len(plan)}: {run['variant']}, seed {run['seed']}")
        record, stopped_by = train_run(run, bar, start)
        if record is None:
            bar.close()
            print(f"interrupted: {run['dir']} is unfinished and will start again on the next run of ablate.py")
            return [], stopped_by
        bar.n = start + max_iters  # a time budget can end a run early
        bar.set_postfix_str("evaluating")
        record["eval"] = evaluate_run(run, ablate)
        records.append(record)
    bar.close()
    return records, 0


def run_study(ablate: AblateConfig, train_config: TrainConfig, model_config: GPTConfig) -> dict:
    """Train, evaluate, compare, tabulate and plot; the results' dict, or {"interrupted": the signal} when Ctrl-C
    or SIGTERM stopped it."""
    started = time.perf_counter()
    if ablate.threads:
        torch.set_num_threads(ablate.threads)
    study_dir = Path(ablate.study_dir)
    plan = run_plan(ablate, train_config, model_config)
    cells = list(dict.fromkeys(run["variant"] for run in plan))
    if ablate.reference and ablate.reference not in cells:
        raise OptionError(f"reference={ablate.reference!r} is not one of the cells {cells}")
    if len({run["model_config"].block_size for run in plan}) > 1:
        raise OptionError("cells differ in block_size; the eval lengths are multiples of one block_size")
    study_dir.mkdir(parents=True, exist_ok=True)
    records, stopped_by = train_and_evaluate(plan, ablate, train_config.max_iters, train_config.progress)
    if stopped_by:
        return {"interrupted": stopped_by}
    block_size = model_config.block_size
    lengths = eval_lengths(block_size, ablate.eval_multipliers)
    rows = summarize(records, lengths, ablate.protocols)
    families = study_comparisons(records, cells, lengths, ablate, block_size)
    study = {"ablate_config": asdict(ablate), "lengths": lengths, "block_size": block_size,
             "window": sliding_geometry(ablate, block_size)[0], "checkpoint": CHECKPOINT, "confidence": CONFIDENCE,
             "invocation_seconds": time.perf_counter() - started}
    plots = ablate_plots.plot_all(study_dir, rows, records, families, study, position_tables(plan),
                                  ablate.reference or cells[0])
    write_results(study_dir, rows, families, records, lengths, header_lines(ablate, plan, records), study,
                  plots)
    return {**study, "summary": rows, "comparisons": families, "runs": records, "interrupted": 0}


def main(argv: list[str]) -> None:
    ablate, train_config, model_config = parse_options(argv, (AblateConfig, TrainConfig, GPTConfig), prog="ablate.py",
                                                       description=__doc__, skip=PER_RUN)
    received = []

    def stop(signum: int, frame) -> None:
        received.append(signum)
        raise KeyboardInterrupt  # out of the evaluation; train() handles the signals itself while it runs

    signal.signal(signal.SIGTERM, stop)
    try:
        result = run_study(ablate, train_config, model_config)
    except KeyboardInterrupt:
        result = {"interrupted": received[0] if received else signal.SIGINT}
        print("interrupted: finished runs are kept; run the same command again to continue", file=sys.stderr)
    if result["interrupted"]:
        sys.exit(128 + result["interrupted"])
    print(f"done in {result['invocation_seconds']:.0f} s: {Path(ablate.study_dir) / 'results.md'}")
    print((Path(ablate.study_dir) / "results.md").read_text())


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
