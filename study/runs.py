"""A study's runs on disk: each (cell, seed) trains into <study_dir>/<cell>/seed<N>/ through train.train(),
leaves done.json (the training record with every setting that changes the numbers, and its checkpoint's
identity) and eval.json (its evaluation, keyed by that checkpoint), and is reused when the settings match.

Several processes can work on one study (--jobs, --run_index, or two commands started by hand): a run is
claimed by a lock beside its folder (<cell>/seed<N>.lock, held until the process ends, however it ends), so
two processes never train or evaluate one run, and a run whose lock is free without a done.json (its process
crashed or was stopped) is trained again from scratch by the next process that claims it.
"""

import contextlib
import functools
import hashlib
import json
import multiprocessing
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from errors import OptionError, UserError
from files import atomic_files, hold_lock, remove_stale_temps, write_atomic
from gpt.model import GPTConfig
from study.config import PER_RUN, AblateConfig, parse_time_limit
from study.cost import OutOfTime, TimeBox, plan_view, rebuild_steps, run_estimates
from study.evaluation import eval_lengths, evaluate_model, sliding_geometry, target_counts
from study.plan import STABLE, StudyRun, tokens_per_iter
from text.dataset import load_split, resolve_data_dir, split_identity
from text.tokenizer import read_description
from train import TrainConfig, train, training_dtype
from training.checkpoint import load_checkpoint, read_checkpoint
from training.devices import choose_device, choose_dtype
from training.run_dir import CHECKPOINT, CHECKPOINT_FILES, DONE_FILE, Interrupted

# TrainConfig fields that change no number: where a run logs, and where its data lies and whether its batches are
# prefetched (the data's description, with its splits' SHA-256s, says what data it is; prefetching is bit-identical).
NEUTRAL = ("progress", "out_dir", "wandb_log", "wandb_project", "wandb_run_name", "wandb_mode", "dataset", "prefetch")
# AblateConfig fields that say how a study runs, not what it measures: they are not part of study.json.
OPERATIONAL = ("study_dir", "threads", "jobs", "run_index", "report_only", "list_runs", "overwrite",
               "eval_batch_size", "reference", "time_limit", "keep_checkpoints")
# In a study's identity only when extra_budgets is set (study.json files from before them lack them).
EXTRA_FIELDS = ("extra_budgets", "extra_variants", "extra_seeds")
STUDY_FILE = "study.json"  # what the study in a folder is: a different one there is refused without --overwrite
RESULT_FILES = ("results.md", "results.csv", "results.json")
RUN_RECORDS = (DONE_FILE, "eval.json")
# What a run's done.json holds, every field needed by a later reuse or by the report; eval.json holds EVAL_FIELDS.
RECORD_FIELDS = ("variant", "seed", "budget", "role", "tokens_per_iter", "parameters", "iter_num",
                 "final_val_estimate", "tokens_per_sec", "train_seconds", "evals", "train_losses", "settings",
                 "checkpoint", "provenance")
EVAL_FIELDS = ("key", "split", "seconds", "protocols")
# What git leaves out of a study folder, so that the folder can be committed as it is: its records (study.json,
# each run's done.json and eval.json, the results) are the study's result; checkpoints (~10 MB a run), locks,
# half-written temp files and each run's logs (its curve is in done.json) are not.
STUDY_GITIGNORE = ("# ablate.py: commit a study's records, not its checkpoints, locks and logs\n"
                   "*.pt\n*.lock\n*.tmp\nmetrics.jsonl\ntrain.log\n")


def settings(run: StudyRun) -> dict:
    """Everything that changes a run's numbers: both configs (less NEUTRAL fields), the data's description (with
    its split's identity: rule, fractions, token counts, SHA-256 of each .bin), and, for a run of a study's plan,
    the split it is scored on and the run it continues (its folder, by name); a finetune (ablate's from_cell),
    whose init_from is given at train time (the checkpoint does not exist before), names the run it starts from."""
    found = config_settings(run.train_config, run.model_config)
    found["run"] = {"scored_on": run.split, "starts_from": run.start_from and run.start_from.name}
    if run.finetune:
        found["run"]["finetunes"] = "/".join(run.start_from.parts[-2:])  # <cell>/seed<N>
    return found


