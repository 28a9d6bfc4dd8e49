"""What a study's runs cost before they run: each run's steps and estimated seconds on this machine, from the runs
of the study already finished (their records' times) or, before the first, a short timed probe of the study's own
model through train.train(); the plan view (--list_runs) and the time box (--time_limit) read these estimates.

Training is priced per token trained, from finished training runs (median seconds per token), not per step: a
step under the batch-size schedule (training/batch_schedule.py) trains fewer sequences and takes less time, and a
study's cells may differ in batch size. A step's fixed part (the optimizer's update, Muon's orthogonalisation) does
not shrink with the batch, so a growing batch's first steps cost a little more than their tokens say. An
evaluation's time comes from finished evaluations (median seconds per token forwarded), else from training's: a
forward pass is about a third of a training step's work per token. Estimates are of one process: with --jobs=N the
study's wall time is about their sum over N, where N processes on N cores each run at the speed of one
(docs/study_method.md says how close).
"""

import contextlib
import io
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from study.config import AblateConfig
from study.evaluation import protocol_window, sliding_geometry
from study.plan import STABLE, StudyRun
from text.dataset import resolve_data_dir
from text.tokenizer import read_description
from train import tokens_per_iter, tokens_trained, train
from training.run_dir import CHECKPOINT

PROBE_STEPS = 20  # timed steps of the probe (its first, with warm-up, is left out by train())


def steps_to_train(run: StudyRun, by_dir: dict[Path, dict]) -> int:
    """Steps the run trains itself: a branch or segment starts where the run it continues ended; a finetune
    (from_cell) starts a new run at step 0 from its base's weights."""
    continues = run.start_from is not None and not run.finetune
    start = by_dir[run.start_from].train_config.max_iters if continues else 0
    return run.train_config.max_iters - start


def tokens_to_train(run: StudyRun, by_dir: dict[Path, dict]) -> int:
    """Tokens the run trains itself: those of its steps_to_train steps, the last of its max_iters, under its
    batch-size schedule."""
    end = run.train_config.max_iters
    return (tokens_trained(run.train_config, run.model_config, end)
            - tokens_trained(run.train_config, run.model_config, end - steps_to_train(run, by_dir)))


def rebuilt_runs(plan: list[StudyRun], finished: list[dict | None]) -> list[list[StudyRun]]:
    """The finished runs each run still to train first trains again, as their checkpoints it starts from are not on
    disk (a repository keeps records, not checkpoints: runs/rebuild_checkpoint); a checkpoint shared by several
    runs is counted at the first of them in plan order, as the first to start rebuilds it."""
    by_dir = {run.dir: run for run in plan}
    done = {run.dir for run, record in zip(plan, finished, strict=True) if record is not None}
    counted, rebuilt = set(), []
    for run in plan:
        own = []
        start = None if run.dir in done else run.start_from  # a trained run needs no start again
        while start in done and start not in counted and not (start / CHECKPOINT).is_file():
            counted.add(start)
            own.append(by_dir[start])
            start = by_dir[start].start_from
        rebuilt.append(own)
    return rebuilt


def rebuild_steps(plan: list[StudyRun], finished: list[dict | None]) -> list[int]:
    """Steps each run still to train first spends training again the checkpoints it starts from (rebuilt_runs)."""
    by_dir = {run.dir: run for run in plan}
    return [sum(steps_to_train(again, by_dir) for again in runs) for runs in rebuilt_runs(plan, finished)]


def forward_tokens(run: StudyRun, ablate: AblateConfig) -> float:
    """Tokens the run's evaluation forwards (0 for a constant-rate segment, never evaluated): its split once per
    length and protocol, a sliding window's overlap counted again."""
    if run.role == STABLE:
        return 0.0
    evaluation = replace(ablate, **run.evaluation)
    block_size = run.model_config.block_size
    window, stride = sliding_geometry(evaluation, block_size)
    tokens = read_description(resolve_data_dir(run.train_config.dataset))[f"{run.split}_tokens"]
    total = 0.0
    for protocol in evaluation.protocols:
        for multiplier in evaluation.eval_multipliers:
            length = max(1, round(block_size * multiplier))
            overlap = window / stride if protocol_window(protocol, length, window) < length else 1.0
            total += tokens * overlap
    return total


