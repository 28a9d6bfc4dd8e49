"""A study's own settings (ablate.py's AblateConfig, checked as it is built) and the names every study module
shares: the lowest module of the study, which the others import, so that none of them imports ablate.py."""

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from errors import OptionError

# Set by the study for each run: a run starts from scratch in its own folder and keeps its final checkpoint.
PER_RUN = ("vocab_size", "seed", "out_dir", "init_from", "eval_only", "overwrite", "always_save_checkpoint")
PROTOCOLS = ("nonoverlapping", "sliding")
SPLITS = ("test", "val")
MAX_SEEDS = 10_000  # seeds per cell: a plan of them is built in memory
MAX_SEED = 2**63 - 1  # seeds are int64

# A study's cells when --variants is not given: the five encodings of the first position study
# (docs/positions/previous/); the other registered encodings (layers.positions.POS_ENCODINGS: t5) join with --variants.
STUDY_CELLS = ("learned", "sinusoidal", "rope", "alibi", "none")


@dataclass
class AblateConfig:
    study_dir: str = "out-ablate"  # study folder: one sub-folder per run (<cell>/seed<N>) and the results
    variants: list[str] = field(default_factory=lambda: list(STUDY_CELLS))  # cells: "rope", "name=value name=value"
    grid: str = ""  # more cells, the cross product of "name=v1,v2;name2=v3,v4"; added after variants
    seeds: int = 5  # runs per cell, seeded first_seed, first_seed+1, ...
    first_seed: int = 1337  # seed of each cell's first run: initialisation and batch order
    budgets: list[int] = field(default_factory=list)  # steps each cell trains to, each a whole schedule; []: max_iters
    headline_budget: int = 0  # the budget of the main tables (one of budgets); 0: the largest
    extra_budgets: list[int] = field(default_factory=list)  # budgets past the largest, for extra_variants only
    extra_variants: list[str] = field(default_factory=list)  # the cells that train extra_budgets (with the reference)
    extra_seeds: int = 3  # how many seeds (first_seed on) train extra_budgets: whether the largest still moves
    eval_split: str = "test"  # the split final models are scored on: test (no choice looked at it) | val
    lr_sweep: list[float] = field(default_factory=list)  # learning rates tried per cell on val; []: no sweep
    lr_sweep_seeds: int = 2  # seeds per (cell, learning rate) of the sweep, from lr_sweep_first_seed
    lr_sweep_first_seed: int = 100_000  # the sweep's first seed: its seeds must not be the headline's
    lr_sweep_budget: int = 0  # steps of each sweep run; 0: the headline budget
    equivalence_margin: float = 0.0  # TOST margin (nats/token), fixed before the study runs; 0: no TOST
    eval_multipliers: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0])  # eval lengths / block_size
    protocols: list[str] = field(default_factory=lambda: list(PROTOCOLS))  # nonoverlapping | sliding
    sliding_window: int = 0  # most tokens a sliding-window forward holds (context + the token); 0: block_size
    sliding_stride: int = 0  # tokens a sliding window advances (scored per piece); 0: a quarter of the window
    eval_batch_size: int = 64  # windows per forward pass in the evaluation
    labels: list[str] = field(default_factory=list)  # names tables and plots give cells: "GPT-2 track: <the cell>"
    reference: str = ""  # the cell that the paired-difference plot compares every other cell to; "": the first
    compare_to: list[str] = field(default_factory=list)  # paired tests of each cell with these only; []: every pair
    target_loss: float = 0.0  # time to target (docs/speedrun.md): eval_split's loss at L = block_size; 0: none
    threads: int = 0  # torch CPU threads; 0: torch's default. 1 is faster when other jobs share a small CPU
    jobs: int = 1  # runs trained at once, each in its own process on its share of the CPUs (or --threads)
    run_index: int = -1  # train and evaluate only run number K of the plan (a job array's task); -1: all
    report_only: bool = False  # report from the runs on disk, training nothing; unfinished runs are an error
    list_runs: bool = False  # print the plan's runs (numbers for --run_index), steps and estimated time, and stop
    time_limit: str = ""  # e.g. 90m, 1.5h: start no run estimated to end later, then stop; "": no limit
    keep_checkpoints: bool = True  # False: remove each run's checkpoints once evaluated and no run starts from it
    overwrite: bool = False  # replace the results of another study in study_dir (its runs are kept)

    def __post_init__(self) -> None:
        unknown = [p for p in self.protocols if p not in PROTOCOLS]
        if unknown or not self.protocols:
            raise ValueError(f"protocols={self.protocols} must be values among {PROTOCOLS}")
        if self.threads < 0 or self.sliding_window < 0 or self.sliding_stride < 0:
            raise ValueError(f"threads={self.threads}, sliding_window={self.sliding_window} and sliding_stride="
                             f"{self.sliding_stride} must be >= 0 (0: the default)")
        if self.sliding_window and self.sliding_stride > self.sliding_window:
            raise ValueError(f"sliding_stride={self.sliding_stride} is longer than sliding_window="
                             f"{self.sliding_window}: tokens between pieces would go unscored; give a stride of at "
                             "most the window")
        if self.seeds < 1 or self.eval_batch_size < 1 or self.lr_sweep_seeds < 1:
            raise ValueError(f"seeds={self.seeds}, lr_sweep_seeds={self.lr_sweep_seeds} and eval_batch_size="
                             f"{self.eval_batch_size} must be at least 1")
        check_seeds("seeds", self.first_seed, self.seeds)
        check_seeds("lr_sweep_seeds", self.lr_sweep_first_seed, self.lr_sweep_seeds)
        if self.lr_sweep and max(self.first_seed, self.lr_sweep_first_seed) < min(
                self.first_seed + self.seeds, self.lr_sweep_first_seed + self.lr_sweep_seeds):
            raise ValueError(f"the learning-rate sweep's seeds ({self.lr_sweep_first_seed}..) overlap the study's "
                             f"({self.first_seed}..{self.first_seed + self.seeds - 1}): a pick made on the "
                             "headline's seeds flatters it; move --lr_sweep_first_seed")
        if not self.eval_multipliers or not all(0 < m < math.inf for m in self.eval_multipliers):
            raise ValueError(f"eval_multipliers={self.eval_multipliers} must be positive finite numbers")
        if not all(lr > 0 and math.isfinite(lr) for lr in self.lr_sweep):
            raise ValueError(f"lr_sweep={self.lr_sweep} must be positive finite learning rates")
        if not (self.equivalence_margin >= 0 and math.isfinite(self.equivalence_margin)):
            raise ValueError(f"equivalence_margin={self.equivalence_margin} must be a finite number >= 0 (nats per "
                             "token; 0: no equivalence test)")
        if any(b < 1 for b in self.budgets) or len(set(self.budgets)) < len(self.budgets):
            raise ValueError(f"budgets={self.budgets} must be distinct step counts of at least 1")
        if self.headline_budget and self.headline_budget not in self.budgets:
            raise ValueError(f"headline_budget={self.headline_budget} is not one of budgets={self.budgets}")
        if self.extra_budgets and not (self.budgets and min(self.extra_budgets) > max(self.budgets)
                                       and len(set(self.extra_budgets)) == len(self.extra_budgets)):
            raise ValueError(f"extra_budgets={self.extra_budgets} must be distinct budgets larger than every one of "
                             f"budgets={self.budgets}: they extend a study of several budgets")
        if bool(self.extra_budgets) != bool(self.extra_variants):
            raise ValueError(f"extra_budgets={self.extra_budgets} and extra_variants={self.extra_variants}: give both "
                             "(the budgets, and the cells that train them) or neither")
        if self.extra_budgets and not 1 <= self.extra_seeds <= self.seeds:
            raise ValueError(f"extra_seeds={self.extra_seeds} must be 1..seeds={self.seeds} (the first seeds train "
                             "the extra budgets)")
        if self.lr_sweep_budget < 0:
            raise ValueError(f"lr_sweep_budget={self.lr_sweep_budget} must be >= 0 (0: the headline budget)")
        if self.jobs < 1:
            raise ValueError(f"jobs={self.jobs} must be at least 1 (runs trained at once; 1: one after another)")
        if self.run_index < -1:
            raise ValueError(f"run_index={self.run_index} must be a run's number, 0 or more (--list_runs shows "
                             "them), or -1 for every run")
        if (self.jobs > 1) + (self.run_index >= 0) + self.report_only > 1:
            raise ValueError(f"jobs={self.jobs}, run_index={self.run_index} and report_only={self.report_only}: "
                             "choose one of --jobs, --run_index and --report_only")
        parse_time_limit(self.time_limit)  # a malformed limit is one line before anything runs
        if self.time_limit and self.run_index >= 0:
            raise ValueError(f"time_limit={self.time_limit!r} applies to a whole study or --jobs, not to "
                             f"run_index={self.run_index} (a job array's task has its scheduler's limit)")
        if self.eval_split not in SPLITS:
            raise ValueError(f"eval_split={self.eval_split!r} must be one of {', '.join(SPLITS)}")
        if not 0 <= self.target_loss < math.inf:  # also catches NaN
            raise ValueError(f"target_loss={self.target_loss} must be a finite loss > 0 (nats/token), or 0 for none")
        if not self.variants and not self.grid:
            raise ValueError("no cells to compare: give --variants=learned,none or --grid=name=v1,v2")