def config_settings(train_config: TrainConfig, model_config: GPTConfig) -> dict:
    """settings() of the configs alone (a study's base configs are no run)."""
    return {"train_config": {k: v for k, v in asdict(train_config).items() if k not in NEUTRAL},
            "model_config": asdict(model_config), "data": data_identity(train_config.dataset)}


def data_identity(dataset: str) -> dict:
    """The prepared data's description less the file it was prepared from: the same bytes prepared from another
    path, on another machine, are the same data (the splits' SHA-256s say so), and no path goes into a record."""
    return {k: v for k, v in read_description(resolve_data_dir(dataset)).items() if k != "source"}


def changed_settings(stored: dict, current: dict) -> list[str]:
    """Settings that differ, or that the stored run does not record (made by older code: its value is unknown)."""
    missing = object()
    return sorted(name for section in current for name, value in current[section].items()
                  if stored.get(section, {}).get(name, missing) != value)


def read_json(path: Path) -> tuple[dict | None, str]:
    """(the JSON object in path, ""); (None, "") when there is no such file; (None, what is wrong) when it is
    not one whole JSON object (cut short, empty, edited)."""
    try:
        value = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None, ""
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"{type(e).__name__}: {e}"
    return (value, "") if isinstance(value, dict) else (None, f"a JSON {type(value).__name__}, not an object")


