"""Position-encoding study: train every pos_encoding variant under the same seeds, data, batches and budget, then
compare them at, below and beyond the training context length.
    python ablate.py config/ablate_shakespeare_char.py
    python ablate.py config/ablate_shakespeare_char.py --variants=learned,none --seeds=2 --max_iters=500

Each (variant, seed) run trains in this process with train.train() into <study_dir>/<variant>/seed<N>/, and
leaves there its checkpoints, train.log, done.json (training results) and eval.json (evaluation). A rerun skips
finished runs and restarts unfinished ones from scratch. Every run is evaluated from its final checkpoint
(ckpt.pt): the same step count for every variant, and no selection on the val windows being measured.
The results (results.md, .csv, .json and the plots) go to <study_dir>.
"""

import contextlib
import csv
import json
import math
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from checkpoint import load_checkpoint, model_from_checkpoint
from dataset import get_batch, load_split, resolve_data_dir, sample_offsets
from devices import autocast_context, choose_device, choose_dtype
from model import GPT, POS_ENCODINGS, GPTConfig
from options import UserError, main_guard, parse_options
from tokenizer import read_description
from train import TrainConfig, build_model, train

# Set per run by the study, not by the user (init_from and eval_only would make runs that are not comparable).
SKIP = ("vocab_size", "pos_encoding", "seed", "out_dir", "init_from", "eval_only")
CHECKPOINT = "ckpt.pt"  # the final model of each run (see the module docstring)
MULTIPLIERS = (0.25, 0.5, 1.0, 1.5, 2.0, 4.0)  # eval context lengths in units of block_size
COLORS = {"learned": "tab:blue", "sinusoidal": "tab:orange", "rope": "tab:red", "alibi": "tab:purple",
          "none": "tab:green"}


@dataclass
class AblateConfig:
    study_dir: str = "out-ablate"  # study folder: one sub-folder per run (<variant>/seed<N>) and the results
    variants: list[str] = field(default_factory=lambda: list(POS_ENCODINGS))  # pos_encoding values to compare
    seeds: int = 3  # runs per variant, seeded first_seed, first_seed+1, ...
    first_seed: int = 1337  # seed of each variant's first run: initialisation, batch order, eval batches
    eval_multipliers: list[float] = field(default_factory=lambda: list(MULTIPLIERS))  # eval lengths / block_size
    eval_windows: int = 256  # val windows per eval length; shorter lengths use prefixes of the same windows
    eval_batch_size: int = 32  # windows per forward pass in the evaluation
    eval_seed: int = 0  # seeds the choice of val windows, the same for every variant and seed
    threads: int = 0  # torch CPU threads; 0: torch's default. 1 is faster when other jobs share a small CPU

    def __post_init__(self) -> None:
        unknown = [v for v in self.variants if v not in POS_ENCODINGS]
        if unknown or not self.variants or len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants={self.variants} must be distinct values among {POS_ENCODINGS}")
        if self.threads < 0:
            raise ValueError(f"threads={self.threads} must be >= 0 (0: torch's default)")
        if self.seeds < 1 or self.eval_windows < 1 or self.eval_batch_size < 1:
            raise ValueError(f"seeds={self.seeds}, eval_windows={self.eval_windows} and eval_batch_size="
                             f"{self.eval_batch_size} must be at least 1")
        if not self.eval_multipliers or min(self.eval_multipliers) <= 0:
            raise ValueError(f"eval_multipliers={self.eval_multipliers} must be positive numbers")


def eval_lengths(block_size: int, multipliers: list[float]) -> list[int]:
    return sorted({max(1, round(m * block_size)) for m in multipliers})


def can_run(pos_encoding: str, block_size: int, length: int) -> bool:
    """A learned table has rows for positions 0..block_size-1 only; the other encodings have no cap."""
    return pos_encoding != "learned" or length <= block_size


def run_plan(ablate: AblateConfig, train_config: TrainConfig, model_config: GPTConfig) -> list[dict]:
    """One entry per (variant, seed): everything identical except pos_encoding, seed and out_dir."""
    plan = []
    for variant in ablate.variants:
        for seed in range(ablate.first_seed, ablate.first_seed + ablate.seeds):
            run_dir = Path(ablate.study_dir) / variant / f"seed{seed}"
            plan.append({"variant": variant, "seed": seed, "dir": run_dir,
                         "train_config": replace(train_config, out_dir=str(run_dir), seed=seed, progress=False,
                                                 init_from="scratch", eval_only=False),
                         "model_config": replace(model_config, pos_encoding=variant)})
    return plan


