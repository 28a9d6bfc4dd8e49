"""Time to a target, the speedrun's measure (docs/speedrun.md): each cell's final loss against a fixed target, and
its training time against the reference cell's, on the same seeds. A record counts as reaching the target when the
one-sided t test says its mean loss is at most the target with p < TARGET_ALPHA over at least TARGET_SEEDS seeds,
as modded-nanogpt asks of a record; the time ratio is the geometric mean of the seeds' ratios, with its interval."""

import math

import numpy as np

from study.paired_stats import CONFIDENCE, interval, one_sided_p, plus_minus, untested

TARGET_ALPHA = 0.01  # a record's p for "mean loss <= target" must be below this ...
TARGET_SEEDS = 5  # ... over at least this many seeds


def target_rows(records: list[dict], cells: list[str], reference: str, target: float, block_size: int,
                reference_budget: int) -> list[dict]:
    """Per cell and budget, the budgets ascending (records of scored runs, each with its eval and its whole
    training time, train_seconds): the loss at L = block_size (nonoverlapping) as mean and interval over seeds, the
    one-sided p of "mean <= target", the training seconds' median, min and max, and the ratio of its seconds to
    the reference cell's at reference_budget (the recipe it is timed against) on the seeds both have. A study of
    several budgets so shows how soon each recipe reaches the target."""
    reference_seconds = {r["seed"]: r["train_seconds"] for r in records
                         if (r["variant"], r["budget"]) == (reference, reference_budget)}
    rows = []
    for cell in cells:
        for budget in sorted({r["budget"] for r in records if r["variant"] == cell}):
            runs = [r for r in records if (r["variant"], r["budget"]) == (cell, budget)]
            losses = [r["eval"]["protocols"]["nonoverlapping"][str(block_size)]["loss"] for r in runs]
            seconds = {r["seed"]: r["train_seconds"] for r in runs}
            times = sorted(seconds.values())
            p = at_most_p(losses, target)
            rows.append({"variant": cell, "budget": budget, "steps": runs[0]["iter_num"], "seeds": len(runs),
                         "loss": interval(losses), "p_at_most_target": p,
                         "reaches": len(losses) >= TARGET_SEEDS and p < TARGET_ALPHA,
                         "seconds": {"median": float(np.median(times)), "min": times[0], "max": times[-1]},
                         "time_ratio": time_ratio(seconds, reference_seconds)})
    return rows


def at_most_p(losses: list[float], target: float) -> float:
    """p of the one-sample t test of H0: mean loss >= target against "mean < target"; nan below 2 seeds or with
    no spread (paired_stats.untested: no test)."""
    values = np.asarray(losses, dtype=np.float64)
    if untested(values, float(np.abs(values).max(initial=0.0))):
        return math.nan
    return one_sided_p(values, target, "less")


def time_ratio(cell: dict[int, float], reference: dict[int, float]) -> dict:
    """cell's training time over the reference's, seed by seed, as exp of the mean log ratio and its CONFIDENCE t
    interval (a ratio's interval is symmetric on the log scale); nan bounds below 2 shared seeds."""
    shared = sorted(set(cell) & set(reference))
    logs = [math.log(cell[s] / reference[s]) for s in shared]
    mean, half = interval(logs) if logs else (math.nan, math.nan)
    return {"ratio": math.exp(mean), "low": math.exp(mean - half), "high": math.exp(mean + half), "seeds": len(shared)}


def target_table(rows: list[dict], target: float, labels: dict[str, str], reference: str,
                 split: str) -> list[str]:
    """The Markdown section of the time-to-target table, its losses on split."""
    lines = ["", f"## Time to the target: {split} loss <= {target:g} at L = block_size", "",
             f"A cell reaches the target when the one-sided t test of its mean loss <= {target:g} gives p < "
             f"{TARGET_ALPHA:g} over at least {TARGET_SEEDS} seeds. Training time excludes evaluation (as max_seconds "
             f"counts it); the ratio to {labels[reference]} (at its headline steps) is the geometric mean of the "
             f"seeds' ratios with its {CONFIDENCE:.0%} interval.", "",
             f"| cell | steps | seeds | training s, median (min-max) | {split} loss | p (<= target) | reaches | time "
             "ratio |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        loss, p, ratio, s = row["loss"], row["p_at_most_target"], row["time_ratio"], row["seconds"]
        # One seed has no interval: its ratio alone, as plus_minus prints its loss.
        bounds = "" if math.isnan(ratio["low"]) else f" [{ratio['low']:.3f}, {ratio['high']:.3f}]"
        lines.append(f"| {labels[row['variant']]} | {row['steps']} | {row['seeds']} | {s['median']:.1f} "
                     f"({s['min']:.1f}-{s['max']:.1f}) | {plus_minus(loss)} | "
                     f"{'n/a' if math.isnan(p) else f'{p:.2g}'} | {'yes' if row['reaches'] else 'no'} | "
                     f"{ratio['ratio']:.3f}{bounds} |")
    return lines