def digest(record: dict) -> str:
    """sha256 of a record's canonical JSON, its own "digest" left out: what tells a record that was written by the
    study from one edited since (a hand-set iter_num, a changed loss)."""
    body = {k: v for k, v in record.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sealed(record: dict) -> str:
    """The record as its file holds it: its JSON with its digest."""
    return json.dumps({**record, "digest": digest(record)}, indent=1)


def read_record(path: Path, required: tuple[str, ...]) -> tuple[dict | None, str]:
    """(the record in path, ""); (None, "") when there is none; (None, what is wrong) when it is damaged, was
    edited after the study wrote it (its digest), or lacks a field the study needs (older code wrote it)."""
    record, damage = read_json(path)
    if record is None:
        return None, damage
    missing = [name for name in (*required, "digest") if name not in record]
    if missing:
        return None, f"it lacks {', '.join(missing)}: written by older code or by hand"
    if record["digest"] != digest(record):
        return None, "its contents no longer match its digest: edited after the study wrote it"
    return record, ""


def checkpoint_identity(path: Path) -> dict:
    """What identifies a checkpoint's training state, wherever it was written: a sha256 over its weights, optimizer
    and random states and step, in a fixed order. Not its file's bytes: those hold the run's folder (its config's
    out_dir), so the same training in another folder, or a checkpoint trained again, would differ. Computed once
    per file as it is on disk (a rewrite is a new inode or mtime): a study checks each run's checkpoint in its
    check before training, its reuse and its evaluation's key, and each time was a whole load."""
    stat = path.stat()
    return dict(state_identity(str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns))


@functools.lru_cache(maxsize=256)
def state_identity(path: str, inode: int, size: int, mtime_ns: int) -> dict:
    """checkpoint_identity of the file at path with this inode, size and mtime (the cache's key)."""
    state = load_checkpoint(Path(path))
    found = hashlib.sha256()

    def add(value) -> None:
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                found.update(repr(key).encode())
                add(value[key])
        elif isinstance(value, list | tuple):
            for item in value:
                add(item)
        elif isinstance(value, torch.Tensor):
            found.update(f"{value.dtype}{tuple(value.shape)}".encode())
            found.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            found.update(repr(value).encode())

    add({key: state[key] for key in ("model", "optimizer", "rng", "iter_num", "best_val_loss")})
    return {"sha256": found.hexdigest(), "of": "weights, optimizer and random states, step"}


# ---------------------------------------------------------------------------------------------------- the study


def with_resolved_dtype(train_config: TrainConfig) -> TrainConfig:
    """The config with its dtype as the runs train in it ("auto" resolved once, for the device): every run of a
    study then trains in the dtype its settings name, and a record says which."""
    dtype, _ = training_dtype(train_config, choose_device(train_config.device))
    return replace(train_config, dtype=str(dtype).removeprefix("torch."))


def study_identity(ablate: "AblateConfig", train_config: TrainConfig, model_config: GPTConfig) -> dict:
    """The settings that change a study's numbers: the study's own (less OPERATIONAL), the base configs the
    cells start from (less what the plan sets per run), and the data."""
    base = config_settings(with_resolved_dtype(train_config), model_config)
    base["train_config"] = {k: v for k, v in base["train_config"].items() if k not in PER_RUN}
    settings = {k: v for k, v in asdict(ablate).items() if k not in OPERATIONAL}
    if not ablate.extra_budgets:  # without them, the study that study.json files from before these fields name
        for name in EXTRA_FIELDS:
            del settings[name]
    return {"ablate_config": settings, **base}


def claim_study(ablate: "AblateConfig", identity: dict, cells: list[str]) -> None:
    """Make study_dir this study's: refuse a folder that holds another one unless --overwrite=True, which
    removes that study's results and plots (its runs stay; those the new plan has with other settings train
    again)."""
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
            replace_study(study_dir, identity, stored, damage, ablate.overwrite)
        if not (study_dir / ".gitignore").exists():  # one the user wrote or changed is theirs
            write_atomic(study_dir / ".gitignore", STUDY_GITIGNORE)


def replace_study(study_dir: Path, identity: dict, stored: dict | None, damage: str, overwrite: bool) -> None:
    """Write study.json for identity over what a folder holds: nothing, or (with --overwrite=True) another
    study, whose results and plots go, or a damaged study.json."""
    if (stored is not None or damage) and not overwrite:
        differ = sorted({*changed_settings(stored, identity), *changed_settings(identity, stored)}) if stored else []
        what = f"is damaged ({damage})" if damage else (
            f"is another study: {', '.join(differ)} differ; cells there: "
            f"{', '.join(stored.get('ablate_config', {}).get('cells', []))}; now: "
            f"{', '.join(identity['ablate_config']['cells'])}")
        raise UserError(f"{study_dir / STUDY_FILE} {what}. Give --overwrite=True to replace its results (its runs "
                        "are kept, and reused where their settings match), or choose another --study_dir")
    if stored is not None or damage:
        for old in [*(study_dir / name for name in RESULT_FILES), *study_dir.glob("*.png")]:
            old.unlink(missing_ok=True)  # the old study's results and plots never stand beside the new ones
    write_atomic(study_dir / STUDY_FILE, json.dumps(identity, indent=1))


def check_modes(plan: list[StudyRun], ablate: "AblateConfig") -> None:
    """--run_index within the plan, --jobs within the runs and the CPUs: checked before anything trains."""
    if ablate.run_index >= len(plan):
        raise OptionError(f"run_index={ablate.run_index} is past the plan's last run, {len(plan) - 1} ({len(plan)} "
                          "runs: see --list_runs=True); for a job array use --array=0-" + str(len(plan) - 1))
    limit = min(len(plan), usable_cpus())
    if ablate.jobs > limit:
        raise OptionError(f"jobs={ablate.jobs} is more than {limit}: the study has {len(plan)} runs and this "
                          f"machine {usable_cpus()} CPUs, each job needs one; give --jobs={limit} or fewer")


def usable_cpus() -> int:
    """The CPUs this process may run on (a scheduler's allocation, not the whole machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# ---------------------------------------------------------------------------------------------------- one run


def claim(run: StudyRun, stack: contextlib.ExitStack, wait: bool = False) -> str | None:
    """Lock the run for this process until the stack closes (None), or the id of the process that holds it.
    The lock sits beside the run's folder, so that redoing the run can empty the folder while holding it."""
    try:
        run.dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create {run.dir.parent}: {e.strerror or e}; choose another --study_dir"
                        ) from None
    return hold_lock(run.dir.with_name(run.dir.name + ".lock"), stack, wait)