def initial_model(run: dict) -> GPT:
    """The model a run starts from, rebuilt exactly as train() builds it (same seed, same code path)."""
    description = read_description(resolve_data_dir(run["train_config"].dataset))
    torch.manual_seed(run["seed"])
    model, _ = build_model(run["train_config"], replace(run["model_config"]), description)
    return model


def settings(run: dict) -> dict:
    # progress and out_dir do not change the numbers; everything else must match to reuse a finished run.
    train_settings = {k: v for k, v in asdict(run["train_config"]).items() if k not in ("progress", "out_dir")}
    return {"train_config": train_settings, "model_config": asdict(run["model_config"])}


def changed_settings(stored: dict, current: dict) -> list[str]:
    """Settings that differ. A field added to the code since the run counts only if it is off its default:
    at the default, it is taken to reproduce the old behaviour."""
    defaults = {"train_config": asdict(TrainConfig()), "model_config": asdict(GPTConfig())}
    return sorted(name for section in current for name, value in current[section].items()
                  if stored[section].get(name, defaults[section].get(name)) != value)


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


def train_run(run: dict, bar: tqdm, start: int) -> dict | None:
    """Train one run (or read back its done.json); its record, or None when interrupted with Ctrl-C."""
    done_file = run["dir"] / "done.json"
    if done_file.exists():
        record = json.loads(done_file.read_text())
        changed = changed_settings(record["settings"], settings(run))
        if changed:
            raise UserError(f"{run['dir']} was trained with other settings ({', '.join(changed)}); delete it or "
                             "choose another --study_dir")
        return record
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
        return None
    record = {"variant": run["variant"], "seed": run["seed"], "parameters": result["model"].get_num_params(),
              "iter_num": result["iter_num"], "best_val_loss": result["best_val_loss"],
              "tokens_per_sec": result["tokens_per_sec"], "train_seconds": result["train_seconds"],
              "evals": result["evals"], "train_losses": result["train_losses"], "settings": settings(run)}
    done_file.write_text(json.dumps(record, indent=1))
    return record


@torch.no_grad()
def evaluate_model(model: GPT, val: np.ndarray, lengths: list[int], ablate: AblateConfig,
                   device: torch.device, dtype: torch.dtype) -> dict[int, list[float] | None]:
    """Mean loss at each position 0..L-1, for every length L the model can take (None for the others).

    The windows start at the same offsets for every length and every model: the length-L windows are the
    first L tokens of the longest ones, so lengths differ only in how much context the model gets.
    """
    model.eval()
    offsets = sample_offsets(len(val), max(lengths), ablate.eval_windows,
                             torch.Generator().manual_seed(ablate.eval_seed))
    per_position: dict[int, list[float] | None] = {}
    for length in lengths:
        if not can_run(model.config.pos_encoding, model.config.block_size, length):
            per_position[length] = None
            continue
        total = torch.zeros(length, dtype=torch.float64)
        for batch in offsets.split(ablate.eval_batch_size):
            x, y = get_batch(val, batch, length, device)
            with autocast_context(device, dtype):
                logits, _ = model(x)  # uncached forward over the whole window
            losses = F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none")  # (B, L)
            total += losses.sum(0).double().cpu()
        per_position[length] = (total / len(offsets)).tolist()
    return per_position


