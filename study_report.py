"""What a study reports from its runs' records: per-cell means with intervals, the families of paired
comparisons (Holm within each), and results.md/.csv/.json."""

import csv
import io
import itertools
import json
import math
import typing
from pathlib import Path

import numpy as np
import torch

import ablate_plots
from files import write_atomic
from paired_stats import CONFIDENCE, holm, interval, paired
from study_eval import sliding_geometry

if typing.TYPE_CHECKING:
    from ablate import AblateConfig

CHECKPOINT = "ckpt.pt"  # the final model of each run, the one every evaluation scores


def seed_values(records: list[dict], variant: str, protocol: str, length: int) -> dict[int, float] | None:
    """{seed: loss} of a cell under one protocol and length; None when the cell cannot run it."""
    entries = ablate_plots.seed_entries(records, variant, protocol, length)
    return None if entries is None else {seed: entry["loss"] for seed, entry in entries.items()}


def comparisons(records: list[dict], pairs: list[tuple], lengths: list[int]) -> list[dict]:
    """Paired differences for pairs of (cell, protocol) at each length, with Holm's correction per length."""
    rows = []
    for length in lengths:
        found = []
        for (a, pa), (b, pb) in pairs:
            va, vb = seed_values(records, a, pa, length), seed_values(records, b, pb, length)
            if va is None or vb is None:
                continue
            seeds = sorted(set(va) & set(vb))
            found.append({"a": a, "a_protocol": pa, "b": b, "b_protocol": pb, "length": length,
                          **paired([va[s] for s in seeds], [vb[s] for s in seeds])})
        for row, rejected in zip(found, holm([r["p"] for r in found]), strict=True):
            row["significant"] = bool(row["low"] > 0 or row["high"] < 0)
            row["holm"] = rejected
        rows += found
    return rows


def summarize(records: list[dict], lengths: list[int], protocols: list[str]) -> list[dict]:
    """One row per cell: mean and interval over its seeds at each protocol and length."""
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in records):
        runs = [r for r in records if r["variant"] == variant]
        row = {"variant": variant, "seeds": [r["seed"] for r in runs], "parameters": runs[0]["parameters"],
               "steps": float(np.mean([r["iter_num"] for r in runs])),
               "train_seconds": interval([r["train_seconds"] for r in runs]),
               "tokens_per_sec": interval([r["tokens_per_sec"] for r in runs]), "loss": {}}
        for protocol in protocols:
            for n in lengths:
                values = seed_values(records, variant, protocol, n)
                row["loss"][f"{protocol} {n}"] = None if values is None else interval(list(values.values()))
        rows.append(row)
    return rows


def fmt(value: tuple[float, float] | None, digits: int = 4) -> str:
    """"mean ± half-width of the interval"; n/a where a cell cannot run."""
    if value is None:
        return "n/a"
    mean, half = value
    return f"{mean:,.{digits}f}" if math.isnan(half) else f"{mean:,.{digits}f} ± {half:,.{digits}f}"


def length_label(n: int, block_size: int) -> str:
    return f"L={n} ({n / block_size:g}x)"


def markdown_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(cells) + " |" for cells in [columns, ["---"] * len(columns), *rows]]


def comparison_table(rows: list[dict], block_size: int) -> list[str]:
    def side(name: str, protocol: str, other: str) -> str:
        return f"{name} ({protocol})" if protocol != other else name

    cells = [[length_label(r["length"], block_size), side(r["a"], r["a_protocol"], r["b_protocol"]),
              side(r["b"], r["b_protocol"], r["a_protocol"]), f"{r['mean']:+.4f}",
              f"[{r['low']:+.4f}, {r['high']:+.4f}]", f"{r['p']:.2g}", f"{r['a_wins']}/{r['b_wins']}",
              "**yes**" if r["significant"] else "no", "**yes**" if r["holm"] else "no"] for r in rows]
    columns = ["length", "a", "b", "mean a − b", f"{CONFIDENCE:.0%} CI", "p (paired t)", "seeds a/b lower",
               "CI excludes 0", "after Holm"]
    return markdown_table(columns, cells)


def study_comparisons(records: list[dict], cells: list[str], lengths: list[int], ablate: "AblateConfig",
                      block_size: int) -> dict[str, list[dict]]:
    """The families of paired tests the results report; Holm's correction applies within each (and length)."""
    between = list(itertools.combinations(cells, 2))
    families = {"training length": comparisons(records, [((a, "nonoverlapping"), (b, "nonoverlapping"))
                                                         for a, b in between], [block_size])}
    longer = [n for n in lengths if n > block_size]
    if "sliding" in ablate.protocols and "nonoverlapping" in ablate.protocols:
        families["extrapolation against the sliding window"] = comparisons(
            records, [((c, "nonoverlapping"), (c, "sliding")) for c in cells], longer)
    for protocol in ablate.protocols:
        families[f"longer, {protocol}"] = comparisons(records, [((a, protocol), (b, protocol)) for a, b in between],
                                                      longer)
    return families


