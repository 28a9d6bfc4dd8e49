"""Many runs of a study: in order in this process, or spread over processes (--jobs) or a job array (--run_index,
then --report_only), which share one study folder through each run's lock; the time box, pruning of checkpoints no
branch still needs, and the records of the whole plan for the report."""

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time

import torch
from tqdm.auto import tqdm

from errors import UserError
from model import GPTConfig
from study.config import AblateConfig, parse_time_limit
from study.cost import OutOfTime, TimeBox, plan_view, rebuild_steps, run_estimates
from study.folder import check_modes, claim_study, study_identity
from study.plan import STABLE, StudyRun
from study.records import code_version
from study.run import cached_eval, claim, eval_key, finish_run, finished_record, has_other_settings, other_machines
from text.corpus import usable_cpus
from train import TrainConfig
from training.run_dir import CHECKPOINT_FILES, DONE_FILE, Interrupted


def take_free_runs(plan: list[StudyRun], ablate: AblateConfig, records: dict[int, dict], wait: bool, bar: tqdm,
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
    """--keep_checkpoints=False: remove the checkpoints of the just-finished run and of every run it continues (a
    start's start is there too when the records alone continued the study: rebuild_checkpoint trained it again),
    each once no run of the plan still needs it (every run that starts from it finished) and no process holds it.
    A run whose checkpoint is gone keeps its record and evaluation, which is all that reuse and the report need."""
    for run in with_starts(plan, finished):
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


def train_and_evaluate(plan: list[StudyRun], ablate: AblateConfig, max_iters: int, show: bool,
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


class Signalled(KeyboardInterrupt):
    """SIGTERM raised where the process is (an evaluation, a wait), as Ctrl-C raises KeyboardInterrupt; train()
    handles both itself while it runs. signum: the signal, for the exit status."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def stop_by_exception(signum: int, frame) -> None:
    raise Signalled(signum)


def stop_when_orphaned(parent: int) -> None:
    """SIGTERM to this process, within a second of the process that started it ending: a study killed with
    kill -9 left its workers training on, re-parented, with nobody to report to. A daemon thread polls."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="stop_when_orphaned").start()


def job(plan: list[StudyRun], ablate: AblateConfig, threads: int, time_box: TimeBox | None, parent: int) -> None:
    """One of --jobs processes: finishes every run that no other process holds, on its share of the threads."""
    torch.set_num_threads(threads)
    code_version()  # before any run: the code this worker imported
    signal.signal(signal.SIGTERM, stop_by_exception)
    try:
        stop_when_orphaned(parent)  # in the try: a parent already gone has its watcher signal before start() returns
        take_free_runs(plan, ablate, {}, False, tqdm(disable=True), 0, time_box)
        stopped_by = 0
    except Interrupted as stopped:
        stopped_by = stopped.args[0]
    except KeyboardInterrupt as stopped:
        stopped_by = getattr(stopped, "signum", signal.SIGINT)
    except UserError:
        sys.exit(2)  # the study's own pass after the jobs meets the same mistake and says it once
    sys.exit(128 + stopped_by if stopped_by else 0)


def run_jobs(plan: list[StudyRun], ablate: AblateConfig, time_box: TimeBox | None) -> None:
    """Train and evaluate the plan in --jobs processes at once; a signal to this process stops them all. What
    a failed job left is for the caller's train_and_evaluate, which reads back the rest."""
    threads = ablate.threads or max(1, usable_cpus() // ablate.jobs)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter each: no forked torch thread pools
    workers = [context.Process(target=job, args=(plan, ablate, threads, time_box, os.getpid()))
               for _ in range(ablate.jobs)]
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


def with_starts(plan: list[StudyRun], run: StudyRun) -> list[StudyRun]:
    """A run of the plan and the runs it continues (a wsd branch's constant-rate segments), earliest first."""
    by_dir = {other.dir: other for other in plan}
    runs = [run]
    while runs[0].start_from is not None:
        runs.insert(0, by_dir[runs[0].start_from])
    return runs


def train_one(plan: list[StudyRun], ablate: AblateConfig, max_iters: int, show: bool) -> None:
    """--run_index=K: train and evaluate run K alone (a job array's task), after the runs it continues (trained
    here unless finished; waited for while another task trains them); Interrupted when a signal stopped it."""
    *starts, run = with_starts(plan, plan[ablate.run_index])
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
    if not ablate.keep_checkpoints:  # its lock let go: prune_checkpoints skips a run that a process holds
        prune_checkpoints(plan, run)


def finished_records(plan: list[StudyRun], ablate: AblateConfig) -> list[dict]:
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


def study_records(plan: list[StudyRun], ablate: AblateConfig, train_config: TrainConfig, model_config: GPTConfig,
                  cells: list[str]) -> tuple[list | None, int]:
    """Claim the study folder (the study of these cells), then the runs' records as the study's mode asks:
    (records, 0) to report; (None, 0) after --list_runs or --run_index, which report nothing; ([], the signal)
    when one stopped the study. A study with a learning-rate sweep calls this once per stage."""
    check_modes(plan, ablate)
    code_version()  # before any run: the code this process imported
    if ablate.list_runs:
        finished = records_on_disk(plan, ablate)
        print_other_machines(finished)
        print(plan_view(plan, run_estimates(plan, ablate, finished), rebuild_steps(plan, finished), ablate.jobs))
        return None, 0
    limit = parse_time_limit(ablate.time_limit)
    started = time.time()
    retrained = sum(run.dir.is_dir() and has_other_settings(run) for run in plan)
    claim_study(ablate, study_identity(ablate, train_config, model_config), cells, retrained)
    # a damaged or mismatched record stops the study before any training
    finished = [finished_record(run, ablate.overwrite) for run in ([plan[ablate.run_index]] if ablate.run_index >= 0
                                                                     else plan)]
    print_other_machines(finished)
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


def print_other_machines(finished: list[dict | None]) -> None:
    """Say in one line when a continued study's finished runs, or records gathered from elsewhere, trained where
    this process would not give their bits."""
    note = other_machines(finished)
    if note:
        print(note)


def records_on_disk(plan: list[StudyRun], ablate: AblateConfig) -> list[dict | None]:
    """Each run's finished record, with "eval" where its evaluation under the study's settings is there; None for
    a run not finished. For estimates: nothing is locked, trained or written."""
    found = []
    for run in plan:
        record = finished_record(run, ablate.overwrite) if run.dir.is_dir() else None
        evaluation = None if record is None or run.role == STABLE else cached_eval(run, eval_key(run, ablate,
                                                                                                  record))
        found.append(None if record is None else {**record, **({"eval": evaluation} if evaluation else {})})
    return found
