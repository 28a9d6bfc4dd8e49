"""Two studies of the same cells side by side at one budget, in bits per byte: the character and the BPE position
studies, whose losses per token are not comparable but whose losses per byte of the same text are.

    python -m study.compare --studies=docs/positions_budgets,docs/positions_bpe --budget=2000

Reads each study's results.json (the numbers its results.md shows), never its runs: every cell both studies hold,
its mean test bits per byte at L = block_size ± the 95% t interval over seeds, and its gap to the reference cell,
paired by seed within the study, with its interval and the seeds in which the cell was lower. A Markdown table.
"""

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from errors import UserError
from study.paired_stats import CONFIDENCE

RESULTS = "results.json"  # what ablate.py writes into each study folder


@dataclass
class CompareConfig:
    studies: list[str] = field(default_factory=list)  # study folders (each with results.json), first is the left column
    budget: int = 0  # the budget in steps to compare at; every study must have it (0: the largest they all have)


def read_results(study_dir: str) -> dict:
    path = Path(study_dir) / RESULTS
    if not path.is_file():
        raise UserError(f"--studies: {path} does not exist; run ablate.py on that study (or --report_only=True) first")
    try:
        return json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"--studies: {path} is not whole JSON ({type(e).__name__}: {e}); redraw it with ablate.py "
                        "on that study and --report_only=True") from None


def common_budget(results: dict[str, dict], budget: int) -> int:
    """The budget asked for, or the largest one every study has; a UserError naming each study's budgets."""
    have = {name: sorted(int(b) for b in r["budgets"]["by_budget"]) for name, r in results.items()}
    shared = set.intersection(*(set(b) for b in have.values()))
    listing = "; ".join(f"{name}: {', '.join(map(str, b))}" for name, b in have.items())
    if budget == 0 and shared:
        return max(shared)
    if not shared:
        raise UserError(f"the studies share no budget ({listing}); compare studies that trained to one budget")
    if budget not in shared:
        raise UserError(f"--budget={budget}: not a budget of every study ({listing}); pick one they share")
    return budget


def study_column(results: dict, budget: int) -> dict[str, dict]:
    """{cell: mean and interval in bits per byte, the gap to the reference (None for the reference itself)}. The
    gap's interval in bits per byte is its interval in nats per token times the study's one factor tokens / bytes /
    ln 2: every cell of a study scores the same tokens of the same split."""
    entry = results["budgets"]["by_budget"][str(budget)]
    key = f"nonoverlapping {results['block_size']}"
    column = {}
    for row in entry["rows"]:
        (loss, _), (bits, half) = row["loss"][key], row["bits_per_byte"][key]
        factor = bits / loss
        gap = next((g for g in entry["gaps"] if g["a"] == row["variant"]), None)
        column[row["variant"]] = {
            "bits": bits, "half": half, "seeds": len(row["seeds"]),
            "gap": None if gap is None else {
                "mean": gap["mean"] * factor, "low": gap["low"] * factor, "high": gap["high"] * factor,
                "wins": gap["a_wins"], "n": gap["n"]}}
    return column


def gap_text(gap: dict | None) -> str:
    if gap is None:
        return "—"
    return f"{gap['mean']:+.3f} [{gap['low']:+.3f}, {gap['high']:+.3f}], lower in {gap['wins']} of {gap['n']}"


def compare_table(config: CompareConfig) -> str:
    if len(config.studies) < 2:
        raise UserError(f"--studies={','.join(config.studies)}: name at least two study folders, comma-separated")
    results = {name: read_results(name) for name in config.studies}
    splits = {name: r["split"] for name, r in results.items()}
    if len(set(splits.values())) > 1:
        raise UserError(f"--studies: they score different splits ({splits}); compare studies of one split")
    if own := [name for name, r in results.items() if r.get("own_steps")]:
        raise UserError(f"--studies: {', '.join(own)}: each cell trains to its own steps, so there is no one budget "
                        "to compare at; read it with python -m study.table --study=<folder>")
    budget = common_budget(results, config.budget)
    columns = {name: study_column(r, budget) for name, r in results.items()}
    cells = [cell for cell in columns[config.studies[0]] if all(cell in c for c in columns.values())]
    if not cells:
        raise UserError(f"--studies: no cell is in every study ({', '.join(config.studies)}); "
                        "they are compared cell by cell")
    labels = results[config.studies[0]]["labels"]
    references = {labels.get(r["budgets"]["reference"], r["budgets"]["reference"]) for r in results.values()}
    head = ["cell"]
    for name in config.studies:
        seeds = "/".join(sorted({str(columns[name][cell]["seeds"]) for cell in cells}))
        head += [f"{Path(name).name} ({seeds} seeds)", f"gap, {Path(name).name}"]
    lines = [f"{results[config.studies[0]]['split']} bits per byte at L = block_size, {budget} steps, mean ± "
             f"{CONFIDENCE:.0%} t interval over seeds; gap: the cell − {' / '.join(sorted(references))}, "
             "paired by seed within each study [its interval].", "",
             "| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for cell in cells:
        values = [text for name in config.studies for text in (
            f"{columns[name][cell]['bits']:.3f} ± {columns[name][cell]['half']:.3f}",
            gap_text(columns[name][cell]["gap"]))]
        lines.append("| " + " | ".join([labels.get(cell, cell)] + values) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    from options import parse_options

    (config,) = parse_options(argv, (CompareConfig,), prog="-m study.compare", description=__doc__)
    print(compare_table(config))


if __name__ == "__main__":
    from errors import main_guard

    main_guard(main, sys.argv[1:])
