"""A study from its config to its report: the learning-rate sweep's stage first where there is one (its runs
scored on val, each cell's own rate picked), then every run of the plan, trained and evaluated, then the report.
Everything that can be wrong with the cells, the evaluation or the data is found before the first run trains."""

import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from errors import OptionError, UserError
from model import GPTConfig
from study.cells import cell_name, given_labels, study_cells, with_resolved_dtype
from study.config import AblateConfig
from study.evaluation import eval_lengths, sliding_geometry, untrained_buckets
from study.folder import check_own_folders
from study.jobs import finished_records, study_records
from study.paired_stats import CONFIDENCE
from study.plan import StudyRun, from_cells, headline_budget, lr_sweep_plan, own_steps, pick_learning_rates, run_plan
from study.records import read_json
from study.report import report_study
from text.dataset import check_recorded_tokens, load_split, resolve_data_dir
from text.tokenizer import read_description
from train import TrainConfig
from training.run_dir import CHECKPOINT

# The AblateConfig fields that say how the runs were trained, not what was trained or how it is reported
HOW_IT_RAN = ("threads", "jobs", "run_index", "report_only", "list_runs", "time_limit", "keep_checkpoints",
              "overwrite", "eval_batch_size")


def check_before_training(ablate: AblateConfig, plan: list[StudyRun], cells: list[str]) -> None:
    """Everything about the evaluation and the data that can be wrong, found before the first run trains."""
    if ablate.reference and ablate.reference not in cells:
        raise OptionError(f"reference={ablate.reference!r} is not one of the cells {cells}")
    unknown = [name for name in ablate.compare_to if name not in cells]
    if unknown:
        raise OptionError(f"compare_to: {unknown[0]!r} is not one of the cells {cells}")
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
    for line in untrained_buckets(plan, ablate):  # named, not refused: studies made before it keep their report
        print(f"note: {line}", file=sys.stderr)


def check_eval_lengths(ablate: AblateConfig, tokens: int, block_size: int, dataset: str) -> None:
    """The longest eval length must fit the split it scores: found here, not after every run has trained, where
    it was a block_size the user never gave."""
    longest = max(eval_lengths(block_size, ablate.eval_multipliers))
    if longest + 1 > tokens:
        raise OptionError(f"eval_multipliers={ablate.eval_multipliers} make an eval length of {longest:,} tokens "
                          f"({max(ablate.eval_multipliers):g} x block_size={block_size}), but the {ablate.eval_split} "
                          f"split of dataset={dataset!r} holds {tokens:,}: give multipliers of at most "
                          f"{(tokens - 1) // block_size}")


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
    return {"picks": pick_learning_rates(val), "val": val, "budget": plan[0].budget,
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
    labels = given_labels(ablate, cells)  # a label of no cell is refused before anything trains
    plan = run_plan(ablate, train_config, model_config, cells)  # every cell checked before anything trains
    names = [cell_name(c) for c in cells]
    sweep_plan = lr_sweep_plan(ablate, train_config, model_config, cells)  # the own rates' settings checked too
    check_before_training(ablate, plan, names)
    check_own_folders([*plan, *sweep_plan], study_dir)
    sweep = None
    if sweep_plan:
        sweep, stopped_by = own_learning_rates(ablate, sweep_plan, train_config, model_config, cells)
        if sweep is None:  # stopped, or --list_runs / --run_index within the sweep: nothing to report
            return {"interrupted": stopped_by}
        own = own_rate_cells(cells, sweep["picks"], train_config.learning_rate)
        plan = run_plan(ablate, train_config, model_config, cells + own)
        check_own_folders(plan, study_dir)  # the cells at their own rates: folders of their own
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
             "headline_budget": headline_budget(ablate, train_config), "own_steps": own_steps(ablate, cells),
             "labels": {run.variant: labels.get(run.variant, run.label) for run in plan}, "cells": names,
             "from_cells": from_cells(cells),
             "lr_sweep": None if sweep is None else {k: v for k, v in sweep.items() if k != "runs"}}
    # report_seconds: this invocation's wall time. invocation_seconds: the study's, as the invocation that trained
    # it measured; a report redrawn from records (--report_only) keeps the one it replaces.
    study["report_seconds"] = time.perf_counter() - started
    recorded = (read_json(study_dir / "results.json")[0] or {}) if ablate.report_only else {}
    study["invocation_seconds"] = recorded.get("invocation_seconds") if ablate.report_only else study["report_seconds"]
    # How that invocation ran (--jobs=2, its time limit) is its record too: a report redrawn keeps it
    study["ablate_config"].update({k: v for k, v in recorded.get("ablate_config", {}).items() if k in HOW_IT_RAN})
    every = records + ([] if sweep is None else sweep["runs"])
    study["compute_seconds"] = {"train": sum(r["train_seconds"] for r in every),
                                "eval": sum(r["eval"]["seconds"] for r in every if "eval" in r)}
    return {**study, **report_study(study_dir, plan, records, study, ablate), "interrupted": 0}
