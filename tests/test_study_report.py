"""What a person reads of a study: the tables and the paired plot agree in sign and counts (read from one committed
results.json, against the runs' own losses), the first line says what the study can conclude, every committed
results.md is small enough to read, labels a config gives cells, and a paired plot whose every text lies inside it."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.text import Text

from errors import OptionError
from study import plots, report
from study.cells import cell_name, given_labels, parse_cell, study_cells
from study.config import AblateConfig

REPO = Path(__file__).resolve().parents[1]


def table_rows(lines: list[str]) -> dict[tuple[str, str], list[str]]:
    """A Markdown comparison table's rows by (a, b)."""
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    return {(row[1], row[2]): row for row in cells}


def test_the_table_and_the_plot_give_one_sign_and_one_count():
    """Was: results.md said `learned − rope = +0.0508` where the plot drew rope − learned at −0.05, and "seeds a/b
    lower 1/1" where the plot said "lower in 1/2 seeds". Both from docs/speedrun_records/results.json (its reference
    is its first cell, so each pair with it was compared reference − cell), checked against the runs' losses."""
    results = json.loads((REPO / "docs" / "speedrun_records" / "results.json").read_text())
    labels, reference = results["labels"], results["ablate_config"]["reference"]
    family = results["comparisons"]["training length"]
    assert all(row["a"] == reference for row in family if reference in (row["a"], row["b"]))  # flipping is tested
    table = table_rows(report.comparison_table(family, results["block_size"], labels, reference))
    _, _, families, _, _, named_reference = plots.relabelled(labels, results["summary"], [], results["comparisons"],
                                                             None, results["budgets"], reference)
    panels = plots.paired_panels(families, results, named_reference)
    rows, names, _ = panels[0]
    key = f"nonoverlapping {results['block_size']}"
    losses = {(run["variant"], run["seed"]): run["eval"]["loss"][key] for run in results["runs"]}
    assert len(rows) == len(labels) - 1
    for row, name in zip(rows, names, strict=True):
        cell = next(c for c, label in labels.items() if label == row["a"])
        differences = [losses[cell, seed] - losses[reference, seed] for seed in sorted({s for _, s in losses})]
        lower = f"{sum(d < 0 for d in differences)}/{len(differences)}"
        assert name == f"{labels[cell]} − {labels[reference]}" and row["b"] == labels[reference]
        assert row["mean"] == pytest.approx(np.mean(differences), abs=1e-12)
        assert plots.paired_note(row).startswith(f"lower in {lower} seeds")
        shown = table[labels[cell], labels[reference]]
        assert float(shown[3]) == pytest.approx(np.mean(differences), abs=5e-5)  # the table's mean a − b
        assert shown[7] == lower


def scope(seeds: int, holm: list[bool], split: str = "test") -> str:
    records = [{"variant": cell, "seed": seed, "budget": 150} for cell in ("learned", "rope") for seed in range(seeds)]
    study = {"own_steps": False, "headline_budget": 150, "split": split,
             "ablate_config": {"budgets": [], "equivalence_margin": 0.0}}
    return report.scope_line(study, records, {"training length": [{"holm": h} for h in holm]})


def test_the_first_line_says_what_a_study_can_conclude():
    """Was: a 2-seed, 150-step study read "CI excludes 0: **yes**" with no word of its size."""
    few = scope(2, [True, False])
    assert "2 seeds per cell, 150 steps, scored on the test split; 1 of 2 paired comparisons survive Holm" in few
    assert "1 degree of freedom" in few and "not a settled result" in few
    assert "settled" not in scope(5, [True, False]) and "2 of 2" in scope(5, [True, True])
    assert "no comparison is tested" in scope(1, [False])
    assert "confirm on test" in scope(5, [True], "val")


def test_a_table_of_uncorrected_significance_has_no_bold_yes():
    row = {"a": "rope", "b": "learned", "a_protocol": "nonoverlapping", "b_protocol": "nonoverlapping", "length": 64,
           "mean": -0.05, "low": -0.09, "high": -0.01, "mean_bits_per_byte": -0.07, "p": 0.04, "a_wins": 2,
           "b_wins": 0, "n": 2, "significant": True, "holm": False, "unit": "nats/token", "untested": None}
    shown = table_rows(report.comparison_table([row], 64, {}, "learned"))["rope", "learned"]
    assert shown[7:10] == ["2/2", "yes", "no"]