def finished_record(run: StudyRun, overwrite: bool) -> dict | None:
    """The run's done.json when it holds this run, finished; None when the run is to be trained (none there, or
    --overwrite=True over other settings). The record is enough: its checkpoint may be absent (pruned, or a study
    folder copied or committed without checkpoints), but one that is present must be the one it recorded. A
    damaged, edited or incomplete record is refused: retraining would delete it."""
    done_file, checkpoint = run.dir / DONE_FILE, run.dir / CHECKPOINT
    record, damage = read_record(done_file, RECORD_FIELDS)
    if damage:
        raise UserError(f"{done_file} is damaged ({damage}): the run's record is lost; delete {run.dir} to "
                        "train it again")
    if record is None:
        return None
    changed = changed_settings(record["settings"], settings(run))
    if changed and not overwrite:
        raise UserError(f"{run.dir} was trained with other settings or older code ({', '.join(changed)}); "
                        "delete it, give --overwrite=True to train it again, or choose another --study_dir")
    if changed:
        return None
    if checkpoint.is_file() and checkpoint_identity(checkpoint) != record["checkpoint"]:
        raise UserError(f"{checkpoint} is not the checkpoint {done_file} recorded; delete {run.dir} to train "
                        "the run again, or remove the checkpoint to keep the record alone")
    return record


def provenance(dtype: str, wall_seconds: float) -> dict:
    """What a run trained on and with: the code's commit (and whether the tree differed from it) when the study
    started, torch, the device, the CPU, the threads, the dtype it trained in and its wall time."""
    cpu = next((line.split(":", 1)[1].strip() for line in cpu_info().splitlines() if line.startswith("model name")),
               platform.processor() or platform.machine())
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {**code_version(), "torch": torch.__version__, "device": device, "cpu": cpu,
            "threads": torch.get_num_threads(), "dtype": dtype, "wall_seconds": wall_seconds}


@functools.cache
def code_version() -> dict:
    """The commit of the code this process runs and whether tracked files differed from it, read once (the study
    and each --jobs worker call it first): a commit made while a study runs is not the code its runs trained with."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                                  cwd=Path(__file__).parent).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "HEAD") or "unknown", "dirty": bool(git("status", "--porcelain", "-uno"))}


def cpu_info() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux
        return ""


def train_run(run: StudyRun, plan: list[StudyRun], bar: tqdm, start: int) -> dict:
    """Train one run from scratch (the caller holds its lock): its record; Interrupted (with the signal) when
    Ctrl-C or SIGTERM stopped it. A branch whose start's checkpoint is not there has it trained again first."""
    if run.start_from is not None:
        rebuild_checkpoint({r.dir: r for r in plan}[run.start_from], plan, bar, start)
    try:
        if run.dir.exists():
            shutil.rmtree(run.dir)  # an unfinished run starts again from scratch
        run.dir.mkdir(parents=True)
    except OSError as e:
        raise UserError(f"cannot empty {run.dir} to train it again: {e.strerror or e}") from None
    started = time.perf_counter()
    result = train_in(run, run.dir, bar, start)
    if result["interrupted"]:
        raise Interrupted(result["interrupted"])
    record = {"variant": run.variant, "seed": run.seed, "budget": run.budget, "role": run.role,
              "tokens_per_iter": tokens_per_iter(run.train_config, run.model_config),
              "parameters": result["model"].get_num_params(),
              "iter_num": result["iter_num"], "final_val_estimate": result["evals"][-1]["val_loss"],
              "tokens_per_sec": result["tokens_per_sec"], "train_seconds": result["train_seconds"],
              "evals": result["evals"], "train_losses": result["train_losses"], "settings": settings(run),
              "checkpoint": checkpoint_identity(run.dir / CHECKPOINT),
              "provenance": provenance(result["dtype"], time.perf_counter() - started)}
    if record["provenance"]["dtype"] != run.train_config.dtype:  # the study resolved it once, before any run
        raise RuntimeError(f"{run.dir} trained in {result['dtype']}, not the study's {run.train_config.dtype}")
    write_atomic(run.dir / DONE_FILE, sealed(record))
    return {**record, "digest": digest(record)}


