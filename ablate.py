"""Controlled studies: train every cell of a grid under the same seeds, batches, initialisation and budgets, then
evaluate every final model the same way on a split no choice looked at, and compare the cells seed by seed.
    python ablate.py config/ablate_positions_budgets.py
    python ablate.py config/ablate_positions.py --variants=learned,none --seeds=2 --max_iters=500

Cells. --variants lists cells; a cell is a pos_encoding value ("rope"), or name=value settings of any
GPTConfig/TrainConfig field separated by spaces ("pos_encoding=sinusoidal sinusoidal_amplitude=1.0", or
"sinusoidal sinusoidal_amplitude=1.0"). --grid adds the cross product "name=v1,v2;name2=v3,v4" (";" between fields,
"," between values). A cell's settings override the config file and flags; everything else is the same for all.
Tables and plots name a cell as a person writes it ("sinusoidal 1.0").

Finetunes of a trained cell. A cell with from_cell=<cell> (a cell listed before it) starts each seed's run from
that cell's final checkpoint of the same seed, as train.py --init_from=<its ckpt.pt> does: a new run of its own
max_iters (0: the model as it is) from those weights, e.g. "rope block_size=128 extend_positions=yarn max_iters=200
from_cell=rope" (config/ablate_context_extension.py). It may change block_size (with extend_positions), dropout
and training settings, no other model setting; it is scored at the eval lengths and sliding window of the study's
block_size, like the cell it starts from, and reported beside it at the headline budget.

Budgets (--budgets=1000,2000): each cell trains to each budget with a complete schedule: a cosine run per budget,
or with --lr_schedule=wsd one constant-rate run per (cell, seed) that each budget's decay branches from
(study/plan.py). --lr_sweep=3e-4,1e-3 first picks each cell's own learning rate on val, on seeds of its own; the
cells then train at the common rate and at their own. --equivalence_margin adds a TOST verdict to every pair.

Each run trains in this process with train.train() into <study_dir>/<cell>/seed<N>/ (with budgets, one folder per
budget below it) and leaves there its checkpoints, train.log, done.json (the training record with every setting
that changes the numbers, the data split's identity included) and eval.json (the evaluation). A rerun reuses
finished runs, refuses one made with other settings, and restarts unfinished ones from scratch; runs go seed by
seed, so a study cut short still has whole seeds for every cell. Runs can be spread over processes (--jobs=N) or a
cluster's job array (--run_index=K, then --report_only=True); see study/runs.py for how they share one study
folder. With --lr_sweep the study has two stages: --list_runs and --run_index number the sweep's runs until it
has finished, then the headline's runs (which depend on the sweep's picks).

Evaluation of every final model (ckpt.pt) on the whole eval_split (test; val for a study that makes a choice), at
each length L in eval_multipliers:
  nonoverlapping  the split cut into consecutive windows of L tokens; every token scored once, with the tokens
                  before it in its window as context (the protocol of Press et al.)
  sliding         the same windows, but no token sees more than sliding_window tokens (itself included): the
                  windows are scored in pieces of sliding_window tokens that advance by sliding_stride
The results (results.md, .csv, .json and the plots) go to <study_dir>, in nats per token and bits per byte.
"""

import itertools
import signal
import sys
import time
import typing
from dataclasses import asdict, fields, replace
from pathlib import Path

import torch

from errors import OptionError, UserError, main_guard
from gpt.model import GPT, GPTConfig
from options import convert_value, parse_options
from study import plan as study_plan
from study import plots as ablate_plots
from study.config import PER_RUN, AblateConfig
from study.cost import OutOfTime
from study.evaluation import eval_lengths, sliding_geometry
from study.paired_stats import CONFIDENCE
from study.plan import StudyRun
from study.report import budget_summary, header_lines, study_comparisons, summarize, write_results
from study.runs import finished_records, read_json, study_records, with_resolved_dtype
from text.dataset import check_recorded_tokens, load_split, resolve_data_dir
from text.tokenizer import read_description
from train import TrainConfig, build_model
from training.run_dir import CHECKPOINT

