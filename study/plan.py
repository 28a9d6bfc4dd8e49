"""A study's plan: every run it trains, in the order it trains them, each a StudyRun that study/run.py trains into
its own folder. Budgets: each cell trains to each budget with a complete learning-rate schedule:

  cosine  one run per budget, from scratch, its cosine reaching min_lr at the budget (lr_decay_iters = budget)
  wsd     one constant-rate ("stable") run per (cell, seed), in segments that end where each budget's decay starts
          (budget - round(wsd_decay_fraction * budget)); each budget's run branches from its segment's checkpoint
          and decays to min_lr at the budget. A wsd learning rate depends only on the step and the budget
          (schedule.py), so a branch follows exactly the rates, batches and random streams of a wsd run of that
          budget trained from scratch (tested), at a fraction of the steps.

A run that starts from another ("start_from") comes after it in the plan: the plan's order is a valid order to
train it in. Learning-rate sweeps (role "sweep") train on val-only evaluation, before the runs they choose for.
run_plan composes a study's plan from its config: every cell at every budget, the extra budgets after them, and
the finetunes of from_cell cells.
"""

import typing
from dataclasses import dataclass, field, replace
from pathlib import Path

from errors import OptionError
from gpt.extend import extended_config
from study.cells import FROM_CELL, Cell, cell_dir, cell_name, configured_cells, parse_cell, study_cells
from study.config import AblateConfig
from study.evaluation import sliding_geometry
from training.schedule import wsd_decay_iters

if typing.TYPE_CHECKING:
    from model import GPTConfig
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


def per_run(train_config, run_dir: Path, seed: int, start_from: Path | None, **changes):
    """The study's settings of one run: its folder and seed, from scratch or resumed from start_from's
    checkpoint (copied into run_dir first), and its final checkpoint kept."""
    return replace(train_config, out_dir=str(run_dir), seed=seed, progress=False, eval_only=False,
                   init_from="resume" if start_from else "scratch", overwrite=False, always_save_checkpoint=True,
                   **changes)


def entry(cell: Cell, seed: int, budget: int, role: str, split: str, run_dir: Path, train_config,
          start_from: Path | None = None) -> StudyRun:
    return StudyRun(cell.name, cell.label, seed, budget, role, split, run_dir, start_from, cell.model_config,
                    train_config)


def wsd_branches(train_config) -> bool:
    return train_config.decay_lr and train_config.lr_schedule == "wsd"


def budget_runs(cell: Cell, seed_dir: Path, seed: int, budgets: list[int | None], split: str) -> list[StudyRun]:
    """One (cell, seed)'s runs, budgets ascending; budgets == [None]: one run of max_iters in seed_dir itself."""
    if budgets == [None]:
        config = per_run(cell.train_config, seed_dir, seed, None)
        return [entry(cell, seed, config.max_iters, "run", split, seed_dir, config)]
    runs, stable = [], (None, 0)
    for budget in sorted(budgets):
        try:
            found, stable = one_budget(cell, seed_dir, seed, budget, split, stable)
        except ValueError as e:
            raise OptionError(f"cell {cell.name!r}, budget {budget}: {e}") from None
        runs += found
    return runs


def one_budget(cell: Cell, seed_dir: Path, seed: int, budget: int, split: str,
               stable: tuple[Path | None, int]) -> tuple[list[StudyRun], tuple[Path | None, int]]:
    """The runs that bring a (cell, seed) to one budget, and the stable run (folder, steps) it leaves."""
    run_dir, train_config = seed_dir / f"{budget}steps", cell.train_config
    if not wsd_branches(train_config):
        config = per_run(train_config, run_dir, seed, None, max_iters=budget, lr_decay_iters=budget)
        return [entry(cell, seed, budget, "run", split, run_dir, config)], stable
    runs, (stable_dir, stable_end) = [], stable
    start = budget - wsd_decay_iters(budget, train_config.wsd_decay_fraction)
    if start > stable_end:  # the constant-rate run, extended to where this budget's decay starts
        segment_dir = seed_dir / f"{STABLE}{start}"
        config = per_run(train_config, segment_dir, seed, stable_dir, max_iters=start, wsd_decay_fraction=0.0)
        runs.append(entry(cell, seed, start, STABLE, split, segment_dir, config, stable_dir))
        stable_dir, stable_end = segment_dir, start
    branch_from = stable_dir if start else None  # a decay over the whole budget starts from scratch
    config = per_run(train_config, run_dir, seed, branch_from, max_iters=budget)
    runs.append(entry(cell, seed, budget, "run", split, run_dir, config, branch_from))
    return runs, (stable_dir, stable_end)