def train_in(run: StudyRun, folder: Path, bar: tqdm, start: int) -> dict:
    """train()'s result for the run trained in folder (empty; a branch resumes a copy of its start's checkpoint),
    its eval lines in folder/train.log so that the terminal keeps one bar, which follows its metrics.jsonl."""
    config = replace(run.train_config, out_dir=str(folder))
    if run.finetune:  # a new run from the weights of the finished run it starts from
        config = replace(config, init_from=str(run.start_from / CHECKPOINT))
    elif run.start_from is not None:  # a branch: it resumes a copy of the finished run it continues
        with atomic_files(folder / CHECKPOINT) as (temp,):
            shutil.copyfile(run.start_from / CHECKPOINT, temp)
    stop = threading.Event()
    watcher = threading.Thread(target=follow, args=(folder / "metrics.jsonl", bar, start, stop), daemon=True)
    watcher.start()
    try:
        with (folder / "train.log").open("w") as log, contextlib.redirect_stdout(log):
            return train(config, replace(run.model_config))
    finally:
        stop.set()
        watcher.join()


def rebuild_checkpoint(run: StudyRun, plan: list[StudyRun], bar: tqdm, start: int) -> None:
    """Make sure a finished run's checkpoint is there for the runs that start from it: one pruned or never copied
    (records alone continue a study) is trained again, after its own start's, in a temporary folder beside it, and
    taken only if its bytes are those its record names (training is deterministic on one machine and torch).
    Interrupted when a signal stopped it."""
    if (run.dir / CHECKPOINT).is_file():
        return
    if run.start_from is not None:
        rebuild_checkpoint({r.dir: r for r in plan}[run.start_from], plan, bar, start)
    with contextlib.ExitStack() as stack:
        claim(run, stack, wait=True)
        record, _ = read_record(run.dir / DONE_FILE, RECORD_FIELDS)
        if (run.dir / CHECKPOINT).is_file() or record is None:  # rebuilt by another process, or never finished
            return
        with tempfile.TemporaryDirectory(dir=run.dir.parent, prefix=f"{run.dir.name}.rebuild") as folder:
            result = train_in(run, Path(folder), bar, start)
            if result["interrupted"]:
                raise Interrupted(result["interrupted"])
            if checkpoint_identity(Path(folder) / CHECKPOINT) != record["checkpoint"]:
                raise UserError(f"{run.dir / CHECKPOINT} is not there and training it again gave another state "
                                f"than its record names (trained on {record['provenance']['cpu']}, torch "
                                f"{record['provenance']['torch']}); copy the checkpoint in, or continue there")
            os.replace(Path(folder) / CHECKPOINT, run.dir / CHECKPOINT)


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


def run_evaluation(run: StudyRun, ablate: "AblateConfig") -> "AblateConfig":
    """The study's evaluation settings as this run uses them (a sweep's run: its own lengths and protocols)."""
    return replace(ablate, **run.evaluation)


def eval_key(run: StudyRun, ablate: "AblateConfig", record: dict) -> dict:
    """What an evaluation depends on: the checkpoint it scored (the file's bytes; without the file, the one the run's
    record names), the split, the protocols."""
    ablate = run_evaluation(run, ablate)
    block_size = run.model_config.block_size
    window, stride = sliding_geometry(ablate, block_size)
    description = data_identity(run.train_config.dataset)
    checkpoint = run.dir / CHECKPOINT
    identity = checkpoint_identity(checkpoint) if checkpoint.is_file() else record["checkpoint"]
    return {"checkpoint": CHECKPOINT, "checkpoint_identity": identity,
            "split": run.split, "split_identity": split_identity(description), "data": description,
            "lengths": eval_lengths(block_size, ablate.eval_multipliers), "protocols": ablate.protocols,
            "window": window, "stride": stride}


def cached_eval(run: StudyRun, key: dict) -> dict | None:
    """eval.json when it holds the evaluation of this run's checkpoint under key. Where the checkpoint is there, a
    damaged or edited eval.json is only its cache, computed again (and said so); without it, it is refused."""
    eval_file = run.dir / "eval.json"
    cached, damage = read_record(eval_file, EVAL_FIELDS)
    if damage and not (run.dir / CHECKPOINT).is_file():
        raise UserError(f"{eval_file} is damaged ({damage}) and the run has no {CHECKPOINT} to evaluate again; "
                        f"delete {run.dir} to train it again")
    if damage:
        print(f"{eval_file} is damaged ({damage}); evaluating the checkpoint again", file=sys.stderr)
    return cached if cached is not None and cached["key"] == key else None