LABEL_WORDS = {"learning_rate": "lr", "learned_init_std": "init std"}  # how cell_label names these settings
FROM_CELL = "from_cell"  # the cell setting of a finetune: the cell whose final checkpoint each seed starts from


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
    if name == FROM_CELL:
        return name, value
    known = field_types()
    if name not in known:
        raise OptionError(f"cell setting {text!r}: {name!r} is not a GPTConfig/TrainConfig field (or is set per "
                          f"run: {', '.join(PER_RUN)}); see python train.py --help")
    return name, convert_value(name, value, known[name][1])


def parse_cell(variant: str) -> dict[str, object]:
    """One cell, "name=value name=value" (or a bare pos_encoding word): {field: value}, each field set once."""
    cell: dict[str, object] = {}
    for name, value in map(parse_setting, variant.split()):
        if name in cell:
            commas = ",".join(variant.split())
            hint = f"; separate cells with commas: --variants={commas}" if name == "pos_encoding" else ""
            raise OptionError(f"cell {variant!r} sets {name} twice ({cell[name]!r} and {value!r}); set it once{hint}")
        cell[name] = value
    return cell


def study_cells(ablate: AblateConfig) -> list[dict[str, object]]:
    """The cells to compare, in order: --variants, then the --grid cross product. Each is {field: value}."""
    cells = [parse_cell(variant) for variant in ablate.variants]
    axes, parts = [], {}
    for part in filter(None, (p.strip() for p in ablate.grid.split(";"))):
        name, has_values, values = part.partition("=")
        if not has_values or not values:
            raise OptionError(f"grid part {part!r} must look like name=v1,v2")
        name, values = name.strip(), [v.strip() for v in values.split(",")]
        if name in parts:  # the product's dict would keep the last value alone, without a word
            both = ",".join(dict.fromkeys(parts[name][1] + values))
            raise OptionError(f"grid sets {name} twice ({parts[name][0]!r} and {part!r}); give its values once: "
                              f"--grid='{name}={both}'")
        parts[name] = (part, values)
        axes.append([parse_setting(f"{name}={value}") for value in values])
    cells += [dict(combination) for combination in itertools.product(*axes)] if axes else []
    names = [cell_name(c) for c in cells]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise OptionError(f"cells {repeated} are listed more than once; list each cell once")
    if ablate.lr_sweep and any("learning_rate" in c for c in cells):
        raise OptionError("a cell sets learning_rate and lr_sweep picks each cell's own: drop one of them")
    return cells


def cell_name(cell: dict[str, object]) -> str:
    """"sinusoidal sinusoidal_amplitude=1.0": the pos_encoding first, bare, then the other settings. The cell's
    identity (its folder, its records); tables and plots show cell_label."""
    parts = [str(cell["pos_encoding"])] if "pos_encoding" in cell else []
    return " ".join(parts + [f"{k}={v}" for k, v in cell.items() if k != "pos_encoding"]) or "base"


def cell_label(cell: dict[str, object]) -> str:
    """The cell as a person writes it: "sinusoidal 0.1" (a setting of the cell's own encoding, by value alone),
    "learned init std 0.01", "rope lr 0.003", other settings as name=value."""
    encoding = str(cell.get("pos_encoding", ""))
    parts = [encoding] if encoding else []
    for name, value in cell.items():
        shown = (f"{value:.1f}" if value.is_integer() else f"{value:g}") if isinstance(value, float) else str(value)
        if name == "pos_encoding":
            continue
        if name in LABEL_WORDS:
            parts.append(f"{LABEL_WORDS[name]} {shown}")
        elif encoding and name.startswith(f"{encoding}_"):
            parts.append(shown)
        else:
            parts.append(f"{name}={shown}")
    return " ".join(parts) or "base"