def budget_plan(cells: list[Cell], study_dir: Path, seeds: range, budgets: list[int | None],
                split: str) -> list[StudyRun]:
    """Every cell's runs at every budget, seed by seed (a study cut short has whole seeds for every cell)."""
    count = len(cells) * len(seeds) * len(budgets) * 2
    if count > MAX_RUNS:
        raise OptionError(f"{len(cells)} cells x {len(seeds):,} seeds x {len(budgets)} budgets make up to "
                          f"{count:,} runs, more than MAX_RUNS={MAX_RUNS:,}; give fewer seeds, cells or budgets")
    return [run for seed in seeds for cell in cells
            for run in budget_runs(cell, study_dir / cell_dir(cell.name) / f"seed{seed}", seed, budgets, split)]


def sweep_name(name: str, learning_rate: float) -> str:
    return f"{name} learning_rate={learning_rate}"


def sweep_plan(cells: list[Cell], learning_rates: list[float], study_dir: Path, seeds: range,
               budget: int) -> list[StudyRun]:
    """Each cell at each learning rate, on the sweep's own seeds, at one budget with a complete schedule; every
    sweep run is scored on val (only), the split choices are made on."""
    if len(cells) * len(learning_rates) * len(seeds) > MAX_RUNS:
        raise OptionError(f"the learning-rate sweep makes more than MAX_RUNS={MAX_RUNS:,} runs; give fewer rates")
    plan = []
    for seed in seeds:
        for cell in cells:
            for learning_rate in learning_rates:
                variant = Cell(sweep_name(cell.name, learning_rate), f"{cell.label} lr {learning_rate:g}",
                               cell.train_config, cell.model_config)
                run_dir = study_dir / "lr_sweep" / cell_dir(variant.name) / f"seed{seed}"
                changes = {"max_iters": budget, "learning_rate": learning_rate, "min_lr": cell.train_config.min_lr
                           * learning_rate / cell.train_config.learning_rate}
                if not wsd_branches(cell.train_config):
                    changes["lr_decay_iters"] = budget
                try:
                    config = per_run(cell.train_config, run_dir, seed, None, **changes)
                except ValueError as e:
                    raise OptionError(f"cell {cell.name!r}, lr_sweep {learning_rate:g}: {e}") from None
                plan.append(replace(entry(variant, seed, budget, "sweep", "val", run_dir, config), cell=cell.name,
                                    evaluation=SWEEP_EVALUATION))
    return plan


def pick_learning_rates(val_losses: dict[str, dict[float, list[float]]]) -> dict[str, float]:
    """Each cell's own learning rate: the one with the lowest mean val loss over the sweep's seeds (the first
    listed on a tie). val_losses: {cell: {learning rate: [val loss per seed]}}; nothing else is looked at."""
    return {cell: min(by_rate, key=lambda lr: sum(by_rate[lr]) / len(by_rate[lr]))
            for cell, by_rate in val_losses.items()}


# ---------------------------------------------------------------------------------------------------- a study's plan


def study_seeds(ablate: AblateConfig) -> range:
    return range(ablate.first_seed, ablate.first_seed + ablate.seeds)


def headline_budget(ablate: AblateConfig, train_config: "TrainConfig") -> int:
    return ablate.headline_budget or max(ablate.budgets, default=train_config.max_iters)


