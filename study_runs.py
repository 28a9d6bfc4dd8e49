"""A study's runs on disk: each (cell, seed) trains into <study_dir>/<cell>/seed<N>/ through train.train(),
leaves done.json (the training record with every setting that changes the numbers) and eval.json (its
evaluation), and is reused when the settings match."""

import contextlib
import itertools
import json
import shutil
import threading
import time
import typing
from dataclasses import asdict, replace
from pathlib import Path

from tqdm.auto import tqdm

from checkpoint import read_checkpoint
from dataset import load_split, resolve_data_dir, split_identity
from devices import choose_device, choose_dtype
from errors import UserError
from files import atomic_files, write_atomic
from study_eval import eval_lengths, evaluate_model, sliding_geometry, target_counts
from study_plan import STABLE, tokens_per_iter
from study_report import CHECKPOINT
from tokenizer import read_description
from train import train

if typing.TYPE_CHECKING:
    from ablate import AblateConfig

NEUTRAL = ("progress", "out_dir", "wandb_log", "wandb_project", "wandb_run_name", "wandb_mode")  # change no number


def settings(run: dict) -> dict:
    """Everything that changes a run's numbers: both configs (less NEUTRAL fields), the data's description (with
    its split's identity: rule, fractions, token counts, SHA-256 of each .bin), the split it is scored on, and
    the run it continues (its folder, by name)."""
    start = run["start_from"]
    return {"train_config": {k: v for k, v in asdict(run["train_config"]).items() if k not in NEUTRAL},
            "model_config": asdict(run["model_config"]),
            "data": read_description(resolve_data_dir(run["train_config"].dataset)),
            "run": {"scored_on": run["split"], "starts_from": None if start is None else start.name}}


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
    if run["start_from"] is not None:  # a branch: it resumes a copy of the run it continues
        with atomic_files(run["dir"] / CHECKPOINT) as (temp,):
            shutil.copyfile(run["start_from"] / CHECKPOINT, temp)
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
    record = {"variant": run["variant"], "seed": run["seed"], "budget": run["budget"], "role": run["role"],
              "tokens_per_iter": tokens_per_iter(run["train_config"], run["model_config"]),
              "parameters": result["model"].get_num_params(),
              "iter_num": result["iter_num"], "final_val_estimate": result["evals"][-1]["val_loss"],
              "tokens_per_sec": result["tokens_per_sec"], "train_seconds": result["train_seconds"],
              "evals": result["evals"], "train_losses": result["train_losses"], "settings": settings(run)}
    write_atomic(done_file, json.dumps(record, indent=1))
    return record, 0


def evaluate_run(run: dict, ablate: "AblateConfig") -> dict:
    """The run's final model on its whole split (run["split"]) under each protocol and length; cached in
    eval.json."""
    block_size = run["model_config"].block_size
    lengths = eval_lengths(block_size, ablate.eval_multipliers)
    window, stride = sliding_geometry(ablate, block_size)
    data_dir = resolve_data_dir(run["train_config"].dataset)
    description = read_description(data_dir)
    key = {"checkpoint": CHECKPOINT, "lengths": lengths, "protocols": ablate.protocols, "window": window,
           "stride": stride, "split": run["split"], "split_identity": split_identity(description)}
    eval_file = run["dir"] / "eval.json"
    if eval_file.exists():
        cached = json.loads(eval_file.read_text())
        if cached["key"] == key:
            return cached
    device = choose_device(run["train_config"].device)
    dtype = choose_dtype(run["train_config"].dtype, device)
    model = read_checkpoint(run["dir"] / CHECKPOINT)[0].to(device)
    data = load_split(data_dir, run["split"], max(lengths))
    started = time.perf_counter()
    protocols = evaluate_model(model, data, lengths, ablate, device, dtype)
    result = {"key": key, "split": run["split"], **target_counts(data, description),
              "seconds": time.perf_counter() - started, "protocols": protocols}
    write_atomic(eval_file, json.dumps(result))
    return result


def train_and_evaluate(plan: list[dict], ablate: "AblateConfig", show: bool) -> tuple[list[dict], int]:
    """Every run's record with its evaluation, in plan order, and 0; or ([], the signal) when one stopped it."""
    records = []
    steps = [0] + list(itertools.accumulate(run["budget"] for run in plan))
    bar = tqdm(total=steps[-1], unit="step", dynamic_ncols=True, disable=not show)
    for i, run in enumerate(plan):
        start = steps[i]
        bar.set_description(f"run {i + 1}/{len(plan)}: {run['variant']}, seed {run['seed']}")
        record, stopped_by = train_run(run, bar, start)
        if record is None:
            bar.close()
            print(f"interrupted: {run['dir']} is unfinished and will start again on the next run of ablate.py")
            return [], stopped_by
        bar.n = steps[i + 1]  # a time budget can end a run early
        bar.set_postfix_str("evaluating")
        if run["role"] != STABLE:  # a stable segment is a means to its branches, not a result
            record["eval"] = evaluate_run(run, ablate)
        records.append(record)
    bar.close()
    return records, 0