def cell_configs(cells: list[dict], train_config: TrainConfig, model_config: GPTConfig) -> list[tuple]:
    """(name, label, train config, model config) per cell; a setting a config refuses (dropout=1.5, a misspelt
    encoding, rope with an odd head size) is one line naming the cell, before anything trains. A cell's own
    learning_rate scales min_lr with it (unless the cell sets min_lr too)."""
    configs = []
    for cell in cells:
        overrides = {s: {k: v for k, v in cell.items() if k != FROM_CELL and field_types()[k][0] is s}
                     for s in (TrainConfig, GPTConfig)}
        if "learning_rate" in cell and "min_lr" not in cell:  # the decay keeps its depth: min_lr / learning_rate
            overrides[TrainConfig]["min_lr"] = train_config.min_lr * cell["learning_rate"] / train_config.learning_rate
        try:
            configs.append((cell_name(cell), cell_label(cell),
                            with_resolved_dtype(replace(train_config, **overrides[TrainConfig])),
                            replace(model_config, **overrides[GPTConfig])))
        except ValueError as e:
            raise OptionError(f"cell {cell_name(cell)!r}: {e}") from None
    return configs


def run_plan(ablate: AblateConfig, train_config: TrainConfig, model_config: GPTConfig,
             cells: list[dict] | None = None) -> list[StudyRun]:
    """The study's runs at every budget, seed by seed (see study/plan.py); cells default to study_cells."""
    cells = study_cells(ablate) if cells is None else cells
    configs = cell_configs(cells, train_config, model_config)
    plan = study_plan.budget_plan(configs, Path(ablate.study_dir), seeds(ablate), ablate.budgets or [None],
                                  ablate.eval_split)
    return with_finetunes(plan + extra_runs(plan, ablate, configs), cells, ablate)