FAMILY_NOTES = {
    "training length": "Every pair of cells at L = block_size, non-overlapping windows (the headline).",
    "extrapolation against the sliding window": "Each cell's own final model: the whole window as context "
    "(non-overlapping) minus at most the sliding window. Negative: looking further back than it was trained "
    "to helps; positive: it hurts, and the sliding window is the better way to use that model on long text.",
    "longer, nonoverlapping": "Pairs of cells past the training length, non-overlapping windows.",
    "longer, sliding": "Pairs of cells past the training length, sliding window.",
}


def header_lines(ablate: "AblateConfig", plan: list[dict], records: list[dict]) -> list[str]:
    first, model_config = plan[0]["train_config"], plan[0]["model_config"]
    window, stride = sliding_geometry(ablate, model_config.block_size)
    budget = f"{first.max_iters} steps" + (f" or {first.max_seconds:g} s of training" if first.max_seconds else "")
    train_minutes = sum(r["train_seconds"] for r in records) / 60
    eval_minutes = sum(r["eval"]["seconds"] for r in records) / 60
    seeds = sorted({r["seed"] for r in records})
    lines = [
        f"# Study: {', '.join(dict.fromkeys(r['variant'] for r in plan))}", "",
        f"Dataset `{first.dataset}` ({records[0]['eval']['tokens']:,} val tokens); n_layer {model_config.n_layer}, "
        f"n_head {model_config.n_head}, n_embd {model_config.n_embd}, block_size {model_config.block_size}, batch "
        f"{first.batch_size}, learning rate {first.learning_rate:g}; budget {budget} per run; seeds "
        f"{seeds[0]}..{seeds[-1]} for every cell (one seed gives every cell the same initialisation of the shared "
        f"weights and the same batches). Compute: {train_minutes:.1f} min of training and {eval_minutes:.1f} min of "
        f"evaluation in all, {torch.get_num_threads()} torch thread(s).", "",
        f"Each number is the mean over {len(seeds)} seed(s) ± the half-width of its {CONFIDENCE:.0%} t confidence "
        f"interval. Every run's **final** model ({CHECKPOINT}) is scored on the **whole** val split at each length L"
        + (": *nonoverlapping*: consecutive windows of L tokens, every token scored once with the tokens before it "
           "in its window as context" if "nonoverlapping" in ablate.protocols else "")
        + (f"; *sliding*: the same windows, but no forward pass holds more than {window} tokens (pieces advance by "
           f"{stride}, so a token past position {window} has {window - stride}..{window - 1} tokens of context). "
           "At L = block_size both are the same number, the headline val loss" if "sliding" in ablate.protocols
           else "") + ".",
    ]
    if any(entry is None for r in records for by_length in r["eval"]["protocols"].values()
           for entry in by_length.values()):
        lines += ["", "n/a: a learned table has no rows past block_size."]
    return lines


def write_results(study_dir: Path, rows: list[dict], families: dict[str, list[dict]], records: list[dict],
                  lengths: list[int], header: list[str], study: dict, plots: list[str]) -> None:
    block_size = study["block_size"]
    keys = [k for k in rows[0]["loss"] if not (k.startswith("sliding") and int(k.split()[1]) <= study["window"])]
    columns = ["cell", "parameters", "steps", "train s/run"] + [
        f"{k.split()[0]} {length_label(int(k.split()[1]), block_size)}" for k in keys]
    table = [[row["variant"], f"{row['parameters']:,}", f"{row['steps']:g}", f"{row['train_seconds'][0]:.0f}"]
             + [fmt(row["loss"][k]) for k in keys] for row in rows]
    lines = header + ["", *markdown_table(columns, table)]
    for family, found in families.items():
        if found:
            lines += ["", f"## Paired differences: {family}", "", FAMILY_NOTES[family], "",
                      *comparison_table(found, block_size)]
    lines += ["", f"Paired: seed s of one cell against seed s of the other. p: two-sided paired t test. *CI excludes "
              f"0*: significant at {1 - CONFIDENCE:.0%} on its own; *after Holm*: still significant when the whole "
              "table at that length is corrected for multiple comparisons (Holm 1979).", ""]
    lines += [f"![{name}]({name}.png)" for name in plots]
    write_atomic(study_dir / "results.md", "\n".join(lines) + "\n")

    table_csv = io.StringIO()
    writer = csv.writer(table_csv)
    writer.writerow(["cell", "protocol", "length", "mean", "ci_half_width", "seeds", "parameters", "steps"])
    for row in rows:
        for k, value in row["loss"].items():
            protocol, n = k.split()
            writer.writerow([row["variant"], protocol, n, *(("n/a", "n/a") if value is None else value),
                             len(row["seeds"]), row["parameters"], row["steps"]])
    write_atomic(study_dir / "results.csv", table_csv.getvalue())
    runs = [{k: v for k, v in r.items() if k != "settings"} for r in records]
    write_atomic(study_dir / "results.json", json.dumps(
        {**study, "summary": rows, "comparisons": families, "runs": runs}, indent=1))

