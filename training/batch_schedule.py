"""The batch-size schedule (off by default; modded-nanogpt's record of a growing batch): the sequences of each
micro-batch at a step, a pure function of the step and the settings, as schedule.py's rates are, so that a run
resumed or branched at any step continues the same sequence.

  batch_size_at(s) = batch_size_start + (batch_size - batch_size_start) * s // batch_size_warmup   (s < warmup)
                   = batch_size                                                                   (after)

A line from batch_size_start at step 0 to batch_size at step batch_size_warmup, rounded down to whole sequences, in
integers (no float to round differently anywhere). A line, not a few stages: it needs no third setting, and under
torch.compile the number of sizes costs one compilation, not one per size (the first change of size recompiles with
the batch dimension dynamic, which then serves every size). In steps, not fractions of max_iters (which would move
with the budget): a study's wsd branch, which resumes a longer run's checkpoint with its own max_iters, then draws
the batches that a run from scratch of its budget draws. A step's batch is the first batch_size_at(s) rows of each
of its full micro-batches (train.batch_prefetcher), so the batch generator advances as without the schedule.
"""

import typing


class BatchScheduleSettings(typing.Protocol):
    """What the schedule reads of its settings (train.py's TrainConfig has these fields, among others)."""
    batch_size: int  # sequences per micro-batch, once grown
    batch_size_warmup: int  # steps over which the batch grows; 0: off
    batch_size_start: int  # batch_size_warmup: the sequences per micro-batch at step 0


def batch_size_at(step: int, config: BatchScheduleSettings) -> int:
    """The sequences of each micro-batch at step (batch_size when the schedule is off, or past its warmup)."""
    warmup, full, start = config.batch_size_warmup, config.batch_size, config.batch_size_start
    if step >= warmup:
        return full
    return start + (full - start) * step // warmup


def sequences_before(steps: int, config: BatchScheduleSettings) -> int:
    """The sequences of one micro-batch summed over steps 0 .. steps - 1: the tokens a run has trained on are this
    times gradient_accumulation_steps times block_size."""
    ramp = min(steps, config.batch_size_warmup)
    return sum(batch_size_at(step, config) for step in range(ramp)) + (steps - ramp) * config.batch_size


def check_batch_schedule(config: BatchScheduleSettings) -> None:
    """A ValueError naming the setting unless the schedule's settings make sense (batch_size >= 1 is checked)."""
    if config.batch_size_warmup < 0:
        raise ValueError(f"batch_size_warmup={config.batch_size_warmup} must be >= 0 (0: no batch-size schedule)")
    if config.batch_size_warmup and not 1 <= config.batch_size_start < config.batch_size:
        fix = ("give a --batch_size of 2 or more to grow to" if config.batch_size == 1 else
               f"give --batch_size_start=N with N from 1 to {config.batch_size - 1}")
        raise ValueError(f"batch_size_start={config.batch_size_start} must be in [1, batch_size={config.batch_size})"
                         f" when batch_size_warmup={config.batch_size_warmup} grows the batch; {fix}")
