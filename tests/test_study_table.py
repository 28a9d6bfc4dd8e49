"""study.table: a study's paired gaps as a Markdown table, each number rounded once from results.json's exact value."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from errors import UserError
from study.table import TableConfig, study_table

REPO = Path(__file__).resolve().parents[1]


def gap(a: str, mean: float, low: float, high: float, b: str = "learned", length: int = 64,
        a_protocol: str = "nonoverlapping", b_protocol: str = "nonoverlapping", bits: float | None = None) -> dict:
    return {"a": a, "b": b, "a_protocol": a_protocol, "b_protocol": b_protocol, "length": length, "mean": mean,
            "low": low, "high": high, "untested": None, "mean_bits_per_byte": bits}


@pytest.fixture
def study(tmp_path):
    """A results.json of the shape ablate.py writes, with values whose rounding a second rounding would change:
    -0.02595 is -0.0259 in results.md's four places and -0.026 from there, -0.0259... once to three is -0.026 too,
    but -0.017499 is -0.0175 at four places, which rounds again to -0.018; once it is -0.017."""
    results = {
        "block_size": 64, "split": "test", "headline_budget": 2000,
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


def test_a_study_of_recipes_at_their_own_steps_says_so(study):
    """Was: its comparisons headed by the study's max_iters, which only some of its cells trained."""
    path = Path(study) / "results.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "own_steps": True}))
    table = study_table(TableConfig(study=study, family="longer, sliding", lengths=[128])).splitlines()
    assert table[2] == "| cell − learned | each cell's own steps, L=128 (2x) |"


@pytest.mark.parametrize("changes, message", [
    ({"family": "training"}, "--family='training' is not in this study; it has: 'gaps by budget'"),
    ({"lengths": [512]}, "has no rows at lengths [512]"),
    ({"study": ""}, "--study is empty"),
    ({"digits": 9}, "--digits=9 must be 0 to 8"),
    ({"family": "changes between budgets", "bits_per_byte": True}, "kept in nats/token only"),
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