# The settings another study setting switches on: read only where it is on. ablate.py refuses them as its flags only,
# since a config file may hold them for a switch the command line turns off (--lr_sweep= on a sweep's config,
# --protocols=nonoverlapping on one with a sliding window).
LR_SWEEP_SETTINGS = ("lr_sweep_seeds", "lr_sweep_budget", "lr_sweep_first_seed")
SLIDING_SETTINGS = ("sliding_window", "sliding_stride")


def unused_settings(ablate: AblateConfig, given: Iterable[str]) -> list[tuple[str, str]]:
    """The given settings that would do nothing in this study, each as (what it belongs to and why, the fix): the
    sweep's without --lr_sweep, extra_seeds without --extra_budgets, the sliding window's without the sliding
    protocol."""
    unused = []
    for name in given:
        if name in LR_SWEEP_SETTINGS and not ablate.lr_sweep:
            unused.append((f"{name} is a setting of lr_sweep, and this study's lr_sweep is [] (no sweep)",
                           "give --lr_sweep=3e-4,1e-3 (the rates each cell tries)"))
        elif name == "extra_seeds" and not ablate.extra_budgets:
            unused.append(("extra_seeds is a setting of extra_budgets, and this study's extra_budgets is [] (no "
                           "extra budget)", "give --extra_budgets with --extra_variants"))
        elif name in SLIDING_SETTINGS and "sliding" not in ablate.protocols:
            unused.append((f"{name} is a setting of protocols=sliding, and this study's protocols are "
                           f"{','.join(ablate.protocols)}", "add sliding to --protocols"))
    return unused


def check_seeds(name: str, first: int, count: int) -> None:
    """Seeds first .. first + count - 1 must be int64 values torch can take, and few enough to plan."""
    if count > MAX_SEEDS:
        raise ValueError(f"{name}={count:,} is more than MAX_SEEDS={MAX_SEEDS:,} runs per cell; give fewer seeds")
    if first < 0 or first + count - 1 > MAX_SEED:
        raise ValueError(f"seeds {first}..{first + count - 1} must lie in 0..{MAX_SEED} (a 64-bit integer); "
                         "give a smaller first seed")


UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_time_limit(text: str) -> float:
    """--time_limit as seconds: "90m", "1.5h", "600s"; "" is no limit (0)."""
    if not text:
        return 0.0
    found = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smh])\s*", text)
    if not found or float(found[1]) <= 0 or not math.isfinite(float(found[1])):
        raise OptionError(f"time_limit={text!r} must be a positive number with s, m or h: --time_limit=90m")
    return float(found[1]) * UNITS[found[2]]
