"""Learning-rate schedules: the rate of each optimizer step as a pure function of the step and the settings, so
that a run resumed or branched at any step continues the same sequence.

  cosine  linear warmup to learning_rate, cosine decay to min_lr at lr_decay_iters, then min_lr (nanoGPT's)
  wsd     warmup-stable-decay: the same warmup, learning_rate held, then a decay to min_lr over the last
          round(wsd_decay_fraction * max_iters) steps, linear or 1-sqrt (Hägele et al. 2024). Until its decay
          starts a wsd run of any budget follows the same rates, so a run of budget B can branch from a longer
          constant-rate run at step B - decay (what ablate.py's budgets do).
"""

import bisect
import math
import types
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


# What a schedule's shape reads: learning_rate and min_lr only scale it.
SHAPE_FIELDS = ("decay_lr", "lr_schedule", "warmup_iters", "lr_decay_iters", "max_iters", "wsd_decay_fraction",
                "wsd_decay_shape")


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
    start = wsd_decay_start(max_iters, decay_fraction)
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
                         "--decay_lr=False to decay it, or give --lr_schedule=cosine beside it for a constant rate")
    if config.lr_schedule == "wsd":
        fraction, warmup = config.wsd_decay_fraction, config.warmup_iters
        stable_end = wsd_decay_start(config.max_iters, fraction)
        if stable_end < warmup:
            fix = (f"give --max_iters={smallest_wsd_max_iters(warmup, fraction)} or more, or --warmup_iters="
                   f"{stable_end} or less" if fraction < 1 else "give --warmup_iters=0, or a smaller fraction")
            raise ValueError(f"lr_schedule='wsd': the decay (wsd_decay_fraction={fraction} of max_iters="
                             f"{config.max_iters}) would start at step {stable_end}, inside the warmup_iters="
                             f"{warmup}; {fix}")


def wsd_decay_start(max_iters: int, decay_fraction: float) -> int:
    """The step a wsd run's decay starts at: max_iters - wsd_decay_iters. It never falls as max_iters grows (the
    decay grows by at most one step a step, for a fraction below 1)."""
    return max_iters - wsd_decay_iters(max_iters, decay_fraction)


def smallest_wsd_max_iters(warmup_iters: int, decay_fraction: float) -> int:
    """The smallest max_iters whose wsd decay (decay_fraction < 1) starts at or after warmup_iters. The decay start
    is within half a step of (1 - fraction) * max_iters, so the answer lies below (warmup_iters + 1) / (1 - fraction)
    and is found by bisection there."""
    high = math.ceil((warmup_iters + 1) / (1 - decay_fraction))
    return bisect.bisect_left(range(high + 1), True,
                              key=lambda max_iters: wsd_decay_start(max_iters, decay_fraction) >= warmup_iters)


def moved_schedule(step: int, trained: dict, config: ScheduleSettings) -> str:
    """"" where config's schedule, resuming at step the run whose settings were trained (its checkpoint's), gives
    the steps it has trained the rates they had; else the one line that says what moved the schedule and what the
    rate does from here. A resumed run's schedule is computed from its settings as given, and a longer wsd
    max_iters moves the decay later: a run that had decayed goes back up to learning_rate. Only the shape counts
    (a learning_rate given on resume is named with the other settings), and only the last step trained: an
    unfinished wsd run given a longer max_iters before its decay trains on as one longer run would."""
    if not 0 < step < config.max_iters:  # nothing trained yet, or nothing will train
        return ""
    ran = types.SimpleNamespace(**{name: trained.get(name, getattr(config, name))
                                   for name in (*SHAPE_FIELDS, "learning_rate", "min_lr")})
    shape = types.SimpleNamespace(**{**vars(ran), "learning_rate": config.learning_rate, "min_lr": config.min_lr})
    if math.isclose(get_lr(step - 1, shape), get_lr(step - 1, config), rel_tol=1e-9):
        return ""
    changed = ", ".join(f"{name} {getattr(ran, name)} → {getattr(config, name)}" for name in SHAPE_FIELDS
                        if getattr(ran, name) != getattr(config, name))
    last, now = get_lr(step - 1, ran), get_lr(step, config)
    hold = (f"; to hold min_lr={config.min_lr:g} from here instead, give --lr_schedule=cosine --warmup_iters=0 "
            "--lr_decay_iters=0" if now > last and config.decay_lr else "")  # back up: offer the run's floor
    return (f"note: {changed} moves the learning-rate schedule under the run: the rate goes from {last:.3g} at "
            f"step {step - 1} to {now:.3g} at step {step}, {rates_from(step, config)}{hold}")


def rates_from(step: int, config: ScheduleSettings) -> str:
    """What the rate does from step (< max_iters) to the end of the run, in words."""
    if not config.decay_lr:
        return "and holds it to the end"
    warmup = (f"warms up to learning_rate={config.learning_rate:g} at step {config.warmup_iters}, then "
              if step < config.warmup_iters else "")
    if config.lr_schedule == "wsd":
        start, end = wsd_decay_start(config.max_iters, config.wsd_decay_fraction), config.max_iters
        decay = f"decays to min_lr={config.min_lr:g} over steps {start}–{end} (wsd, {config.wsd_decay_shape})"
        if step < start:
            return f"{warmup}holds learning_rate={config.learning_rate:g} to step {start}, then {decay}"
        return f"{warmup}{decay}"
    if step >= config.lr_decay_iters:
        return f"{warmup}holds min_lr={config.min_lr:g} (past lr_decay_iters={config.lr_decay_iters})"
    return f"{warmup}follows the cosine down to min_lr={config.min_lr:g} at step {config.lr_decay_iters}"