def test_every_committed_report_is_small_enough_to_read():
    """Was: docs/context_extension/results.md, 1.3 MB (every pair of 44 cells at each length); GitHub renders none
    that large. Every pair stays in results.json."""
    reports = sorted((REPO / "docs").glob("*/results.md"))
    assert len(reports) >= 20
    assert {p.parent.name: p.stat().st_size for p in reports if p.stat().st_size >= 300_000} == {}


def test_a_large_family_shows_the_pairs_of_its_base_cells_and_names_the_rest():
    cells = [f"c{i}" for i in range(12)]
    extended = {f"c{i}" for i in range(4, 12)}
    found = [{"a": a, "b": b, "holm": a == "c0", "length": 64} for i, a in enumerate(cells) for b in cells[i + 1:]]
    found *= 2  # two lengths: 132 rows
    shown, which = report.shown_pairs(found, "c0", extended)
    assert len(shown) == 12 and which == "pairs of cells that extend no other"
    assert all(not extended & {r["a"], r["b"]} for r in shown)
    shown, which = report.shown_pairs(found, "c0", set())
    assert len(shown) == 22 and all("c0" in (r["a"], r["b"]) for r in shown) and which == "pairs with the reference"
    assert report.shown_pairs(found[:60], "c0", extended) == (found[:60], "")


def test_a_config_labels_its_cells_and_a_bad_label_is_one_line():
    config = AblateConfig(variants=["learned", "rope optimizer=muon", "alibi"],
                          labels=["recipe: learned", "open track:  rope   optimizer=muon"])
    cells = study_cells(config)
    assert given_labels(config, cells) == {"learned": "recipe", "rope optimizer=muon": "open track"}
    for labels, said in ((["recipe learned"], "must be 'label: cell'"), (["x: none"], "'none' is not one of"),
                         (["x: learned", "y: learned"], "labelled twice"), (["alibi: learned"], "would name two")):
        with pytest.raises(OptionError, match=said):
            given_labels(AblateConfig(variants=config.variants, labels=labels), cells)


def test_the_speedrun_records_are_labelled_by_their_tracks():
    """config/ablate_speedrun.py names its three cells; the cells, their folders and records keep their names."""
    from ablate import read_options

    ablate, _, _ = read_options([str(REPO / "config" / "ablate_speedrun.py")])
    cells = study_cells(ablate)
    labels = given_labels(ablate, cells)
    recorded = json.loads((REPO / "docs" / "speedrun_records" / "results.json").read_text())
    assert list(labels) == [cell_name(c) for c in cells] == list(recorded["labels"])
    assert list(labels.values()) == ["nanoGPT's recipe", "GPT-2 track", "open track"]
    assert cell_name(parse_cell(ablate.variants[1])) in recorded["labels"]


def drawn_figure(monkeypatch, families: dict, reference: str, lengths: list[int]):
    """plot_paired's figure, laid out and drawn, instead of saved."""
    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, path: (fig.canvas.draw(), figures.append(fig)))
    study = {"block_size": 64, "lengths": lengths}
    assert plots.plot_paired(Path("unused"), families, study, reference) == "paired_differences"
    return figures[0]


def paired_row(a: str, b: str, mean: float, length: int = 64) -> dict:
    differences = [mean - 0.01, mean, mean + 0.012]
    return {"a": a, "b": b, "length": length, "mean": mean, "low": mean - 0.02, "high": mean + 0.02, "p": 0.01,
            "n": 3, "a_wins": sum(d < 0 for d in differences), "b_wins": sum(d > 0 for d in differences),
            "differences": differences, "significant": True, "holm": True, "untested": None}


@pytest.mark.parametrize("cells", [2, 40])
def test_every_text_of_the_paired_plot_lies_inside_it_and_its_axes_keep_the_width(monkeypatch, cells):
    """Was: two 90-character cell names took the whole width (the panel a sliver, its title cut off), and 43 rows
    cut every name off at the left edge. Names as long, 2 and 40 rows: every text inside the figure, every panel
    at least half its width, the figure as tall as its rows need."""
    long = "learned lr_schedule=wsd optimizer=muon lr 0.003 muon_learning_rate=0.01 batch_size=24 max_iters=500"
    names = [f"{long} {i}" for i in range(cells)]
    families = {"training length": [paired_row("reference", name, 0.05 * (-1) ** i) for i, name in enumerate(names)],
                "extrapolation against the sliding window": [paired_row(n, n, 0.3, 256) for n in names]}
    fig = drawn_figure(monkeypatch, families, "reference", [64, 256])
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert len(texts) > 4 * cells
    for text in texts:
        extent = text.get_window_extent(renderer)
        assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1, text.get_text()
        assert box.y0 - 1 <= extent.y0 and extent.y1 <= box.y1 + 1, text.get_text()
    panels = [ax for ax in fig.axes if ax.get_xlabel()]
    assert len(panels) == 2
    for ax in panels:
        assert ax.get_window_extent(renderer).width >= 0.5 * box.width
        rows = len(ax.get_yticks())
        assert ax.get_window_extent(renderer).height >= rows * 0.3 * fig.dpi  # each row its room


