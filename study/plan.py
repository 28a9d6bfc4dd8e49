"""A study's plan: every run it trains, in the order it trains them, each a StudyRun that study/runs.py trains into
its own folder. Budgets: each cell trains to each budget with a complete learning-rate schedule:

  cosine  one run per budget, from scratch, its cosine reaching min_lr at the budget (lr_decay_iters = budget)
  wsd     one constant-rate ("stable") run per (cell, seed), in segments that end where each budget's decay starts
          (budget - round(wsd_decay_fraction * budget)); each budget's run branches from its segment's checkpoint
          and decays to min_lr at the budget. A wsd learning rate depends only on the step and the budget
          (schedule.py), so a branch follows exactly the rates, batches and random streams of a wsd run of that
          budget trained from scratch (tested), at a fraction of the steps.

A run that starts from another ("start_from") comes after it in the plan: the plan's order is a valid order to
train it in. Learning-rate sweeps (role "sweep") train on val-only evaluation, before the runs they choose for.
"""

import re
import typing
from dataclasses import dataclass, field, replace
from pathlib import Path

from errors import OptionError
from training.schedule import wsd_decay_iters

if typing.TYPE_CHECKING:
    from gpt.model import GPTConfig
    from train import TrainConfig

MAX_RUNS = 100_000  # runs in one plan: it is built in memory
STABLE = "stable"  # the role of a constant-rate segment that wsd budgets branch from; it is not evaluated
SWEEP_EVALUATION = {"eval_multipliers": [1.0], "protocols": ["nonoverlapping"]}  # what a sweep's pick looks at


@dataclass(frozen=True)
class StudyRun:
    """One run of a study's plan: what it trains (its configs, its folder's out_dir among them) and how the study
    scores and reports it."""
    variant: str  # its cell's name (the cell's folder, its records' "variant"); a sweep run's names its rate too
    label: str  # the cell as tables and plots show it
    seed: int
    budget: int  # the steps it is reported at: its max_iters (a finetune: its from_cell base's budget)
    role: str  # "run" (scored and reported), STABLE (a constant-rate segment, not scored) or "sweep"
    split: str  # the split it is scored on: test, or val for a choice
    dir: Path  # its folder
    start_from: Path | None  # the folder of the finished run it continues (a wsd branch) or finetunes; None: scratch
    model_config: "GPTConfig"
    train_config: "TrainConfig"
    cell: str | None = None  # a sweep run: the cell whose learning rate it tries
    evaluation: dict = field(default_factory=dict)  # evaluation settings of its own over the study's (AblateConfig)
    finetune: bool = False  # a from_cell run: a new run from start_from's final weights, not a continuation


def cell_dir(name: str) -> str:
    """A cell's folder name: its name with anything but letters, digits and ._=+- made _."""
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", name)


def per_run(train_config, run_dir: Path, seed: int, start_from: Path | None, **changes):
    """The study's settings of one run: its folder and seed, from scratch or resumed from start_from's
    checkpoint (copied into run_dir first), and its final checkpoint kept."""
    return replace(train_config, out_dir=str(run_dir), seed=seed, progress=False, eval_only=False,
                   init_from="resume" if start_from else "scratch", overwrite=False, always_save_checkpoint=True,
                   **changes)


def entry(name: str, label: str, seed: int, budget: int, role: str, split: str, run_dir: Path, train_config,
          model_config, start_from: Path | None = None) -> StudyRun:
    return StudyRun(name, label, seed, budget, role, split, run_dir, start_from, model_config, train_config)


def tokens_per_iter(train_config, model_config) -> int:
    """Tokens one optimizer step trains on: the x axis of a study's budgets."""
    return train_config.gradient_accumulation_steps * train_config.batch_size * model_config.block_size


def wsd_branches(train_config) -> bool:
    return train_config.decay_lr and train_config.lr_schedule == "wsd"


def budget_runs(name: str, label: str, cell_train, cell_model, seed_dir: Path, seed: int, budgets: list[int | None],
                split: str) -> list[StudyRun]:
    """One (cell, seed)'s runs, budgets ascending; budgets == [None]: one run of max_iters in seed_dir itself."""
    if budgets == [None]:
        config = per_run(cell_train, seed_dir, seed, None)
        return [entry(name, label, seed, config.max_iters, "run", split, seed_dir, config, cell_model)]
    runs, stable = [], (None, 0)
    for budget in sorted(budgets):
        try:
            found, stable = one_budget(name, label, cell_train, cell_model, seed_dir, seed, budget, split, stable)
        except ValueError as e:
            raise OptionError(f"cell {name!r}, budget {budget}: {e}") from None
        runs += found
    return runs