def probe_token_seconds(run: StudyRun) -> float:
    """Seconds per token trained of the run's model at its full batch, timed by train() in a temporary folder. The
    batch-size schedule is off: the probe's 20 steps would be a growing batch's smallest, whose fixed part per step
    weighs most, where most of a run's tokens are trained at the full batch."""
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        config = replace(run.train_config, out_dir=folder, init_from="scratch", max_iters=PROBE_STEPS + 1,
                         lr_decay_iters=PROBE_STEPS + 1, warmup_iters=1, eval_interval=10**9, eval_iters=1,
                         batch_size_warmup=0, progress=False, wandb_log=False)
        result = train(config, replace(run.model_config))
    return statistics.median(result["step_seconds"][1:]) / tokens_per_iter(config, run.model_config)


def run_estimates(plan: list[StudyRun], ablate: AblateConfig, finished: list[dict | None]) -> list[float]:
    """Estimated seconds each run still needs (0 for one finished and evaluated: finished[i] is its record, with
    "eval" where it has one). Timings come from the finished runs, else from a probe."""
    by_dir = {run.dir: run for run in plan}
    trained = [(r["train_seconds"], tokens_to_train(run, by_dir)) for run, r in zip(plan, finished, strict=True) if r]
    per_token = [seconds / tokens for seconds, tokens in trained if tokens > 0]
    token_seconds = statistics.median(per_token) if per_token else None
    scored = [(r["eval"]["seconds"], forward_tokens(run, ablate)) for run, r in zip(plan, finished, strict=True)
              if r and "eval" in r]
    per_forward = [seconds / tokens for seconds, tokens in scored if tokens > 0]
    estimates = []
    for run, record, rebuilt in zip(plan, finished, rebuilt_runs(plan, finished), strict=True):
        done = record is not None and (run.role == STABLE or "eval" in record)
        if done:
            estimates.append(0.0)
            continue
        if token_seconds is None:
            token_seconds = probe_token_seconds(run)
        forward_seconds = statistics.median(per_forward) if per_forward else token_seconds / 3
        tokens = sum(tokens_to_train(again, by_dir) for again in [run, *rebuilt])
        train_part = 0 if record is not None else tokens * token_seconds
        estimates.append(train_part + forward_tokens(run, ablate) * forward_seconds)
    return estimates


def plan_view(plan: list[StudyRun], estimates: list[float], rebuilt: list[int], jobs: int) -> str:
    """--list_runs: each run with its steps (and those of the checkpoints it trains again first, rebuilt[i]) and
    estimate, and the stage's total on this machine with --jobs."""
    by_dir = {run.dir: run for run in plan}

    def steps_text(i: int) -> str:
        again = f" (+{rebuilt[i]} to train its start's checkpoint again)" if rebuilt[i] else ""
        return f"{steps_to_train(plan[i], by_dir)} steps{again}, ~{estimates[i] / 60:.1f} min"

    lines = [f"{i}\t{run.variant}\tseed {run.seed}\t{run.dir}\t" + ("finished" if estimates[i] == 0 else steps_text(i))
             for i, run in enumerate(plan)]
    left = [i for i, seconds in enumerate(estimates) if seconds > 0]
    steps = sum(steps_to_train(plan[i], by_dir) for i in left)
    again = sum(rebuilt[i] for i in left)
    again_text = f" and {again:,} to train missing checkpoints again" if again else ""
    total = sum(estimates)
    # The count last: scripts read it (tail -1 | cut -d' ' -f1, as the README's job array does).
    return "\n".join([*lines, f"{len(plan) - len(left)} finished, {len(left)} to run: {steps:,} steps{again_text}, "
                      f"about {total / 60:.0f} min of one process, {total / 60 / jobs:.0f} min with --jobs={jobs}",
                      f"{len(plan)} runs: --run_index=0..{len(plan) - 1} (sbatch --array=0-{len(plan) - 1})"])


class OutOfTime(Exception):
    """The time box left runs unstarted: every finished run is recorded, the rest wait for the next sitting."""

    def __init__(self, finished: int, total: int):
        super().__init__(f"time limit reached: {finished} of {total} runs finished, {total - finished} left for the "
                         "next sitting; run the same command again to continue")


@dataclass(frozen=True)
class TimeBox:
    """--time_limit: the wall-clock time (time.time()) by which started runs must end, and each run's estimate."""

    deadline: float
    estimates: list[float]

    def allows(self, index: int) -> bool:
        """Whether run index, started now, is estimated to finish in time."""
        return time.time() + self.estimates[index] <= self.deadline
