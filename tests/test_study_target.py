"""The time-to-target table (study/target.py) recomputed by hand from records: the one-sided t test written out
with Student's t from scipy, the time ratio as a geometric mean of the seeds' ratios."""

import math
import re

import numpy as np
from scipy import stats

from study.target import TARGET_ALPHA, target_rows, target_table

BLOCK = 64


def record(cell: str, seed: int, loss: float, seconds: float, steps: int = 2000) -> dict:
    return {"variant": cell, "seed": seed, "budget": steps, "iter_num": steps, "train_seconds": seconds,
            "eval": {"protocols": {"nonoverlapping": {str(BLOCK): {"loss": loss}}}}}


BASE = {1337: (1.470, 100.0), 1338: (1.480, 104.0), 1339: (1.465, 98.0), 1340: (1.475, 101.0), 1341: (1.472, 99.0)}
FAST = {1337: (1.452, 30.0), 1338: (1.449, 33.0), 1339: (1.455, 29.0), 1340: (1.450, 31.0), 1341: (1.447, 30.5)}
RECORDS = ([record("base", s, *v) for s, v in BASE.items()] +
           [record("fast", s, *v, steps=1500) for s, v in FAST.items()])


def test_each_column_equals_its_hand_computation():
    target = 1.4724
    rows = {row["variant"]: row for row in target_rows(RECORDS, ["base", "fast"], "base", target, BLOCK, 2000)}
    for cell, values in (("base", BASE), ("fast", FAST)):
        losses = np.array([v[0] for v in values.values()])
        t = (losses.mean() - target) / (losses.std(ddof=1) / math.sqrt(5))
        assert math.isclose(rows[cell]["p_at_most_target"], stats.t.cdf(t, 4), rel_tol=1e-9)
        half = stats.t.ppf(0.975, 4) * losses.std(ddof=1) / math.sqrt(5)
        assert np.allclose(rows[cell]["loss"], (losses.mean(), half), rtol=1e-12)
        times = sorted(v[1] for v in values.values())
        assert rows[cell]["seconds"] == {"median": times[2], "min": times[0], "max": times[-1]}
    assert rows["fast"]["reaches"] and rows["fast"]["p_at_most_target"] < TARGET_ALPHA
    assert not rows["base"]["reaches"]  # its mean is about the target: p near one half
    logs = np.log([FAST[s][1] / BASE[s][1] for s in BASE])
    half = stats.t.ppf(0.975, 4) * logs.std(ddof=1) / math.sqrt(5)
    ratio = rows["fast"]["time_ratio"]
    assert np.allclose([ratio["ratio"], ratio["low"], ratio["high"]],
                       np.exp([logs.mean(), logs.mean() - half, logs.mean() + half]), rtol=1e-12)
    assert rows["base"]["time_ratio"]["ratio"] == 1.0 and rows["fast"]["steps"] == 1500


def test_fewer_than_five_seeds_never_reach_the_target():
    four = [r for r in RECORDS if r["seed"] != 1341]
    row = target_rows(four, ["fast"], "base", 1.4724, BLOCK, 2000)[0]
    assert row["p_at_most_target"] < TARGET_ALPHA and not row["reaches"]


def test_the_table_prints_each_row_once():
    rows = target_rows(RECORDS, ["base", "fast"], "base", 1.4724, BLOCK, 2000)
    lines = target_table(rows, 1.4724, {"base": "nanoGPT", "fast": "muon"}, "base", "val")
    assert lines[1] == "## Time to the target: val loss <= 1.4724 at L = block_size"  # a search's, on val
    assert sum(line.startswith("| muon | 1500 | 5 | 30.5 (29.0-33.0) | 1.4506") for line in lines) == 1


def test_a_single_seed_row_prints_its_numbers_without_an_interval():
    """Was: a search of one seed printed "1.9058 ± nan" and "0.718 [nan, nan]"."""
    one = [r for r in RECORDS if r["seed"] == 1337]
    rows = target_rows(one, ["base", "fast"], "base", 1.4724, BLOCK, 2000)
    lines = target_table(rows, 1.4724, {"base": "nanoGPT", "fast": "muon"}, "base", "val")
    assert "| muon | 1500 | 1 | 30.0 (30.0-30.0) | 1.4520 | n/a | no | 0.300 |" in lines
    assert not any(re.search(r"\bnan\b", line) for line in lines)


def test_each_budget_of_a_cell_is_a_row_timed_against_the_reference_at_its_own_budget():
    """A search of several budgets: how soon each recipe gets there, against the baseline recipe as it is."""
    short = [record("fast", s, v[0] + 0.05, v[1] / 2, steps=750) for s, v in FAST.items()]
    early = [record("base", s, v[0] + 0.2, v[1] / 4, steps=500) for s, v in BASE.items()]
    rows = target_rows(RECORDS + short + early, ["base", "fast"], "base", 1.4724, BLOCK, 2000)
    assert [(row["variant"], row["steps"]) for row in rows] == [("base", 500), ("base", 2000), ("fast", 750),
                                                                 ("fast", 1500)]
    logs = np.log([FAST[s][1] / 2 / BASE[s][1] for s in BASE])  # against base's 2000 steps, not its 500
    assert math.isclose(rows[2]["time_ratio"]["ratio"], math.exp(logs.mean()), rel_tol=1e-12)
    assert math.isclose(rows[0]["time_ratio"]["ratio"], 0.25, rel_tol=1e-12)
    assert not rows[2]["reaches"] and rows[3]["reaches"]  # 0.05 above at 750 steps, below at 1500