def run_plan(ablate: AblateConfig, train_config: "TrainConfig", model_config: "GPTConfig",
             cells: list[dict] | None = None) -> list[StudyRun]:
    """The study's runs at every budget, seed by seed; cells default to study_cells."""
    cells = study_cells(ablate) if cells is None else cells
    configured = configured_cells(cells, train_config, model_config)
    check_cell_lengths(cells, configured, ablate, train_config)
    plan = budget_plan(configured, Path(ablate.study_dir), study_seeds(ablate), ablate.budgets or [None],
                       ablate.eval_split)
    return with_finetunes(plan + extra_runs(plan, ablate, configured), cells, ablate)


def own_steps(ablate: AblateConfig, cells: list[dict]) -> bool:
    """Whether cells train steps of their own: a time-to-target study (--target_loss) without --budgets, where a
    recipe's step count is part of the recipe (docs/speedrun.md); its tables then compare every cell as trained."""
    return bool(ablate.target_loss) and not ablate.budgets and any(
        "max_iters" in cell and FROM_CELL not in cell for cell in cells)


def check_cell_lengths(cells: list[dict], configured: list[Cell], ablate: AblateConfig,
                       train_config: "TrainConfig") -> None:
    """A cell of its own max_iters is refused before anything trains, but in a time-to-target study without
    --budgets: without --budgets the tables compare every cell at the study's max_iters (a cell of another length
    was left out of them without a word, or, alone, left no report), and with them each budget sets every run's
    max_iters (the cell's did nothing). A from_cell finetune's max_iters is its own run's length: it is reported
    at its base's budget. A recipe of its own steps under a cosine must end it there (lr_decay_iters)."""
    for cell, configured_cell in zip(cells, configured, strict=True):
        if FROM_CELL in cell or "max_iters" not in cell:
            continue
        name, steps = cell_name(cell), cell["max_iters"]
        if ablate.budgets:
            budgets = ",".join(map(str, ablate.budgets))
            raise OptionError(f"cell {name!r} sets max_iters={steps}, but --budgets={budgets} sets every run's: it "
                              f"would do nothing; drop max_iters from the cell (and add {steps} to --budgets to train "
                              "every cell that long)")
        config = configured_cell.train_config
        if ablate.target_loss:
            if config.decay_lr and config.lr_schedule == "cosine" and config.lr_decay_iters != steps:
                raise OptionError(f"cell {name!r} trains max_iters={steps} steps, but its cosine reaches min_lr at "
                                  f"lr_decay_iters={config.lr_decay_iters}; add lr_decay_iters={steps} to the cell "
                                  "(or lr_schedule=wsd, which decays over the end of max_iters)")
            continue
        if steps != train_config.max_iters:
            both = ",".join(map(str, sorted({train_config.max_iters, steps})))
            raise OptionError(f"cell {name!r} sets max_iters={steps}, but the study compares every cell at its "
                              f"max_iters={train_config.max_iters}; drop max_iters from the cell, train every cell "
                              f"to both with --budgets={both}, or give --target_loss (a time-to-target study: each "
                              "recipe its own steps)")


def extra_runs(plan: list[StudyRun], ablate: AblateConfig, cells: list[Cell]) -> list[StudyRun]:
    """The runs that bring extra_variants' first extra_seeds seeds on to extra_budgets, after the whole plan (a
    study cut short has every cell at every budget first): their constant-rate runs go on from the plan's last."""
    if not ablate.extra_budgets:
        return []
    names = [cell_name(parse_cell(variant)) for variant in ablate.extra_variants]
    known = [cell.name for cell in cells]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise OptionError(f"extra_variants: {unknown[0]!r} is not a cell of this study ({', '.join(known)})")
    chosen = [cell for cell in cells if cell.name in names]
    first = range(ablate.first_seed, ablate.first_seed + ablate.extra_seeds)
    longer = budget_plan(chosen, Path(ablate.study_dir), first, ablate.budgets + ablate.extra_budgets,
                         ablate.eval_split)
    planned = {run.dir for run in plan}
    return [run for run in longer if run.dir not in planned]