def evaluate_run(run: StudyRun, ablate: "AblateConfig", record: dict) -> dict:
    """The run's final model on its whole split (run.split: test, or val for a choice) under each protocol
    and length, with the bytes and characters the scored tokens stand for (and a learned encoding's final position
    table, for the report's plot); cached in eval.json."""
    key = eval_key(run, ablate, record)
    cached = cached_eval(run, key)
    if cached is not None:
        return cached
    checkpoint = run.dir / CHECKPOINT
    if not checkpoint.is_file():
        raise UserError(f"{run.dir} has no {CHECKPOINT} (pruned, or not copied) and no evaluation under these "
                        f"settings; copy its {CHECKPOINT} back, or delete {run.dir} to train it again")
    device = choose_device(run.train_config.device)
    dtype = choose_dtype(run.train_config.dtype, device)
    model = read_checkpoint(checkpoint)[0].to(device)
    data = load_split(resolve_data_dir(run.train_config.dataset), run.split, max(key["lengths"]))
    started = time.perf_counter()
    protocols = evaluate_model(model, data, key["lengths"], run_evaluation(run, ablate), device, dtype)
    result = {"key": key, "split": run.split, **target_counts(data, key["data"]),
              "seconds": time.perf_counter() - started, "protocols": protocols}
    if run.model_config.pos_encoding == "learned" and run.role == "run":
        rows = model.input_layer.wpe.detach().float().cpu().tolist()  # 5 digits: enough for a similarity plot
        result["position_table"] = [[float(f"{x:.5g}") for x in row] for row in rows]
    write_atomic(run.dir / "eval.json", sealed(result))
    return {**result, "digest": digest(result)}


def finish_run(run: StudyRun, plan: list[StudyRun], ablate: "AblateConfig", bar: tqdm, start: int) -> dict:
    """The run's record with its evaluation, training it first unless finished (the caller holds its lock);
    Interrupted when a signal stopped it."""
    if run.dir.is_dir():
        remove_stale_temps(run.dir, RUN_RECORDS)  # left by a kill -9 during a write
    record = finished_record(run, ablate.overwrite)
    if record is None:
        record = train_run(run, plan, bar, start)
        # The line and its newline in one write: --jobs workers share the parent's stdout, a pipe, and with Python
        # unbuffered (PYTHONUNBUFFERED) tqdm's write(line) then write("\n") let another worker's line in between.
        bar.write(f"trained {run.dir}: {record['iter_num']} steps, final val estimate "
                  f"{record['final_val_estimate']:.4f}\n", end="")
        sys.stdout.flush()
    if run.role != STABLE:  # a constant-rate segment is a means to its branches, not a result
        bar.set_postfix_str("evaluating")
        record["eval"] = evaluate_run(run, ablate, record)
    return record


# ---------------------------------------------------------------------------------------------------- many runs


def take_free_runs(plan: list[StudyRun], ablate: "AblateConfig", records: dict[int, dict], wait: bool, bar: tqdm,
                   max_iters: int, time_box: TimeBox | None = None) -> None:
    """Finish every run of plan not yet in records that no other process holds (wait: and then those, once
    their holder lets go), adding them to records; Interrupted when a signal stopped a training. A time box starts no
    run estimated to end past it (nor a branch of a run not finished)."""
    for i, run in enumerate(plan):
        if i in records or ((not wait or time_box) and unfinished_start(run)):
            continue
        if time_box is not None and not time_box.allows(i) and not (run.dir / DONE_FILE).is_file():
            continue  # a run another job finished since the box was set is only read, however late
        with contextlib.ExitStack() as stack:
            holder = claim(run, stack)
            if holder is not None and not wait:
                continue
            label = f"run {i + 1}/{len(plan)}: {run.variant}, seed {run.seed}"
            if holder is not None:
                bar.set_description(f"{label}: waiting for process {holder}")
                claim(run, stack, wait=True)
            bar.set_description(label)
            try:
                records[i] = finish_run(run, plan, ablate, bar, i * max_iters)
            except Interrupted:
                print(f"interrupted: {run.dir} is unfinished and will start again on the next run of ablate.py")
                raise
            bar.n = (i + 1) * max_iters  # a time budget can end a run early
        if not ablate.keep_checkpoints:
            prune_checkpoints(plan, run)


