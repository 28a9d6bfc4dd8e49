"""study.table: a study's paired gaps as a Markdown table, each number rounded once from results.json's exact value."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from errors import UserError
from study.table import TableConfig, study_table

REPO = Path(__file__).resolve().parents[1]


def gap(a: str, mean: float, low: float, high: float, b: str = "learned", length: int = 64,
        a_protocol: str = "nonoverlapping", b_protocol: str = "nonoverlapping", bits: float | None = None) -> dict:
    return {"a": a, "b": b, "a_protocol": a_protocol, "b_protocol": b_protocol, "length": length, "mean": mean,
            "low": low, "high": high, "untested": None, "mean_bits_per_byte": bits}


SEEDS = [1337, 1338, 1339]
# each cell's loss at L = 64 by seed; past it, the cell's loss + its offset (learned: no rows past block_size)
RUN_LOSSES = {"learned": [1.60, 1.62, 1.59], "rope": [1.57, 1.575, 1.58], "alibi": [1.61, 1.60, 1.615]}
OFFSET = {"rope": 0.5, "alibi": 0.01}


def run(cell: str, seed: int, loss: float) -> dict:
    """A headline run as results.json keeps it: its losses by protocol and length."""
    past = {f"{protocol} {n}": None if cell == "learned" else loss + OFFSET[cell] * n / 128
            for protocol in ("nonoverlapping", "sliding") for n in (128, 256)}
    return {"variant": cell, "seed": seed, "budget": 2000, "role": "run", "eval": {
        "tokens": 1000, "bytes": 1000, "chars": 1000,
        "loss": {"nonoverlapping 64": loss, "sliding 64": loss, **past}}}


@pytest.fixture
def study(tmp_path):
    """A results.json of the shape ablate.py writes, with values whose rounding a second rounding would change:
    -0.02595 is -0.0259 in results.md's four places and -0.026 from there, -0.0259... once to three is -0.026 too,
    but -0.017499 is -0.0175 at four places, which rounds again to -0.018; once it is -0.017."""
    results = {
        "block_size": 64, "split": "test", "headline_budget": 2000, "lengths": [64, 128, 256], "window": 64,
        "ablate_config": {"equivalence_margin": 0.02},
        "runs": [run(cell, seed, loss) for cell, losses in RUN_LOSSES.items()
                 for seed, loss in zip(SEEDS, losses, strict=True)],
        "labels": {"learned": "learned", "rope": "rope", "alibi": "alibi"},
        "budgets": {"reference": "learned", "by_budget": {
            "1000": {"gaps": [gap("rope", -0.0934, -0.1171, -0.0696), gap("alibi", -0.035, -0.0524, -0.0176)],
                     "extrapolation": []},
            "2000": {"gaps": [gap("rope", -0.02595, -0.0344, -0.017499, bits=-0.0374),
                              gap("alibi", 0.01704, 0.00616, 0.02775)],
                     "extrapolation": [gap("rope", 0.7451, 0.6469, 0.8432, b="rope", length=256,
                                           b_protocol="sliding")]}},
            "moves": [{"from": 1000, "to": 2000, "cells": {
                "rope": {"change": 0.0674, "low": 0.05, "high": 0.08, "untested": None}}}]},
        "comparisons": {"longer, sliding": [
            gap("rope", 0.1, 0.05, 0.15, length=128, a_protocol="sliding", b_protocol="sliding"),
            {**gap("alibi", float("nan"), float("nan"), float("nan"), length=256), "untested": "1 seed"}]}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    return str(tmp_path)


def test_gaps_by_budget_are_rounded_once_with_typeset_minus_signs(study):
    table = study_table(TableConfig(study=study)).splitlines()
    assert table[2:] == ["| cell − learned | 1000 steps | 2000 steps |", "| --- | ---: | ---: |",
                         "| rope | −0.093 [−0.117, −0.070] | −0.026 [−0.034, −0.017] |",
                         "| alibi | −0.035 [−0.052, −0.018] | +0.017 [+0.006, +0.028] |"]
    only = study_table(TableConfig(study=study, budgets=[2000], digits=4, bits_per_byte=True)).splitlines()
    # bits per byte: the interval scaled by the row's own mean_bits_per_byte / mean
    scale = -0.0374 / -0.02595
    assert only[4] == f"| rope | −0.0374 [{-0.0344 * scale:+.4f}, {-0.017499 * scale:+.4f}] |".replace("-", "−")
    assert only[5] == "| alibi | n/a (no bytes recorded) |"


def test_the_other_families(study):
    moves = study_table(TableConfig(study=study, family="changes between budgets")).splitlines()
    assert moves[2:] == ["| cell − learned | 1000 → 2000 |", "| --- | ---: |", "| rope | +0.067 [+0.050, +0.080] |"]
    extrapolation = study_table(TableConfig(study=study, family="extrapolation by budget")).splitlines()
    assert extrapolation[2:] == ["| cell, nonoverlapping − sliding | 2000 steps, L=256 (4x) |", "| --- | ---: |",
                                 "| rope | +0.745 [+0.647, +0.843] |"]
    longer = study_table(TableConfig(study=study, family="longer, sliding")).splitlines()
    assert longer[2:] == ["| a − b | L=128 (2x) | L=256 (4x) |", "| --- | ---: | ---: |",
                          "| rope − learned | +0.100 [+0.050, +0.150] | — |",
                          "| alibi − learned | — | n/a (1 seed) |"]


def test_each_cell_against_any_cell(study):
    """--against: each other cell − it, paired by seed, its interval Student's t written out here."""
    def expected(a: list[float], b: list[float]) -> str:
        d = np.subtract(a, b)
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        return " ".join([f"{d.mean():+.3f}", f"[{d.mean() - half:+.3f},", f"{d.mean() + half:+.3f}]"]).replace("-", "−")

    table = study_table(TableConfig(study=study, family="training length", against="rope")).splitlines()
    assert table[2:] == ["| cell − rope | 2000 steps, L=64 (1x) |", "| --- | ---: |",
                         f"| learned | {expected(RUN_LOSSES['learned'], RUN_LOSSES['rope'])} |",
                         f"| alibi | {expected(RUN_LOSSES['alibi'], RUN_LOSSES['rope'])} |"]
    longer = study_table(TableConfig(study=study, family="longer, sliding", against="alibi")).splitlines()
    rope, alibi = ({n: [loss + OFFSET[cell] * n / 128 for loss in RUN_LOSSES[cell]] for n in (128, 256)}
                   for cell in ("rope", "alibi"))
    # learned has no rows past block_size: no pair
    assert longer[2:] == ["| cell − alibi | L=128 (2x) | L=256 (4x) |", "| --- | ---: | ---: |",
                          f"| rope | {expected(rope[128], alibi[128])} | {expected(rope[256], alibi[256])} |"]