def one_budget(name: str, label: str, cell_train, cell_model, seed_dir: Path, seed: int, budget: int, split: str,
               stable: tuple[Path | None, int]) -> tuple[list[StudyRun], tuple[Path | None, int]]:
    """The runs that bring a (cell, seed) to one budget, and the stable run (folder, steps) it leaves."""
    run_dir = seed_dir / f"{budget}steps"
    if not wsd_branches(cell_train):
        config = per_run(cell_train, run_dir, seed, None, max_iters=budget, lr_decay_iters=budget)
        return [entry(name, label, seed, budget, "run", split, run_dir, config, cell_model)], stable
    runs, (stable_dir, stable_end) = [], stable
    start = budget - wsd_decay_iters(budget, cell_train.wsd_decay_fraction)
    if start > stable_end:  # the constant-rate run, extended to where this budget's decay starts
        segment_dir = seed_dir / f"{STABLE}{start}"
        config = per_run(cell_train, segment_dir, seed, stable_dir, max_iters=start, wsd_decay_fraction=0.0)
        runs.append(entry(name, label, seed, start, STABLE, split, segment_dir, config, cell_model, stable_dir))
        stable_dir, stable_end = segment_dir, start
    branch_from = stable_dir if start else None  # a decay over the whole budget starts from scratch
    config = per_run(cell_train, run_dir, seed, branch_from, max_iters=budget)
    runs.append(entry(name, label, seed, budget, "run", split, run_dir, config, cell_model, branch_from))
    return runs, (stable_dir, stable_end)


def budget_plan(configs: list[tuple], study_dir: Path, seeds: range, budgets: list[int | None],
                split: str) -> list[StudyRun]:
    """Every cell's runs at every budget, seed by seed (a study cut short has whole seeds for every cell)."""
    count = len(configs) * len(seeds) * len(budgets) * 2
    if count > MAX_RUNS:
        raise OptionError(f"{len(configs)} cells x {len(seeds):,} seeds x {len(budgets)} budgets make up to "
                          f"{count:,} runs, more than MAX_RUNS={MAX_RUNS:,}; give fewer seeds, cells or budgets")
    return [run for seed in seeds for name, label, cell_train, cell_model in configs
            for run in budget_runs(name, label, cell_train, cell_model, study_dir / cell_dir(name) / f"seed{seed}",
                                   seed, budgets, split)]


def sweep_name(name: str, learning_rate: float) -> str:
    return f"{name} learning_rate={learning_rate}"


def sweep_plan(configs: list[tuple], learning_rates: list[float], study_dir: Path, seeds: range,
               budget: int) -> list[StudyRun]:
    """Each cell at each learning rate, on the sweep's own seeds, at one budget with a complete schedule; every
    sweep run is scored on val (only), the split choices are made on."""
    if len(configs) * len(learning_rates) * len(seeds) > MAX_RUNS:
        raise OptionError(f"the learning-rate sweep makes more than MAX_RUNS={MAX_RUNS:,} runs; give fewer rates")
    plan = []
    for seed in seeds:
        for name, label, cell_train, cell_model in configs:
            for learning_rate in learning_rates:
                variant = sweep_name(name, learning_rate)
                run_dir = study_dir / "lr_sweep" / cell_dir(variant) / f"seed{seed}"
                changes = {"max_iters": budget, "learning_rate": learning_rate, "min_lr": cell_train.min_lr
                           * learning_rate / cell_train.learning_rate}
                if not wsd_branches(cell_train):
                    changes["lr_decay_iters"] = budget
                try:
                    config = per_run(cell_train, run_dir, seed, None, **changes)
                except ValueError as e:
                    raise OptionError(f"cell {name!r}, lr_sweep {learning_rate:g}: {e}") from None
                plan.append(replace(entry(variant, f"{label} lr {learning_rate:g}", seed, budget, "sweep", "val",
                                          run_dir, config, cell_model), cell=name, evaluation=SWEEP_EVALUATION))
    return plan


def pick_learning_rates(val_losses: dict[str, dict[float, list[float]]]) -> dict[str, float]:
    """Each cell's own learning rate: the one with the lowest mean val loss over the sweep's seeds (the first
    listed on a tie). val_losses: {cell: {learning rate: [val loss per seed]}}; nothing else is looked at."""
    return {cell: min(by_rate, key=lambda lr: sum(by_rate[lr]) / len(by_rate[lr]))
            for cell, by_rate in val_losses.items()}