def prune_checkpoints(plan: list[StudyRun], finished: StudyRun) -> None:
    """--keep_checkpoints=False: remove the checkpoints of the just-finished run and of the run it continues, each
    once no run of the plan still needs it (every run that starts from it finished) and no process holds it. A run
    whose checkpoint is gone keeps its record and evaluation, which is all that reuse and the report need."""
    for run in [finished, *(r for r in plan if r.dir == finished.start_from)]:
        if any(not (other.dir / DONE_FILE).is_file() for other in plan if other.start_from == run.dir):
            continue  # a branch or a later segment still copies it
        with contextlib.ExitStack() as stack:
            if claim(run, stack) is None:  # not being evaluated by another process
                for name in CHECKPOINT_FILES:
                    (run.dir / name).unlink(missing_ok=True)


def unfinished_start(run: StudyRun) -> bool:
    """A branch whose constant-rate run is not finished (another process holds it): it waits for the second pass,
    which meets that run first (the plan puts it earlier) and waits for it."""
    return run.start_from is not None and not (run.start_from / DONE_FILE).is_file()


def train_and_evaluate(plan: list[StudyRun], ablate: "AblateConfig", max_iters: int, show: bool,
                       time_box: TimeBox | None) -> list[dict]:
    """Every run's record with its evaluation, in plan order; Interrupted when a signal stopped one; OutOfTime
    when the time box left runs unstarted. Runs that another process holds are skipped at first and
    waited for at the end."""
    records: dict[int, dict] = {}
    with tqdm(total=len(plan) * max_iters, unit="step", dynamic_ncols=True, disable=not show) as bar:
        for wait in (False, True):
            take_free_runs(plan, ablate, records, wait, bar, max_iters, time_box)
    if len(records) < len(plan):
        raise OutOfTime(len(records), len(plan))
    return [records[i] for i in range(len(plan))]


def stop_by_exception(signum: int, frame) -> None:
    raise KeyboardInterrupt  # out of an evaluation or a wait; train() handles the signals itself while it runs


def job(plan: list[StudyRun], ablate: "AblateConfig", threads: int, time_box: TimeBox | None) -> None:
    """One of --jobs processes: finishes every run that no other process holds, on its share of the threads."""
    torch.set_num_threads(threads)
    code_version()  # before any run: the code this worker imported
    signal.signal(signal.SIGTERM, stop_by_exception)
    try:
        take_free_runs(plan, ablate, {}, False, tqdm(disable=True), 0, time_box)
        stopped_by = 0
    except Interrupted as stopped:
        stopped_by = stopped.args[0]
    except KeyboardInterrupt:
        stopped_by = signal.SIGTERM
    except UserError:
        sys.exit(2)  # the study's own pass after the jobs meets the same mistake and says it once
    sys.exit(128 + stopped_by if stopped_by else 0)