def evaluate_run(run: dict, ablate: AblateConfig) -> dict:
    """The run's final model on the val windows at every eval length; cached in eval.json."""
    block_size = run["model_config"].block_size
    lengths = eval_lengths(block_size, ablate.eval_multipliers)
    key = {"checkpoint": CHECKPOINT, "lengths": lengths, "windows": ablate.eval_windows, "seed": ablate.eval_seed}
    eval_file = run["dir"] / "eval.json"
    if eval_file.exists():
        cached = json.loads(eval_file.read_text())
        if cached["key"] == key:
            return cached
    device = choose_device(run["train_config"].device)
    dtype = choose_dtype(run["train_config"].dtype, device)
    model = model_from_checkpoint(load_checkpoint(run["dir"] / CHECKPOINT)).to(device)
    val = load_split(resolve_data_dir(run["train_config"].dataset), "val", max(lengths))
    per_position = evaluate_model(model, val, lengths, ablate, device, dtype)
    result = {"key": key, "per_position": {str(n): p for n, p in per_position.items()},
              "loss": {str(n): None if p is None else float(np.mean(p)) for n, p in per_position.items()}}
    eval_file.write_text(json.dumps(result))
    return result


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; nan for a single seed)."""
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else math.nan


def summarize(records: list[dict], lengths: list[int]) -> list[dict]:
    """One row per variant: mean and std over its seeds."""
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in records):
        runs = [r for r in records if r["variant"] == variant]
        row = {"variant": variant, "seeds": [r["seed"] for r in runs], "parameters": runs[0]["parameters"],
               "steps": float(np.mean([r["iter_num"] for r in runs])),
               "best_val_loss": mean_std([r["best_val_loss"] for r in runs]),
               "tokens_per_sec": mean_std([r["tokens_per_sec"] for r in runs]), "loss": {}}
        for n in lengths:
            values = [r["eval"]["loss"][str(n)] for r in runs]
            row["loss"][n] = None if None in values else mean_std(values)
        rows.append(row)
    return rows


def fmt(value: tuple[float, float], digits: int = 4) -> str:
    mean, std = value
    spec = f",.{digits}f"
    return f"{mean:{spec}}" if math.isnan(std) else f"{mean:{spec}} ± {std:{spec}}"


def length_label(n: int, block_size: int) -> str:
    return f"L={n} ({n / block_size:g}x)"


def write_results(study_dir: Path, rows: list[dict], records: list[dict], lengths: list[int], block_size: int,
                  header: list[str], study: dict) -> None:
    capped = f"n/a: no position rows past {block_size}"  # learned runs past block_size, by construction
    columns = ["variant", "parameters", "steps", "best val loss", "tokens/s"]
    columns += [f"loss {length_label(n, block_size)}" for n in lengths]
    table = [columns, ["---"] * len(columns)]
    for row in rows:
        cells = [row["variant"], f"{row['parameters']:,}", f"{row['steps']:g}", fmt(row["best_val_loss"]),
                 fmt(row["tokens_per_sec"], 0)]
        cells += [capped if row["loss"][n] is None else fmt(row["loss"][n]) for n in lengths]
        table.append(cells)
    lines = header + ["", *("| " + " | ".join(cells) + " |" for cells in table), ""]
    lines += [f"![{name}]({name}.png)" for name in ("val_loss", "extrapolation", "loss_by_position",
                                                     "position_similarity")]
    (study_dir / "results.md").write_text("\n".join(lines) + "\n")

    with (study_dir / "results.csv").open("w", newline="") as file:
        writer = csv.writer(file)
        names = ["best_val_loss", "tokens_per_sec"] + [f"loss_L{n}" for n in lengths]
        writer.writerow(["variant", "parameters", "steps", "seeds"] + [f"{n}_{s}" for n in names for s in
                                                                         ("mean", "std")])
        for row in rows:
            values = [row["best_val_loss"], row["tokens_per_sec"]] + [row["loss"][n] for n in lengths]
            writer.writerow([row["variant"], row["parameters"], row["steps"], len(row["seeds"])]
                            + [x for v in values for x in (("n/a", "n/a") if v is None else v)])

    summary = [{**row, "loss": {str(n): v for n, v in row["loss"].items()}} for row in rows]
    runs = [{k: v for k, v in r.items() if k != "settings"} for r in records]
    (study_dir / "results.json").write_text(json.dumps({**study, "summary": summary, "runs": runs}, indent=1))


def plot_all(study_dir: Path, rows: list[dict], records: list[dict], lengths: list[int], block_size: int,
             similarity: dict | None) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 12, "axes.titlesize": 13, "figure.titlesize": 15, "legend.fontsize": 11,
                         "axes.grid": True, "grid.alpha": 0.3})
    variants = [row["variant"] for row in rows]
    by_variant = {v: [r for r in records if r["variant"] == v] for v in variants}
    seeds = len(rows[0]["seeds"])
    band = "band: min–max over seeds" if seeds > 1 else "one seed"

    # Validation loss against step: whole run, and the second half zoomed in, where the variants differ.
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    tail_low, tail_high, tail_start = math.inf, -math.inf, 0
    for v, runs in by_variant.items():
        steps = sorted(set.intersection(*(set(e["iter"] for e in r["evals"]) for r in runs)))
        losses = np.array([[next(e["val_loss"] for e in r["evals"] if e["iter"] == s) for s in steps] for r in runs])
        for ax in axes:
            ax.plot(steps, losses.mean(0), color=COLORS[v], marker="o", markersize=3, label=v)
            ax.fill_between(steps, losses.min(0), losses.max(0), color=COLORS[v], alpha=0.25, linewidth=0)
        tail = [i for i, s in enumerate(steps) if s >= max(steps) / 2]
        tail_start = max(tail_start, steps[tail[0]])
        tail_low, tail_high = min(tail_low, losses[:, tail].min()), max(tail_high, losses[:, tail].max())
    margin = 0.05 * (tail_high - tail_low) + 1e-3
    last_step = max(e["iter"] for r in records for e in r["evals"])
    axes[1].set_xlim(tail_start - 0.02 * (last_step - tail_start), last_step + 0.02 * (last_step - tail_start))
    axes[1].set_ylim(tail_low - margin, tail_high + margin)
    axes[0].set_title("Whole run")
    axes[1].set_title("Second half, zoomed in")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.set_ylabel("validation loss (nats/token)")
        ax.legend(title="pos_encoding")
    fig.suptitle(f"Validation loss during training (mean over {seeds} seed(s); {band})")
    fig.tight_layout()
    fig.savefig(study_dir / "val_loss.png", dpi=110)
    plt.close(fig)

    # Loss against eval length; learned stops at block_size.
    fig, ax = plt.subplots(figsize=(9, 6))
    for row in rows:
        ns = [n for n in lengths if row["loss"][n] is not None]
        means = [row["loss"][n][0] for n in ns]
        spread = [0 if math.isnan(row["loss"][n][1]) else row["loss"][n][1] for n in ns]
        ax.errorbar(ns, means, yerr=spread, color=COLORS[row["variant"]], marker="o", capsize=4, label=row["variant"])
    ax.axvline(block_size, color="gray", linestyle="--", label=f"block_size = {block_size} (training length)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [f"{n}\n({n / block_size:g}x)" for n in lengths])
    ax.minorticks_off()
    ax.set_xlabel("eval context length L (tokens)")
    ax.set_ylabel("mean val loss over positions 0..L-1 (nats/token)")
    ax.set_title(f"Loss against context length (final models; error bars: ±1 std over {seeds} seed(s))\n"
                 f"learned has no position rows past {block_size}, so its curve stops there", fontsize=12)
    ax.legend()
    fig.tight_layout()
    fig.savefig(study_dir / "extrapolation.png", dpi=110)
    plt.close(fig)

    # Loss at each position: at the training length, and at the longest length for variants without a cap.
    # Causal models on prefix windows: the first block_size positions of the long curve are the 1x curve.
    longest, smooth = max(lengths), max(1, block_size // 8)
    panels = [(block_size, variants), (longest, [v for v in variants if can_run(v, block_size, longest)])]
    fig, axes = plt.subplots(1, 2, figsize=(16, 6), gridspec_kw={"width_ratios": [2, 3]})
    for ax, (n, shown) in zip(axes, panels, strict=True):
        for v in shown:
            curves = np.array([r["eval"]["per_position"][str(n)] for r in by_variant[v]])
            if n <= block_size:  # few positions: each one readable, with the seed band
                ax.plot(np.arange(n), curves.mean(0), color=COLORS[v], linewidth=1.5, label=v)
                ax.fill_between(np.arange(n), curves.min(0), curves.max(0), color=COLORS[v], alpha=0.2, linewidth=0)
                continue
            # many positions: thin per-position mean, bold moving average (the text of each window is noisy)
            ax.plot(np.arange(n), curves.mean(0), color=COLORS[v], linewidth=0.6, alpha=0.35)
            kernel = np.ones(smooth) / smooth
            centers = np.arange(n - smooth + 1) + (smooth - 1) / 2
            smoothed = np.array([np.convolve(c, kernel, mode="valid") for c in curves])
            ax.plot(centers, smoothed.mean(0), color=COLORS[v], linewidth=2, label=f"{v} ({smooth}-position mean)")
            ax.fill_between(centers, smoothed.min(0), smoothed.max(0), color=COLORS[v], alpha=0.2, linewidth=0)
        if n > block_size:
            ax.axvline(block_size - 0.5, color="gray", linestyle="--", label=f"block_size = {block_size}")
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_xlabel("position in the window (tokens of context before it)")
        ax.set_ylabel("mean val loss (nats/token)")
        capped = [v for v in variants if v not in shown]
        ax.set_title(f"L = {n} ({n / block_size:g}x block_size)"
                     + (f"; not shown: {', '.join(capped)} (no positions past {block_size})" if capped else ""))
        if shown:
            ax.legend()
        else:
            ax.text(0.5, 0.5, "no variant can run this long", transform=ax.transAxes, ha="center")
    fig.suptitle(f"Loss at each position of the val windows (mean over {seeds} seed(s); {band})")
    fig.tight_layout()
    fig.savefig(study_dir / "loss_by_position.png", dpi=110)
    plt.close(fig)

    # Cosine similarity of the learned position rows, before and after training.
    if similarity is not None:
        fig, axes = plt.subplots(1, 2, figsize=(13, 6), layout="constrained")
        for ax, (title, table) in zip(axes, similarity["tables"].items(), strict=True):
            rows_ = F.normalize(table, dim=1)
            image = ax.imshow((rows_ @ rows_.T).numpy(), cmap="RdBu_r", vmin=-1, vmax=1, origin="upper")
            ax.grid(False)  # grid lines would read as structure in the heatmap
            ax.set_title(title)
            ax.set_xlabel("position j")
            ax.set_ylabel("position i")
        fig.colorbar(image, ax=axes, shrink=0.8, label="cosine similarity of rows i and j")
        fig.suptitle(f"Cosine similarity between the rows of the learned position table (wpe), seed "
                     f"{similarity['seed']}")
        fig.savefig(study_dir / "position_similarity.png", dpi=110)
        plt.close(fig)


def run_study(ablate: AblateConfig, train_config: TrainConfig, model_config: GPTConfig) -> dict | None:
    """Train, evaluate, tabulate and plot; the results' dict, or None when interrupted."""
    started = time.perf_counter()
    if ablate.threads:
        torch.set_num_threads(ablate.threads)
    study_dir = Path(ablate.study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    plan = run_plan(ablate, train_config, model_config)
    block_size = model_config.block_size
    lengths = eval_lengths(block_size, ablate.eval_multipliers)
    records = []
    bar = tqdm(total=len(plan) * train_config.max_iters, unit="step", dynamic_ncols=True,
               disable=not train_config.progress)
    for i, run in enumerate(plan):
        start = i * train_config.max_iters
        bar.set_description(f"run {i + 1}/{len(plan)}: {run['variant']}, seed {run['seed']}")
        record = train_run(run, bar, start)
        if record is None:
            bar.close()
            print(f"interrupted: {run['dir']} is unfinished and will start again on the next run of ablate.py")
            return None
        bar.n = start + train_config.max_iters  # a time budget can end a run early
        bar.set_postfix_str("evaluating")
        record["eval"] = evaluate_run(run, ablate)
        records.append(record)
    bar.close()

    rows = summarize(records, lengths)
    similarity = None
    learned = next((run for run in plan if run["variant"] == "learned"), None)
    if learned is not None:
        final = load_checkpoint(learned["dir"] / CHECKPOINT)
        similarity = {"seed": learned["seed"], "tables": {
            "at initialisation (step 0)": initial_model(learned).input_layer.wpe.detach().float(),
            f"after training (step {final['iter_num']})": final["model"]["input_layer.wpe"].float()}}
    first = plan[0]["train_config"]
    budget = f"{first.max_iters} steps" + (f" or {first.max_seconds:g} s of training" if first.max_seconds else "")
    header = [
        f"# Position-encoding study: {', '.join(ablate.variants)}", "",
        f"Dataset `{first.dataset}`; n_layer {model_config.n_layer}, n_head {model_config.n_head}, n_embd "
        f"{model_config.n_embd}, block_size {block_size}, batch {first.batch_size}; budget {budget} per run; "
        f"seeds {plan[0]['seed']}..{plan[-1]['seed']} for every variant (same initialisation of the shared "
        "weights and same batches for a given seed).", "",
        f"Cells are mean ± sample std (ddof=1) over {ablate.seeds} seed(s). *best val loss*: lowest val estimate "
        f"during training ({first.eval_iters} batches). *loss L=n*: the **final** model ({CHECKPOINT}) on "
        f"{ablate.eval_windows} fixed val windows (seed {ablate.eval_seed}), mean loss over positions 0..n-1; "
        f"shorter lengths use prefixes of the same windows. tokens/s: training throughput with "
        f"{torch.get_num_threads()} torch thread(s), noisy on a shared CPU.",
    ]
    if learned is not None and max(lengths) > block_size:
        header += ["", f"`learned` has a position table of {block_size} rows, so it cannot be run past "
                       f"block_size: those cells say n/a."]
    study = {"ablate_config": asdict(ablate), "lengths": lengths, "block_size": block_size,
             "checkpoint": CHECKPOINT, "invocation_seconds": time.perf_counter() - started}
    write_results(study_dir, rows, records, lengths, block_size, header, study)
    plot_all(study_dir, rows, records, lengths, block_size, similarity)
    return {**study, "summary": rows, "runs": records}


def main(argv: list[str]) -> None:
    ablate, train_config, model_config = parse_options(argv, (AblateConfig, TrainConfig, GPTConfig), prog="ablate.py",
                                                       description=__doc__, skip=SKIP)
    result = run_study(ablate, train_config, model_config)
    if result is not None:
        print(f"done in {result['invocation_seconds']:.0f} s: {Path(ablate.study_dir) / 'results.md'}")
        print((Path(ablate.study_dir) / "results.md").read_text())


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
