"""One run of a study: claimed by a lock beside its folder (<cell>/seed<N>.lock, held until the process ends,
however it ends), trained through train.train() into <study_dir>/<cell>/seed<N>/ (a wsd branch from a copy of its
start's checkpoint, rebuilt from the records where it is missing), recorded in done.json, then evaluated into
eval.json. A finished run whose settings match is reused; one whose lock is free without a done.json (its process
crashed or was stopped) is trained again from scratch by the next process that claims it."""

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from tqdm.auto import tqdm

from errors import UserError
from files import atomic_files, hold_lock, remove_stale_temps, write_atomic
from study.config import AblateConfig
from study.evaluation import eval_lengths, evaluate_model, sliding_geometry, target_counts
from study.plan import STABLE, StudyRun
from study.records import (
    EVAL_FIELDS,
    RECORD_FIELDS,
    RUN_RECORDS,
    changed_settings,
    checkpoint_identity,
    checkpoint_step,
    data_identity,
    digest,
    provenance,
    read_record,
    sealed,
    settings,
)
from text.dataset import load_split, resolve_data_dir, split_identity
from train import tokens_per_iter, tokens_trained, train
from training.checkpoint import read_checkpoint
from training.devices import choose_device, choose_dtype
from training.run_dir import CHECKPOINT, DONE_FILE, Interrupted


def claim(run: StudyRun, stack: contextlib.ExitStack, wait: bool = False) -> str | None:
    """Lock the run for this process until the stack closes (None), or the id of the process that holds it.
    The lock sits beside the run's folder, so that redoing the run can empty the folder while holding it."""
    try:
        run.dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create {run.dir.parent}: {e.strerror or e}; choose another --study_dir"
                        ) from None
    return hold_lock(run.dir.with_name(run.dir.name + ".lock"), stack, wait)


def has_other_settings(run: StudyRun) -> bool:
    """Whether the run's folder holds a whole finished record made with other settings (what --overwrite=True
    trains again, in that folder)."""
    record, _ = read_record(run.dir / DONE_FILE, RECORD_FIELDS)
    return record is not None and bool(changed_settings(record["settings"], settings(run)))


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
    if not checkpoint.is_file():
        return record
    if checkpoint_identity(checkpoint) != record["checkpoint"]:
        raise UserError(f"{checkpoint} is not the checkpoint {done_file} recorded; delete {run.dir} to train "
                        "the run again, or remove the checkpoint to keep the record alone")
    if checkpoint_step(checkpoint) != record["iter_num"]:  # its digest computed again after an edit
        raise UserError(f"{done_file} says the run trained {record['iter_num']} steps, but its {CHECKPOINT} was saved "
                        f"at step {checkpoint_step(checkpoint)}: the record was edited; put it back as the study wrote "
                        f"it, or delete {run.dir} to train the run again")
    return record


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
    if run.train_config.batch_size_warmup or result["iter_num"] < run.train_config.max_iters:
        # steps of fewer tokens, or fewer steps (max_seconds stopped it): the tokens of the steps it trained. A record
        # without it is as it was, the report's tokens_seen then budget x tokens_per_iter
        record["tokens_seen"] = tokens_trained(run.train_config, run.model_config, result["iter_num"])
    if record["provenance"]["dtype"] != run.train_config.dtype:  # the study resolved it once, before any run
        raise RuntimeError(f"{run.dir} trained in {result['dtype']}, not the study's {run.train_config.dtype}")
    write_atomic(run.dir / DONE_FILE, sealed(record))
    return {**record, "digest": digest(record)}


def train_in(run: StudyRun, folder: Path, bar: tqdm, start: int) -> dict:
    """train()'s result for the run trained in folder (empty; a branch resumes a copy of its start's checkpoint),
    its eval lines in folder/train.log so that the terminal keeps one bar, which follows its metrics.jsonl."""
    config = replace(run.train_config, out_dir=str(folder))
    if run.finetune:  # a new run from the weights of the finished run it starts from
        config = replace(config, init_from=str(run.start_from / CHECKPOINT), finetune=True)
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
                                f"than its record names: {what_differs(record['provenance'])}")
            os.replace(Path(folder) / CHECKPOINT, run.dir / CHECKPOINT)


def what_differs(then: dict) -> str:
    """Why a run trained again may not reproduce its record: what its provenance names otherwise than this
    process (threads first: the one a flag fixes), and the fix."""
    now = provenance(then["dtype"], 0.0)
    if then.get("threads") != now["threads"]:
        return (f"it trained with {then.get('threads')} threads, this process has {now['threads']}; give "
                f"--threads={then.get('threads')}")
    differ = [f"{name} {then[name]!r} then, {now[name]!r} now" for name in ("torch", "device", "cpu", "cpu_id",
                                                                            "cpu_flags")
              if name in then and then[name] != now[name]]
    where = "; ".join(differ) or f"the same torch {now['torch']}, {now['cpu']} and threads"
    return f"{where}; copy the checkpoint in, or continue the study where it trained"


# What makes two CPU processes' training differ in its last bits, and so in its losses as it goes on (a provenance
# field a record lacks, written by older code, is not counted as a difference)
KERNEL_PROVENANCE = ("torch", "cpu", "cpu_id", "cpu_flags", "threads")


def other_machines(records: list[dict | None]) -> str:
    """One line when finished runs trained where this process would not give their bits (another CPU kind, torch
    or thread count): the runs trained here and theirs mix in one report; "" when none did."""
    if not records or all(record is None for record in records):
        return ""
    now = provenance("", 0.0)
    other = [r for r in records if r is not None and any(
        r["provenance"].get(name) not in (None, "", []) and r["provenance"][name] != now[name]
        for name in KERNEL_PROVENANCE)]
    if not other:
        return ""
    kinds = sorted({", ".join(f"{name} {r['provenance'].get(name)!r}" for name in KERNEL_PROVENANCE
                              if r["provenance"].get(name) not in (None, "", [])) for r in other})
    here = ", ".join(f"{name} {now[name]!r}" for name in KERNEL_PROVENANCE)
    return (f"note: {len(other)} of the {sum(r is not None for r in records)} finished runs trained on "
            f"{' / '.join(kinds)}; this process has {here}: runs trained here are not bit for bit what they would "
            "be there (between two x86 CPU kinds the loss moved by ~0.01 by step 500, test loss within the seed "
            "spread), and the report mixes both kinds (docs/study_method.md, Reproducibility)")


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


def run_evaluation(run: StudyRun, ablate: AblateConfig) -> AblateConfig:
    """The study's evaluation settings as this run uses them (a sweep's run: its own lengths and protocols)."""
    return replace(ablate, **run.evaluation)


def eval_key(run: StudyRun, ablate: AblateConfig, record: dict) -> dict:
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


def evaluate_run(run: StudyRun, ablate: AblateConfig, record: dict) -> dict:
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


def finish_run(run: StudyRun, plan: list[StudyRun], ablate: AblateConfig, bar: tqdm, start: int) -> dict:
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
