"""Learning-rate schedules: the rate of each optimizer step as a pure function of the step and the settings, so
that a run resumed or branched at any step continues the same sequence.

  cosine  linear warmup to learning_rate, cosine decay to min_lr at lr_decay_iters, then min_lr (nanoGPT's)
  wsd     warmup-stable-decay: the same warmup, learning_rate held, then a decay to min_lr over the last
          round(wsd_decay_fraction * max_iters) steps, linear or 1-sqrt (Hägele et al. 2024). Until its decay
          starts a wsd run of any budget follows the same rates, so a run of budget B can branch from a longer
          constant-rate run at step B - decay (what ablate.py's budgets do).
"""

import math
import typing

SCHEDULES = ("cosine", "wsd")
DECAY_SHAPES = ("linear", "1-sqrt")


class ScheduleSettings(typing.Protocol):
    """What a schedule reads of its settings (train.py's TrainConfig has these fields, among others)."""
    decay_lr: bool  # False: learning_rate at every step
    lr_schedule: str  # one of SCHEDULES
    learning_rate: float
    min_lr: float
    warmup_iters: int
    lr_decay_iters: int  # cosine: where min_lr is reached
    max_iters: int  # wsd: the budget its decay ends at
    wsd_decay_fraction: float
    wsd_decay_shape: str  # one of DECAY_SHAPES


def warmup_lr(it: int, learning_rate: float, warmup_iters: int) -> float:
    """Step it (< warmup_iters) of the linear warmup: learning_rate * (it + 1) / (warmup_iters + 1)."""
    return learning_rate * (it + 1) / (warmup_iters + 1)


def cosine_lr(it: int, learning_rate: float, min_lr: float, warmup_iters: int, lr_decay_iters: int) -> float:
    """Linear warmup to learning_rate, cosine decay to min_lr at lr_decay_iters, then min_lr."""
    if it < warmup_iters:
        return warmup_lr(it, learning_rate, warmup_iters)
    if it >= lr_decay_iters:  # also where lr_decay_iters <= warmup_iters: nanoGPT's schedule has no cosine
        return min_lr
    progress = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (learning_rate - min_lr)


def wsd_decay_iters(max_iters: int, decay_fraction: float) -> int:
    """Steps of a wsd run's final decay: round(decay_fraction * max_iters)."""
    return round(decay_fraction * max_iters)


def wsd_lr(it: int, learning_rate: float, min_lr: float, warmup_iters: int, max_iters: int, decay_fraction: float,
           shape: str) -> float:
    """Warmup, learning_rate held, then over the last d = wsd_decay_iters steps (p = (it - start) / d, from 0 at
    the decay's first step): min_lr + (learning_rate - min_lr) * (1 - p) [linear] or * (1 - sqrt(p)) [1-sqrt]."""
    if it < warmup_iters:
        return warmup_lr(it, learning_rate, warmup_iters)
    decay = wsd_decay_iters(max_iters, decay_fraction)
    start = max_iters - decay
    if it < start:
        return learning_rate
    progress = min(1.0, (it - start) / decay)
    remaining = 1.0 - progress if shape == "linear" else 1.0 - math.sqrt(progress)
    return min_lr + (learning_rate - min_lr) * remaining


def get_lr(it: int, config: ScheduleSettings) -> float:
    """The learning rate of step it under config's schedule (constant learning_rate when decay_lr is False)."""
    if not config.decay_lr:
        return config.learning_rate
    if config.lr_schedule == "wsd":
        return wsd_lr(it, config.learning_rate, config.min_lr, config.warmup_iters, config.max_iters,
                      config.wsd_decay_fraction, config.wsd_decay_shape)
    return cosine_lr(it, config.learning_rate, config.min_lr, config.warmup_iters, config.lr_decay_iters)


def check_schedule(config: ScheduleSettings) -> None:
    """A ValueError naming the setting unless the schedule's settings make sense together."""
    if config.lr_schedule not in SCHEDULES:
        raise ValueError(f"lr_schedule={config.lr_schedule!r} must be one of {', '.join(SCHEDULES)}")
    if config.wsd_decay_shape not in DECAY_SHAPES:
        raise ValueError(f"wsd_decay_shape={config.wsd_decay_shape!r} must be one of {', '.join(DECAY_SHAPES)}")
    if not 0.0 <= config.wsd_decay_fraction <= 1.0:
        raise ValueError(f"wsd_decay_fraction={config.wsd_decay_fraction} must be in [0, 1]")
    if config.lr_schedule == "wsd" and not config.decay_lr:  # get_lr would hold learning_rate without a word
        raise ValueError("lr_schedule='wsd' decays the learning rate, but decay_lr=False holds it constant; drop "
                         "--decay_lr=False to decay it, or --lr_schedule=wsd for a constant rate")
    if config.lr_schedule == "wsd":
        stable_end = config.max_iters - wsd_decay_iters(config.max_iters, config.wsd_decay_fraction)
        if stable_end < config.warmup_iters:
            raise ValueError(f"lr_schedule='wsd': the decay (wsd_decay_fraction={config.wsd_decay_fraction} of "
                             f"max_iters={config.max_iters}) would start at step {stable_end}, inside the "
                             f"warmup_iters={config.warmup_iters}; lower one of them")