def test_a_long_name_wraps_at_spaces():
    assert all(len(line) <= plots.NAME_WIDTH for line in plots.wrapped("a" * 10 + " b=" * 40).split("\n"))


def test_the_budgets_plot_of_near_budgets_keeps_its_labels_apart_and_inside(monkeypatch):
    """Was: budgets 450 and 500 steps apart by a ninth had two-line tick labels written over each other. The committed
    round-two study (8 budgets, 150 to 500 steps): no two tick labels of a panel overlap; they, the axes' labels and
    the titles are inside the figure."""
    study = json.loads((REPO / "docs" / "speedrun2_warmup" / "results.json").read_text(encoding="utf-8"))
    figures = []
    monkeypatch.setattr(plots, "save", lambda fig, path: (fig.canvas.draw(), figures.append(fig)))
    budgets = plots.relabelled(study["labels"], [], [], {}, None, study["budgets"], "")[4]  # as the report draws it
    assert plots.plot_budgets(Path("unused"), budgets, study) == "budgets"
    fig = figures[0]
    renderer, box = fig.canvas.get_renderer(), fig.bbox
    for ax in [ax for ax in fig.axes if ax.get_xlabel()]:
        labels = [label for label in ax.get_xticklabels() if label.get_text()]
        assert len(labels) == 8
        # slanted at angle a, neighbours anchored dx apart stand dx * sin(a) apart across their lines: a line each
        anchors = sorted(ax.transData.transform((x, 0))[0] for x in ax.get_xticks())
        angle, line = math.radians(labels[0].get_rotation()), labels[0].get_fontsize() * fig.dpi / 72
        assert angle > 0
        assert min(b - a for a, b in zip(anchors, anchors[1:], strict=False)) * math.sin(angle) >= line
    axes = [ax for ax in fig.axes if ax.get_xlabel()]
    for text in [t for ax in axes for t in (*ax.get_xticklabels(), ax.xaxis.label, ax.yaxis.label, ax.title)
                 if t.get_text().strip()]:
        extent = text.get_window_extent(renderer)
        assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1, text.get_text()
        assert box.y0 - 1 <= extent.y0 and extent.y1 <= box.y1 + 1, text.get_text()


def test_a_budget_column_names_the_tokens_of_each_cell_that_trained_other_ones():
    """Was: the Budgets table's heading "300 steps (460,800 tokens)" stood over the cell whose batch grew from 8 to
    24 sequences over 100 steps (docs/speedrun2_combined_gpt2), which trained on fewer. The heading keeps the
    reference's count and that cell says its own, here summed step by step from the schedule's line; a study whose
    cells share one count per budget reads as its committed results.md does."""
    study = json.loads((REPO / "docs" / "speedrun2_combined_gpt2" / "results.json").read_text(encoding="utf-8"))
    lines = report.budget_table(study["budgets"], study)
    [heading] = [line for line in lines if line.startswith("| cell |")]
    [grown] = [line for line in lines if line.startswith("| NorMuon, batch 8 to 24 over 100 steps |")]
    for budget, cell in zip((300, 325, 350, 375), grown.strip("|").split("|")[1:], strict=True):
        sequences = sum(8 + (24 - 8) * step // 100 for step in range(100)) + (budget - 100) * 24
        assert f" [{sequences * 64:,} tokens];" in cell
        assert f"| {budget} steps ({budget * 24 * 64:,} tokens) |" in heading + " |"
    assert sum("tokens]" in line for line in lines) == 1  # the other cells train on the heading's count
    plain = json.loads((REPO / "docs" / "positions_budgets" / "results.json").read_text(encoding="utf-8"))
    text = "\n".join(report.budget_table(plain["budgets"], plain))
    assert text in (REPO / "docs" / "positions_budgets" / "results.md").read_text(encoding="utf-8")
