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
Runs can be spread over processes (--jobs=N) or a cluster's job array (--run_index=K, then --report_only=True);
see study_runs.py for how they share one study folder.

Evaluation of every final model (ckpt.pt) on the whole val split, at each length L in eval_multipliers:
  nonoverlapping  the split cut into consecutive windows of L tokens; every token scored once, with the tokens
                  before it in its window as context (the protocol of Press et al.)
  sliding         the same windows, but no token sees more than sliding_window tokens (itself included): the
                  windows are scored in pieces of sliding_window tokens that advance by sliding_stride
The results (results.md, .csv, .json and the plots) go to <study_dir>.
"""

import itertools
import re
import signal
import sys
import time
import typing
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch

import ablate_plots
from checkpoint import load_checkpoint
from dataset import resolve_data_dir
from errors import OptionError, main_guard
from model import GPT, GPTConfig
from options import convert_value, parse_options
from paired_stats import CONFIDENCE
from study_eval import eval_lengths, sliding_geometry
from study_report import CHECKPOINT, header_lines, study_comparisons, summarize, write_results
from study_runs import study_records
from tokenizer import read_description
from train import TrainConfig, build_model

# Set by the study for each run: a run starts from scratch in its own folder and keeps its final checkpoint.
PER_RUN = ("vocab_size", "seed", "out_dir", "init_from", "eval_only", "overwrite", "always_save_checkpoint")
PROTOCOLS = ("nonoverlapping", "sliding")

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
    jobs: int = 1  # runs trained at once, each in its own process on its share of the CPUs (or --threads)
    run_index: int = -1  # train and evaluate only run number K of the plan (a job array's task); -1: all
    report_only: bool = False  # report from the runs on disk, training nothing; unfinished runs are an error
    list_runs: bool = False  # print the plan's runs (their numbers for --run_index) and stop
    overwrite: bool = False  # replace the results of another study in study_dir (its runs are kept)

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
        if self.jobs < 1 or self.run_index < -1 or (self.jobs > 1) + (self.run_index >= 0) + self.report_only > 1:
            raise ValueError(f"jobs={self.jobs} (at least 1), run_index={self.run_index} (-1: all) and report_only="
                             f"{self.report_only}: choose one of --jobs, --run_index and --report_only")
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
    return name, convert_value(name, value, known[name][1])


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












# ---------------------------------------------------------------------------------------------------- evaluation




















# ---------------------------------------------------------------------------------------------------- statistics








# ---------------------------------------------------------------------------------------------------- results


















def position_tables(plan: list[dict]) -> dict | None:
    """The learned position table of the first learned run, at initialisation and at the end."""
    learned = next((run for run in plan if run["model_config"].pos_encoding == "learned"), None)
    if learned is None:
        return None
    final = load_checkpoint(learned["dir"] / CHECKPOINT)
    return {"cell": learned["variant"], "seed": learned["seed"], "tables": {
        "at initialisation (step 0)": initial_model(learned).input_layer.wpe.detach().float(),
        f"after training (step {final['iter_num']})": final["model"]["input_layer.wpe"].float()}}




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
    records, stopped_by = study_records(plan, ablate, train_config, model_config)
    if stopped_by or records is None:  # stopped, or --list_runs / --run_index: nothing to report
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
                                                       description=__doc__, skip=tuple(set(PER_RUN) - {"overwrite"}))
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
    if "summary" not in result:
        return
    print(f"done in {result['invocation_seconds']:.0f} s: {Path(ablate.study_dir) / 'results.md'}")
    print((Path(ablate.study_dir) / "results.md").read_text())


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