def test_a_study_of_recipes_at_their_own_steps_says_so(study):
    """Was: its comparisons headed by the study's max_iters, which only some of its cells trained."""
    path = Path(study) / "results.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "own_steps": True}))
    table = study_table(TableConfig(study=study, family="longer, sliding", lengths=[128])).splitlines()
    assert table[2] == "| cell − learned | each cell's own steps, L=128 (2x) |"


def test_a_family_of_pairs_chosen_after_the_results(study):
    """--pairs: each pair's p and TOST p at the study's margin, Holm-adjusted over the pairs no family of the study
    tests; a pair a family tests (here "longer, sliding": rope − learned at 128) keeps that family's correction."""
    table = study_table(TableConfig(study=study, pairs=["rope @64 - alibi @64", "rope @128 − alibi @128"]))
    rope, alibi = np.array(RUN_LOSSES["rope"]), np.array(RUN_LOSSES["alibi"])
    d = [rope - alibi, rope + OFFSET["rope"] - alibi - OFFSET["alibi"]]
    p = [stats.ttest_1samp(x, 0).pvalue for x in d]
    tost = [max(stats.ttest_1samp(x, -0.02, alternative="greater").pvalue,
                stats.ttest_1samp(x, 0.02, alternative="less").pvalue) for x in d]

    def holm_of_two(values: list[float]) -> list[float]:  # the smaller times 2, the larger at least that
        low = min(1.0, 2 * min(values))
        return [low if v == min(values) else max(low, v) for v in values]

    rows = [line.split(" | ") for line in table.splitlines()[4:]]
    assert [row[1] for row in rows] == ["rope @64 − alibi @64", "rope @128 − alibi @128"]
    for row, values in zip(rows, zip(p, holm_of_two(p), tost, holm_of_two(tost), strict=True), strict=True):
        assert row[3:7] == [f"{v:.2g}" for v in values] and row[7] == "literature (2)"
    assert rows[1][2].startswith("+0.457 [") and rows[1][8] == "higher |"


