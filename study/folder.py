"""The study folder: study.json says which study it holds (its settings less how it runs, the base configs its
cells start from, the data), one study at a time; the dtype every run trains in is resolved once, for all."""

import contextlib
import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from errors import OptionError, UserError
from files import hold_lock, write_atomic
from model import GPTConfig
from study.cells import with_resolved_dtype
from study.config import PER_RUN, AblateConfig
from study.plan import StudyRun
from study.records import changed_settings, config_settings, read_json
from text.corpus import usable_cpus
from train import TrainConfig

# AblateConfig fields that say how a study runs or is reported, not what it measures: they are not part of study.json.
OPERATIONAL = ("study_dir", "threads", "jobs", "run_index", "report_only", "list_runs", "overwrite",
               "eval_batch_size", "labels", "reference", "compare_to", "target_loss", "time_limit", "keep_checkpoints")
# In a study's identity only when extra_budgets is set (study.json files from before them lack them).
EXTRA_FIELDS = ("extra_budgets", "extra_variants", "extra_seeds")
STUDY_FILE = "study.json"  # what the study in a folder is: a different one there is refused without --overwrite
RESULT_FILES = ("results.md", "results.csv", "results.json")
# What git leaves out of a study folder, so that the folder can be committed as it is: its records (study.json,
# each run's done.json and eval.json, the results) are the study's result; checkpoints (~10 MB a run), locks,
# half-written temp files and each run's logs (its curve is in done.json) are not.
STUDY_GITIGNORE = ("# ablate.py: commit a study's records, not its checkpoints, locks and logs\n"
                   "*.pt\n*.lock\n*.tmp\nmetrics.jsonl\ntrain.log\n")


def study_identity(ablate: AblateConfig, train_config: TrainConfig, model_config: GPTConfig) -> dict:
    """The settings that change a study's numbers: the study's own (less OPERATIONAL), the base configs the
    cells start from (less what the plan sets per run), and the data."""
    base = config_settings(with_resolved_dtype(train_config), model_config)
    base["train_config"] = {k: v for k, v in base["train_config"].items() if k not in PER_RUN}
    settings = {k: v for k, v in asdict(ablate).items() if k not in OPERATIONAL}
    if not ablate.extra_budgets:  # without them, the study that study.json files from before these fields name
        for name in EXTRA_FIELDS:
            del settings[name]
    return {"ablate_config": settings, **base}


def claim_study(ablate: AblateConfig, identity: dict, cells: list[str], retrained: int = 0) -> None:
    """Make study_dir this study's: refuse a folder that holds another one unless --overwrite=True, which
    removes that study's results and plots (its runs stay; the `retrained` finished runs the new plan has with
    other settings train again, in their folders)."""
    study_dir = Path(ablate.study_dir)
    if study_dir.exists() and not study_dir.is_dir():
        raise UserError(f"study_dir={ablate.study_dir!r} is a file, not a folder; choose another --study_dir")
    try:
        study_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create study_dir={ablate.study_dir!r}: {e.strerror or e}; choose another "
                        "--study_dir") from None
    try:
        tempfile.TemporaryFile(dir=study_dir).close()  # a read-only folder or file system: said before any work
    except OSError as e:
        raise UserError(f"cannot write in study_dir={ablate.study_dir!r}: {e.strerror or e}; make it writable or "
                        "choose another --study_dir") from None
    identity = {**identity, "ablate_config": {**identity["ablate_config"], "cells": cells}}
    identity = json.loads(json.dumps(identity))  # as it reads back from study.json (tuples become lists)
    with contextlib.ExitStack() as stack:  # two studies started at once: the second sees the first's study.json
        hold_lock(study_dir / "study.lock", stack, wait=True)
        stored, damage = read_json(study_dir / STUDY_FILE)
        if stored != identity:
            replace_study(study_dir, identity, stored, damage, ablate.overwrite, retrained)
        if not (study_dir / ".gitignore").exists():  # one the user wrote or changed is theirs
            write_atomic(study_dir / ".gitignore", STUDY_GITIGNORE)


def replace_study(study_dir: Path, identity: dict, stored: dict | None, damage: str, overwrite: bool,
                  retrained: int) -> None:
    """Write study.json for identity over what a folder holds: nothing, or (with --overwrite=True) another
    study, whose results and plots go, or a damaged study.json."""
    if (stored is not None or damage) and not overwrite:
        differ = sorted({*changed_settings(stored, identity), *changed_settings(identity, stored)}) if stored else []
        there = stored.get("ablate_config", {}).get("cells", []) if stored else []
        now = identity["ablate_config"]["cells"]
        cells = "".join(f"; cells {where}: {', '.join(found)}" for where, found in (
            ("only there", [c for c in there if c not in now]), ("only now", [c for c in now if c not in there]))
            if found)  # a study of many cells: what changed, not every cell twice
        what = f"is damaged ({damage})" if damage else f"is another study: {', '.join(differ)} differ{cells}"
        runs = (f"{retrained} of its finished runs have other settings and would be trained again in their folders, "
                "replacing them; the others are reused" if retrained else "its finished runs are reused")
        raise UserError(f"{study_dir / STUDY_FILE} {what}. Give --overwrite=True to replace its results ({runs}), "
                        "or choose another --study_dir")
    if stored is not None or damage:
        for old in [*(study_dir / name for name in RESULT_FILES), *study_dir.glob("*.png")]:
            old.unlink(missing_ok=True)  # the old study's results and plots never stand beside the new ones
    write_atomic(study_dir / STUDY_FILE, json.dumps(identity, indent=1))


def check_own_folders(plan: list[StudyRun], study_dir: Path) -> None:
    """Refuse a run whose folder, or a folder above it inside study_dir, is a link: reusing what it points to is
    safe, but pruning, training again and rebuilding would change that folder, another study's run or another run
    of this one. Found before anything is written."""
    checked: set[Path] = set()
    for run in plan:
        folder = study_dir
        for part in run.dir.relative_to(study_dir).parts:
            folder = folder / part
            if folder in checked:
                continue
            checked.add(folder)
            if folder.is_symlink():
                target = folder.resolve()
                raise UserError(f"{folder} is a link to {target}: a study writes, prunes and trains only inside its "
                                f"own folder; copy the run in instead (rm {folder} && cp -r {target} {folder}), or "
                                "choose another --study_dir")


def check_modes(plan: list[StudyRun], ablate: AblateConfig) -> None:
    """--run_index within the plan, --jobs within the runs and the CPUs: checked before anything trains."""
    if ablate.run_index >= len(plan):
        raise OptionError(f"run_index={ablate.run_index} is past the plan's last run, {len(plan) - 1} ({len(plan)} "
                          "runs: see --list_runs=True); for a job array use --array=0-" + str(len(plan) - 1))
    limit = min(len(plan), usable_cpus())
    if ablate.jobs > limit:
        raise OptionError(f"jobs={ablate.jobs} is more than {limit}: the study has {len(plan)} runs and this "
                          f"machine {usable_cpus()} CPUs, each job needs one; give --jobs={limit} or fewer")