def run_jobs(plan: list[StudyRun], ablate: "AblateConfig", time_box: TimeBox | None) -> None:
    """Train and evaluate the plan in --jobs processes at once; a signal to this process stops them all. What
    a failed job left is for the caller's train_and_evaluate, which reads back the rest."""
    threads = ablate.threads or max(1, usable_cpus() // ablate.jobs)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter each: no forked torch thread pools
    workers = [context.Process(target=job, args=(plan, ablate, threads, time_box)) for _ in range(ablate.jobs)]
    for worker in workers:
        worker.start()
    try:
        for worker in workers:
            worker.join()
    finally:
        for worker in workers:
            if worker.is_alive():
                os.kill(worker.pid, signal.SIGTERM)
        for worker in workers:
            worker.join()


def with_starts(plan: list[StudyRun], index: int) -> list[StudyRun]:
    """Run index of the plan and the runs it continues (a wsd branch's constant-rate segments), earliest first."""
    by_dir = {run.dir: run for run in plan}
    runs = [plan[index]]
    while runs[0].start_from is not None:
        runs.insert(0, by_dir[runs[0].start_from])
    return runs


def train_one(plan: list[StudyRun], ablate: "AblateConfig", max_iters: int, show: bool) -> None:
    """--run_index=K: train and evaluate run K alone (a job array's task), after the runs it continues (trained
    here unless finished; waited for while another task trains them); Interrupted when a signal stopped it."""
    *starts, run = with_starts(plan, ablate.run_index)
    try:
        with contextlib.ExitStack() as stack:
            holder = claim(run, stack)
            if holder is not None:
                raise UserError(f"run {ablate.run_index} ({run.dir}) is being trained by process {holder}; each "
                                "--run_index may run once at a time")
            bar = stack.enter_context(tqdm(total=max_iters, unit="step", dynamic_ncols=True, disable=not show))
            for start in starts:
                with contextlib.ExitStack() as start_stack:
                    claim(start, start_stack, wait=True)
                    finish_run(start, plan, ablate, bar, 0)
            finish_run(run, plan, ablate, bar, 0)
    except Interrupted:
        print("interrupted: the run is unfinished and will start again on the next run of ablate.py")
        raise


def finished_records(plan: list[StudyRun], ablate: "AblateConfig") -> list[dict]:
    """--report_only: every run's record and evaluation as they are on disk; a UserError naming the runs that
    are unfinished, unevaluated or in progress."""
    records, missing = [], []
    for i, run in enumerate(plan):
        with contextlib.ExitStack() as stack:
            record = None
            if run.dir.is_dir() and claim(run, stack) is None:
                record = finished_record(run, overwrite=False)
            if record is not None and run.role == STABLE:  # never evaluated
                records.append(record)
                continue
            evaluation = None if record is None else cached_eval(run, eval_key(run, ablate, record))
            if evaluation is None:
                missing.append(i)
            else:
                records.append({**record, "eval": evaluation})
    if missing:
        shown = ", ".join(f"{i} ({plan[i].dir})" for i in missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise UserError(f"{len(missing)} of {len(plan)} runs are unfinished, unevaluated or running: {shown}; "
                        "train them (--run_index=K for each, or without --report_only), then report")
    return records


def study_records(plan: list[StudyRun], ablate: "AblateConfig", train_config: TrainConfig, model_config: GPTConfig,
                  cells: list[str]) -> tuple[list | None, int]:
    """Claim the study folder (the study of these cells), then the runs' records as the study's mode asks:
    (records, 0) to report; (None, 0) after --list_runs or --run_index, which report nothing; ([], the signal)
    when one stopped the study. A study with a learning-rate sweep calls this once per stage."""
    check_modes(plan, ablate)
    code_version()  # before any run: the code this process imported
    if ablate.list_runs:
        finished = records_on_disk(plan, ablate)
        print(plan_view(plan, run_estimates(plan, ablate, finished), rebuild_steps(plan, finished), ablate.jobs))
        return None, 0
    limit = parse_time_limit(ablate.time_limit)
    started = time.time()
    claim_study(ablate, study_identity(ablate, train_config, model_config), cells)
    for run in [plan[ablate.run_index]] if ablate.run_index >= 0 else plan:
        finished_record(run, ablate.overwrite)  # a damaged or mismatched record stops the study before any training
    max_iters, show = max(run.budget for run in plan), train_config.progress
    if ablate.report_only:
        return finished_records(plan, ablate), 0
    try:
        if ablate.run_index >= 0:
            train_one(plan, ablate, max_iters, show)
            return None, 0
        time_box = TimeBox(started + limit, run_estimates(plan, ablate, records_on_disk(plan, ablate))) if limit \
            else None
        if ablate.jobs > 1:
            run_jobs(plan, ablate, time_box)
        return train_and_evaluate(plan, ablate, max_iters, show, time_box), 0
    except Interrupted as stopped:  # ablate.py reports the signal with its exit status
        return [], stopped.args[0]


def records_on_disk(plan: list[StudyRun], ablate: "AblateConfig") -> list[dict | None]:
    """Each run's finished record, with "eval" where its evaluation under the study's settings is there; None for
    a run not finished. For estimates: nothing is locked, trained or written."""
    found = []
    for run in plan:
        record = finished_record(run, ablate.overwrite) if run.dir.is_dir() else None
        evaluation = None if record is None or run.role == STABLE else cached_eval(run, eval_key(run, ablate,
                                                                                                  record))
        found.append(None if record is None else {**record, **({"eval": evaluation} if evaluation else {})})
    return found
