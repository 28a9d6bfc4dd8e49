"""study.compare: two studies side by side in bits per byte, checked against scipy on each seed's bits per byte."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from errors import UserError
from study.compare import CompareConfig, compare_table
from study.paired_stats import paired

CELLS = ["learned", "rope", "alibi"]


def write_study(folder, losses: dict[str, list[float]], tokens: int, bytes_: int, budgets=(1000, 2000),
                split: str = "test", own_steps: bool = False) -> dict[str, list[float]]:
    """A results.json of the shape ablate.py writes, from each cell's per-seed nats per token; returns each cell's
    per-seed bits per byte, computed here from the definition."""
    factor = tokens / bytes_ / math.log(2)
    key = "nonoverlapping 64"
    by_budget = {}
    for budget in budgets:
        rows, gaps = [], []
        for cell, values in losses.items():
            mean, sd = np.mean(values), np.std(values, ddof=1)
            half = stats.t.ppf(0.975, len(values) - 1) * sd / math.sqrt(len(values))
            rows.append({"variant": cell, "seeds": list(range(len(values))), "loss": {key: [mean, half]},
                         "bits_per_byte": {key: [mean * factor, half * factor]}})
            if cell != "learned":
                gaps.append({"a": cell, **paired(values, losses["learned"])})
        by_budget[str(budget)] = {"rows": rows, "gaps": gaps}
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({
        "block_size": 64, "split": split, "own_steps": own_steps, "labels": {c: c for c in losses},
        "budgets": {"reference": "learned", "by_budget": by_budget}}))
    return {cell: [v * factor for v in values] for cell, values in losses.items()}


def table_rows(text: str) -> dict[str, list[str]]:
    return {line.split(" | ")[0][2:]: line.strip("| ").split(" | ")[1:] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| cell") and not line.startswith("| ---")}


def test_each_gap_is_the_t_interval_of_the_seeds_bits_per_byte(tmp_path):
    rng = np.random.default_rng(0)
    char = write_study(tmp_path / "char", {c: list(1.5 + 0.1 * i + 0.02 * rng.standard_normal(4))
                                           for i, c in enumerate(CELLS)}, tokens=111_531, bytes_=111_531)
    bpe = write_study(tmp_path / "bpe", {c: list(3.5 - 0.05 * i + 0.03 * rng.standard_normal(3))
                                         for i, c in enumerate(CELLS)}, tokens=47_492, bytes_=111_531)
    rows = table_rows(compare_table(CompareConfig([str(tmp_path / "char"), str(tmp_path / "bpe")], 2000)))
    assert list(rows) == CELLS
    for offset, bits in ((0, char), (2, bpe)):
        mean = np.mean(bits["rope"])
        assert rows["rope"][offset].startswith(f"{mean:.3f} ± ")
        differences = np.subtract(bits["rope"], bits["learned"])
        low, high = stats.t.interval(0.95, len(differences) - 1, loc=differences.mean(), scale=stats.sem(differences))
        wins = int((differences < 0).sum())
        assert rows["rope"][offset + 1] == (f"{differences.mean():+.3f} [{low:+.3f}, {high:+.3f}], lower in {wins} "
                                            f"of {len(differences)}")
        assert rows["learned"][offset + 1] == "—"


def test_the_largest_shared_budget_by_default_and_a_missing_one_named(tmp_path):
    losses = {c: [1.0 + i, 1.1 + i, 1.05 + i] for i, c in enumerate(CELLS)}
    write_study(tmp_path / "a", losses, 10, 10, budgets=(1000, 2000, 4000))
    write_study(tmp_path / "b", losses, 10, 10, budgets=(1000, 2000))
    studies = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert ", 2000 steps," in compare_table(CompareConfig(studies))
    with pytest.raises(UserError, match=r"--budget=4000: not a budget of every study .*b: 1000, 2000"):
        compare_table(CompareConfig(studies, 4000))


def test_other_splits_or_a_missing_study_are_refused(tmp_path):
    losses = {c: [1.0 + i, 1.1 + i] for i, c in enumerate(CELLS)}
    write_study(tmp_path / "test", losses, 10, 10)
    write_study(tmp_path / "val", losses, 10, 10, split="val")
    with pytest.raises(UserError, match="different splits"):
        compare_table(CompareConfig([str(tmp_path / "test"), str(tmp_path / "val")]))
    with pytest.raises(UserError, match="results.json does not exist"):
        compare_table(CompareConfig([str(tmp_path / "test"), str(tmp_path / "nowhere")]))


def test_a_cut_results_file_studies_with_no_shared_budget_or_own_steps_and_the_usage_line(tmp_path, capsys):
    losses = {c: [1.0 + i, 1.1 + i] for i, c in enumerate(CELLS)}
    write_study(tmp_path / "a", losses, 10, 10, budgets=(1000,))
    write_study(tmp_path / "b", losses, 10, 10, budgets=(2000,))
    with pytest.raises(UserError, match=r"the studies share no budget \(.*a: 1000; .*b: 2000\)"):
        compare_table(CompareConfig([str(tmp_path / "a"), str(tmp_path / "b")]))
    # A time-to-target study's cells train their own steps: by_budget is empty (was: "share no budget (a: ; b: )").
    write_study(tmp_path / "own", losses, 10, 10, budgets=(), own_steps=True)
    with pytest.raises(UserError, match=r"own: each cell trains to its own steps, .*python -m study.table"):
        compare_table(CompareConfig([str(tmp_path / "a"), str(tmp_path / "own")]))
    text = (tmp_path / "b" / "results.json").read_text()
    (tmp_path / "b" / "results.json").write_text(text[: len(text) // 2])  # a copy cut short
    with pytest.raises(UserError, match=r"results.json is not whole JSON \(JSONDecodeError.*--report_only=True"):
        compare_table(CompareConfig([str(tmp_path / "a"), str(tmp_path / "b")]))
    from study.compare import main

    with pytest.raises(SystemExit):
        main(["--help"])
    assert capsys.readouterr().out.startswith("usage: python -m study.compare ")