def test_extrapolation_changes_between_budgets_are_paired_by_seed(study):
    """Each cell's whole − sliding at a budget minus at the one before, seed by seed, its interval written out here;
    starred where it survives Holm over the cells at that length (two cells: the smaller p times 2, then max)."""
    whole = {1000: {"rope": [0.60, 0.62, 0.70], "alibi": [0.003, 0.004, 0.002]},
             2000: {"rope": [0.90, 0.95, 1.00], "alibi": [0.004, 0.001, 0.003]}}
    path = Path(study) / "results.json"
    results = json.loads(path.read_text())
    for budget, cells in whole.items():
        results["budgets"]["by_budget"][str(budget)]["extrapolation"] = [
            {**gap(cell, 0.0, 0.0, 0.0, b=cell, length=256, b_protocol="sliding"), "seeds": SEEDS,
             "differences": values} for cell, values in cells.items()]
    path.write_text(json.dumps(results))
    table = study_table(TableConfig(study=study, family="extrapolation changes between budgets")).splitlines()
    change = {cell: np.subtract(whole[2000][cell], whole[1000][cell]) for cell in ("rope", "alibi")}
    p = {cell: stats.ttest_1samp(d, 0).pvalue for cell, d in change.items()}
    holm = {cell: min(1.0, 2 * min(p.values())) if v == min(p.values()) else max(v, 2 * min(p.values()))
            for cell, v in p.items()}

    def text(d: np.ndarray, star: bool) -> str:
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        return (f"{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}]".replace("-", "−")
                + "*" * bool(star))

    assert table[2:] == ["| cell, nonoverlapping − sliding | 1000 → 2000, L=256 (4x) |", "| --- | ---: |",
                         f"| rope | {text(change['rope'], holm['rope'] <= 0.05)} |",
                         f"| alibi | {text(change['alibi'], holm['alibi'] <= 0.05)} |"]
    assert table[4].endswith("* |") and not table[5].endswith("* |")


@pytest.mark.parametrize("changes, message", [
    ({"family": "training"}, "--family='training' is not in this study; it has: 'gaps by budget'"),
    ({"lengths": [512]}, "has no rows at lengths [512]"),
    ({"study": ""}, "--study is empty"),
    ({"digits": 9}, "--digits=9 must be 0 to 8"),
    ({"family": "changes between budgets", "bits_per_byte": True}, "kept in nats/token only"),
    ({"family": "training length", "against": "t5"}, "--against='t5' is not a cell of this study; its cells: "
                                                    "'learned', 'rope', 'alibi'"),
    ({"pairs": ["rope − alibi"]}, "--pairs: 'rope − alibi' is not \"a − b\" with each side"),
    ({"pairs": ["rope @128 − learned @128"]}, "learned @128 has no loss there"),
    ({"pairs": ["rope @64 − t5 @64"]}, "--pairs: 'rope @64 − t5 @64': 't5' is not a cell of this study"),
    ({"pairs": ["rope @64 − alibi @64"], "against": "alibi"}, "--pairs makes a family of its own"),
    ({"against": "rope"}, "give --family as one of 'training length', 'longer, nonoverlapping', 'longer, sliding',"
                          " not 'gaps by budget'"),
])
def test_mistakes_are_one_line(study, changes, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")):
        study_table(TableConfig(**{"study": study, **changes}))


def test_the_command_line(study, tmp_path):
    done = subprocess.run([sys.executable, "-m", "study.table", f"--study={study}", "--budgets=1000"], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 0 and "| rope | −0.093 [−0.117, −0.070] |" in done.stdout
    missing = subprocess.run([sys.executable, "-m", "study.table", f"--study={tmp_path / 'none'}"], cwd=REPO,
                             capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "results.json does not exist" in \
        missing.stderr