def extra_runs(plan: list[StudyRun], ablate: AblateConfig, configs: list[tuple]) -> list[StudyRun]:
    """The runs that bring extra_variants' first extra_seeds seeds on to extra_budgets, after the whole plan (a
    study cut short has every cell at every budget first): their constant-rate runs go on from the plan's last."""
    if not ablate.extra_budgets:
        return []
    names = [cell_name(parse_cell(variant)) for variant in ablate.extra_variants]
    known = [config[0] for config in configs]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise OptionError(f"extra_variants: {unknown[0]!r} is not a cell of this study ({', '.join(known)})")
    chosen = [config for config in configs if config[0] in names]
    first = range(ablate.first_seed, ablate.first_seed + ablate.extra_seeds)
    longer = study_plan.budget_plan(chosen, Path(ablate.study_dir), first, ablate.budgets + ablate.extra_budgets,
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
        earlier = {study_plan.cell_dir(n): n for n in names[:i] if FROM_CELL not in cells[names.index(n)]}
        base = cell[FROM_CELL] if cell[FROM_CELL] in earlier.values() else earlier.get(cell[FROM_CELL])
        if base is None:
            raise OptionError(f"cell {names[i]!r}: from_cell={cell[FROM_CELL]!r} must name a cell listed before it "
                              f"that trains from scratch: {', '.join(earlier.values()) or 'none is'}")
        bases[names[i]] = base
    return bases


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
        block = base.model_config.block_size
        window, stride = sliding_geometry(ablate, block)
        finetuned.append(replace(run, start_from=base.dir, finetune=True, budget=base.budget, evaluation={
            "eval_multipliers": [m * block / run.model_config.block_size for m in ablate.eval_multipliers],
            "sliding_window": window, "sliding_stride": stride}))
    return finetuned


def seeds(ablate: AblateConfig) -> range:
    return range(ablate.first_seed, ablate.first_seed + ablate.seeds)


def initial_model(run: StudyRun) -> GPT:
    """The model a run starts from, rebuilt exactly as train() builds it (same seed, same code path)."""
    description = read_description(resolve_data_dir(run.train_config.dataset))
    torch.manual_seed(run.seed)
    # From scratch even for a branch (whose config resumes its start's checkpoint): step 0 of its seed.
    model, _ = build_model(replace(run.train_config, init_from="scratch"), replace(run.model_config),
                           description)
    return model


# ---------------------------------------------------------------------------------------------------- results


def position_tables(plan: list[StudyRun], records: list[dict]) -> dict | None:
    """The learned position table of the first learned run, at initialisation and at the end (from its record)."""
    learned = next(((run, record) for run, record in zip(plan, records, strict=True)
                    if run.model_config.pos_encoding == "learned"), None)
    if learned is None:
        return None
    run, record = learned
    return {"cell": run.variant, "seed": run.seed, "tables": {
        "at initialisation (step 0)": initial_model(run).input_layer.wpe.detach().float(),
        f"after training (step {record['iter_num']})": torch.tensor(record["eval"]["position_table"])}}


def check_before_training(ablate: AblateConfig, plan: list[StudyRun], cells: list[str]) -> None:
    """Everything about the evaluation and the data that can be wrong, found before the first run trains."""
    if ablate.reference and ablate.reference not in cells:
        raise OptionError(f"reference={ablate.reference!r} is not one of the cells {cells}")
    block_sizes = {run.model_config.block_size for run in plan if not run.finetune}
    if len(block_sizes) > 1:
        raise OptionError("cells differ in block_size; the eval lengths are multiples of one block_size (a "
                          "from_cell finetune may grow it)")
    block_size = block_sizes.pop()
    window, stride = sliding_geometry(ablate, block_size)
    if stride > window:
        raise OptionError(f"sliding_stride={stride} is longer than the sliding window ({window} tokens): tokens "
                          "between pieces would go unscored; give a stride of at most the window")
    scored = tuple(dict.fromkeys(("val", ablate.eval_split)))
    for dataset in dict.fromkeys(run.train_config.dataset for run in plan):
        data_dir = resolve_data_dir(dataset)
        check_recorded_tokens(data_dir, read_description(data_dir), ("train", *scored))
        for split in scored:  # an old dataset without test.bin: one line
            load_split(data_dir, split, block_size)
        check_eval_lengths(ablate, len(load_split(data_dir, ablate.eval_split, block_size)), block_size, dataset)


def check_eval_lengths(ablate: AblateConfig, tokens: int, block_size: int, dataset: str) -> None:
    """The longest eval length must fit the split it scores: found here, not after every run has trained, where
    it was a block_size the user never gave."""
    longest = max(eval_lengths(block_size, ablate.eval_multipliers))
    if longest + 1 > tokens:
        raise OptionError(f"eval_multipliers={ablate.eval_multipliers} make an eval length of {longest:,} tokens "
                          f"({max(ablate.eval_multipliers):g} x block_size={block_size}), but the {ablate.eval_split} "
                          f"split of dataset={dataset!r} holds {tokens:,}: give multipliers of at most "
                          f"{(tokens - 1) // block_size}")


def headline_budget(ablate: AblateConfig, train_config: TrainConfig) -> int:
    return ablate.headline_budget or max(ablate.budgets, default=train_config.max_iters)


def lr_sweep_plan(ablate: AblateConfig, train_config: TrainConfig, model_config: GPTConfig,
                  cells: list[dict]) -> list[StudyRun]:
    """The learning-rate sweep's runs (none without --lr_sweep): each cell at each rate, on the sweep's seeds."""
    if not ablate.lr_sweep:
        return []
    sweep_seeds = range(ablate.lr_sweep_first_seed, ablate.lr_sweep_first_seed + ablate.lr_sweep_seeds)
    budget = ablate.lr_sweep_budget or headline_budget(ablate, train_config)
    return study_plan.sweep_plan(cell_configs(cells, train_config, model_config), ablate.lr_sweep,
                                 Path(ablate.study_dir), sweep_seeds, budget)


def own_learning_rates(ablate: AblateConfig, plan: list[StudyRun], train_config: TrainConfig, model_config: GPTConfig,
                       cells: list[dict]) -> tuple[dict | None, int]:
    """The learning-rate sweep's stage (its runs scored on val only, at L = block_size) and each cell's pick:
    ({"picks": {cell: rate}, "val": {cell: {rate: [val loss per seed]}}, "budget", "runs": records}, 0); or
    (None, 0) when --list_runs or --run_index ended this stage, (None, the signal) when one stopped it. Once the
    sweep has finished on disk, --list_runs and --run_index go on to the headline's runs."""
    names = [cell_name(c) for c in cells]
    try:
        staged = ablate.run_index >= 0 or ablate.list_runs
        records, stopped_by = (finished_records(plan, ablate), 0) if staged else (None, 0)
    except UserError:
        records = None
    if records is None:
        records, stopped_by = study_records(plan, ablate, train_config, model_config, names)
    if records is None or stopped_by:
        return None, stopped_by
    block = str(model_config.block_size)
    val: dict[str, dict[float, list[float]]] = {name: {lr: [] for lr in ablate.lr_sweep} for name in names}
    for run, record in zip(plan, records, strict=True):
        assert record["eval"]["split"] == "val", "a choice must never see the test split"
        loss = record["eval"]["protocols"]["nonoverlapping"][block]["loss"]
        val[run.cell][run.train_config.learning_rate].append(loss)
    return {"picks": study_plan.pick_learning_rates(val), "val": val, "budget": plan[0].budget,
            "runs": records}, 0


def own_rate_cells(cells: list[dict], picks: dict[str, float], common: float) -> list[dict]:
    """Each cell at its own learning rate where that is not the common one (the common run is its own best)."""
    return [{**c, "learning_rate": picks[cell_name(c)]} for c in cells if picks[cell_name(c)] != common]


def run_study(ablate: AblateConfig, train_config: TrainConfig, model_config: GPTConfig) -> dict:
    """Train, evaluate, compare, tabulate and plot; the results' dict, or {"interrupted": the signal} when Ctrl-C
    or SIGTERM stopped it."""
    started = time.perf_counter()
    if ablate.threads:
        torch.set_num_threads(ablate.threads)
    train_config = with_resolved_dtype(train_config)  # one dtype for the study, in study.json and every record
    study_dir = Path(ablate.study_dir)
    cells = study_cells(ablate)
    plan = run_plan(ablate, train_config, model_config, cells)  # every cell checked before anything trains
    names = [cell_name(c) for c in cells]
    sweep_plan = lr_sweep_plan(ablate, train_config, model_config, cells)  # the own rates' settings checked too
    check_before_training(ablate, plan, names)
    sweep = None
    if sweep_plan:
        sweep, stopped_by = own_learning_rates(ablate, sweep_plan, train_config, model_config, cells)
        if sweep is None:  # stopped, or --list_runs / --run_index within the sweep: nothing to report
            return {"interrupted": stopped_by}
        own = own_rate_cells(cells, sweep["picks"], train_config.learning_rate)
        plan = run_plan(ablate, train_config, model_config, cells + own)
        sweep["own"] = {cell_name(c): cell_name({**c, "learning_rate": sweep["picks"][cell_name(c)]})
                        if sweep["picks"][cell_name(c)] != train_config.learning_rate else cell_name(c)
                        for c in cells}
    records, stopped_by = study_records(plan, ablate, train_config, model_config, names)
    if stopped_by or records is None:  # stopped, or --list_runs / --run_index: nothing to report
        return {"interrupted": stopped_by}
    block_size = model_config.block_size
    study = {"ablate_config": asdict(ablate), "lengths": eval_lengths(block_size, ablate.eval_multipliers),
             "block_size": block_size, "window": sliding_geometry(ablate, block_size)[0], "checkpoint": CHECKPOINT,
             "confidence": CONFIDENCE, "split": ablate.eval_split,
             "headline_budget": headline_budget(ablate, train_config),
             "labels": {run.variant: run.label for run in plan}, "cells": names,
             "from_cells": from_cells(cells),
             "lr_sweep": None if sweep is None else {k: v for k, v in sweep.items() if k != "runs"}}
    # report_seconds: this invocation's wall time. invocation_seconds: the study's, as the invocation that trained
    # it measured; a report redrawn from records (--report_only) keeps the one it replaces.
    study["report_seconds"] = time.perf_counter() - started
    study["invocation_seconds"] = (read_json(study_dir / "results.json")[0] or {}).get(
        "invocation_seconds") if ablate.report_only else study["report_seconds"]
    every = records + ([] if sweep is None else sweep["runs"])
    study["compute_seconds"] = {"train": sum(r["train_seconds"] for r in every),
                                "eval": sum(r["eval"]["seconds"] for r in every if "eval" in r)}
    return {**study, **report(study_dir, plan, records, study, ablate), "interrupted": 0}


def with_history(plan: list[StudyRun], records: list[dict]) -> list[dict]:
    """The records with each branch's val-estimate curve preceded by those of the runs it continues (a wsd
    branch's own curve starts where its constant-rate segment ended), and its training time theirs added."""
    by_dir = {run.dir: (run, record) for run, record in zip(plan, records, strict=True)}
    full = []
    for run, record in zip(plan, records, strict=True):
        evals, seconds, start = list(record["evals"]), record["train_seconds"], run.start_from
        while start is not None:
            earlier, earlier_record = by_dir[start]
            evals = [e for e in earlier_record["evals"] if e["iter"] < evals[0]["iter"]] + evals
            seconds += earlier_record["train_seconds"]
            start = earlier.start_from
        full.append({**record, "evals": evals, "train_seconds": seconds})
    return full


def report(study_dir: Path, plan: list[StudyRun], records: list[dict], study: dict, ablate: AblateConfig) -> dict:
    """Tables, comparisons and plots of the evaluated runs: the main ones at the headline budget."""
    evaluated = [r for r in with_history(plan, records) if "eval" in r]
    headline = [r for r in evaluated if r["budget"] == study["headline_budget"]]
    cells = list(dict.fromkeys(r["variant"] for r in headline))
    rows = summarize(headline, study["lengths"], ablate.protocols, study["labels"])
    families = study_comparisons(headline, study["cells"], study["lengths"], ablate, study["block_size"],
                                 (study["lr_sweep"] or {}).get("own"), study["from_cells"])
    budgets = budget_summary(evaluated, study, ablate)
    headline_runs = [(run, record) for run, record in zip(plan, records, strict=True)
                     if run.budget == study["headline_budget"] and run.role == "run"]
    headline_plan = [run for run, _ in headline_runs]
    plots = ablate_plots.plot_all(study_dir, rows, headline, families, study,
                                  position_tables(headline_plan, [record for _, record in headline_runs]),
                                  ablate.reference or cells[0], budgets)
    write_results(study_dir, rows, families, headline, header_lines(ablate, headline_plan, headline, study), study,
                  plots, budgets)
    return {"summary": rows, "comparisons": families, "budgets": budgets, "runs": records}


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
    except OutOfTime as e:
        print(e)  # every finished run is recorded: not an error
        return
    except KeyboardInterrupt:
        result = {"interrupted": received[0] if received else signal.SIGINT}
        print("interrupted: finished runs are kept; run the same command again to continue", file=sys.stderr)
    if result["interrupted"]:
        sys.exit(128 + result["interrupted"])
    if "summary" not in result:
        return
    print(f"done in {result['report_seconds']:.0f} s: {Path(ablate.study_dir) / 'results.md'}")
    print((Path(ablate.study_dir) / "results.md").read_text())


if __name__ == "__main__":
    main_guard(main, sys.argv[1:])