def from_cells(cells: list[dict]) -> dict[str, str]:
    """{finetune cell: the cell it starts from} (from_cell may name a cell or its folder); an OptionError unless
    that is a cell listed before it that starts from scratch."""
    names, bases = [cell_name(c) for c in cells], {}
    for i, cell in enumerate(cells):
        if FROM_CELL not in cell:
            continue
        earlier = {cell_dir(n): n for n in names[:i] if FROM_CELL not in cells[names.index(n)]}
        base = cell[FROM_CELL] if cell[FROM_CELL] in earlier.values() else earlier.get(cell[FROM_CELL])
        if base is None:
            raise OptionError(f"cell {names[i]!r}: from_cell={cell[FROM_CELL]!r} must name a cell listed before it "
                              f"that trains from scratch: {', '.join(earlier.values()) or 'none is'}")
        bases[names[i]] = base
    return bases


def control_cells(records: list[dict], bases: dict[str, str]) -> dict[str, str]:
    """{extended and finetuned cell: its control}: the from_cell cell that trains the same base as many steps at
    the base's own length (no extend_positions), so that reading further and training more are told apart."""
    settings = {r["variant"]: r["settings"]["train_config"] for r in records if r["variant"] in bases}
    controls = {(bases[c], t["max_iters"]): c for c, t in settings.items()
                if not t["extend_positions"] and t["max_iters"] > 0}
    return {c: controls[bases[c], t["max_iters"]] for c, t in settings.items()
            if t["extend_positions"] and (bases[c], t["max_iters"]) in controls}


def with_finetunes(plan: list[StudyRun], cells: list[dict], ablate: AblateConfig) -> list[StudyRun]:
    """The plan with each run of a from_cell cell starting from its base's run of the same seed (a finetune of
    it), scored at the base's eval lengths and sliding window, and counted at the base's budget."""
    bases = from_cells(cells)
    if bases and (ablate.budgets or ablate.lr_sweep):
        raise OptionError("from_cell cells finetune one run per seed: give no --budgets or --lr_sweep with them")
    runs = {(run.variant, run.seed): run for run in plan}
    finetuned = []
    for run in plan:
        base = runs.get((bases.get(run.variant), run.seed))
        if base is None:
            finetuned.append(run)
            continue
        shape = replace(run.model_config, block_size=base.model_config.block_size,
                        dropout=base.model_config.dropout)
        if shape != base.model_config:
            raise OptionError(f"cell {run.variant!r} changes model settings of its from_cell {base.variant!r}, "
                              "whose checkpoint is its model: change only block_size (with extend_positions) and "
                              "dropout")
        block, method = base.model_config.block_size, run.train_config.extend_positions
        if method or run.model_config.block_size != block:  # found here, not after the base has trained
            try:
                extended_config(base.model_config, run.model_config.block_size, method)
            except ValueError as e:
                raise OptionError(f"cell {run.variant!r}: {e}") from None
        window, stride = sliding_geometry(ablate, block)
        finetuned.append(replace(run, start_from=base.dir, finetune=True, budget=base.budget, evaluation={
            "eval_multipliers": [m * block / run.model_config.block_size for m in ablate.eval_multipliers],
            "sliding_window": window, "sliding_stride": stride}))
    return finetuned


def lr_sweep_plan(ablate: AblateConfig, train_config: "TrainConfig", model_config: "GPTConfig",
                  cells: list[dict]) -> list[StudyRun]:
    """The learning-rate sweep's runs (none without --lr_sweep): each cell at each rate, on the sweep's seeds."""
    if not ablate.lr_sweep:
        return []
    sweep_seeds = range(ablate.lr_sweep_first_seed, ablate.lr_sweep_first_seed + ablate.lr_sweep_seeds)
    budget = ablate.lr_sweep_budget or headline_budget(ablate, train_config)
    return sweep_plan(configured_cells(cells, train_config, model_config), ablate.lr_sweep,
                      Path(ablate.study_dir), sweep_seeds, budget)
