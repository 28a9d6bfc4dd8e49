"""What a study reports from its runs' records: per-cell means with intervals, the families of paired
comparisons (Holm within each), and results.md/.csv/.json."""

import csv
import functools
import io
import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from model import GPT
from study.config import PROTOCOLS, AblateConfig
from study.evaluation import bits_per, sliding_geometry, untrained_buckets
from study.paired_stats import CONFIDENCE, holm, interval, paired, plus_minus, tost, verdict
from study.plan import StudyRun, control_cells
from study.plots import (
    against,
    budget_tokens,
    plot_all,
    plot_time_to_target,
    seed_entries,
    seeds_lower,
    write_report_file,
)
from study.target import target_rows, target_table
from text.dataset import resolve_data_dir
from text.tokenizer import read_description
from train import build_model
from training.run_dir import CHECKPOINT


def seed_values(records: list[dict], variant: str, protocol: str, length: int,
                unit: str | None = None) -> dict[int, float] | None:
    """{seed: loss} of a cell under one protocol and length, in nats per token (unit None) or in bits per byte
    ("bytes") or per character ("chars") of the split its own run scored; None when the cell cannot run it."""
    entries = seed_entries(records, variant, protocol, length)
    if entries is None:
        return None
    runs = {r["seed"]: r for r in records if r["variant"] == variant}
    return {seed: entry["loss"] if unit is None else bits_per(entry["loss"], runs[seed]["eval"], unit)
            for seed, entry in entries.items()}


def one_split(records: list[dict]) -> bool:
    """Whether every record was scored on the same tokens; cells that tokenize the text differently (a dataset
    per cell) are not, and only bits per byte compares them."""
    return len({(r["eval"]["tokens"], r["eval"]["bytes"]) for r in records}) == 1


def bits_factor(records: list[dict], unit: str) -> float:
    """Nats per token to bits per byte (unit "bytes") or per character ("chars") on the split the records were
    scored on (one split: every record's counts are the same)."""
    counts = {(r["eval"]["tokens"], r["eval"][unit]) for r in records}
    assert len(counts) == 1, f"the records were scored on different splits: {counts}"
    return bits_per(1.0, next(iter(records))["eval"], unit)


def comparisons(records: list[dict], pairs: list[tuple], lengths: list[int], margin: float = 0.0) -> list[dict]:
    """Paired differences for pairs of (cell, protocol) at each length, with Holm's correction per length; with a
    margin, the equivalence test (TOST, Holm-corrected the same way) and the verdict of each pair."""
    rows = []
    unit = None if one_split(records) else "bytes"
    to_bits_per_byte = 1.0 if unit else bits_factor(records, "bytes")  # the differences are in bits/byte already
    for length in lengths:
        found = []
        for (a, pa), (b, pb) in pairs:
            va, vb = seed_values(records, a, pa, length, unit), seed_values(records, b, pb, length, unit)
            if va is None or vb is None:
                continue
            seeds = sorted(set(va) & set(vb))
            found.append({"a": a, "a_protocol": pa, "b": b, "b_protocol": pb, "length": length, "seeds": seeds,
                          **paired([va[s] for s in seeds], [vb[s] for s in seeds])})
        for row, rejected in zip(found, holm([r["p"] for r in found]), strict=True):
            row["significant"] = bool(row["low"] > 0 or row["high"] < 0)
            row["holm"] = rejected
            row["unit"] = "bits/byte" if unit else "nats/token"
            row["mean_bits_per_byte"] = row["mean"] * to_bits_per_byte
        if margin:  # a row paired() found no test for has none here either (its spread is rounding)
            tost_p = [math.nan if r["untested"] else tost(r["differences"], margin) for r in found]
            for row, p, equivalent in zip(found, tost_p, holm(tost_p), strict=True):
                row.update(margin=margin, tost_p=p, equivalent=equivalent,
                           verdict=verdict(equivalent, row["holm"], row["untested"]))
        rows += found
    return rows


def summarize(records: list[dict], lengths: list[int], protocols: list[str], labels: dict[str, str]) -> list[dict]:
    """One row per cell: mean and interval over its seeds at each protocol and length, in nats per token and in
    bits per byte and per character."""
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in records):
        runs = [r for r in records if r["variant"] == variant]
        row = {"variant": variant, "label": labels.get(variant, variant), "seeds": [r["seed"] for r in runs],
               "parameters": runs[0]["parameters"], "budget": runs[0]["budget"],
               # the mean over seeds, as steps: max_seconds stops each seed at its own step
               "tokens_seen": round(np.mean([r.get("tokens_seen", r["budget"] * r["tokens_per_iter"]) for r in runs])),
               "steps": float(np.mean([r["iter_num"] for r in runs])),
               "train_seconds": interval([r["train_seconds"] for r in runs]),
               "tokens_per_sec": interval([r["tokens_per_sec"] for r in runs]), "loss": {}}
        for protocol in protocols:
            for n in lengths:
                values = seed_values(records, variant, protocol, n)
                row["loss"][f"{protocol} {n}"] = None if values is None else interval(list(values.values()))
        for unit in ("bytes", "chars"):
            factor = bits_factor(runs, unit)
            row[f"bits_per_{unit[:-1]}"] = {k: None if v is None else (v[0] * factor, v[1] * factor)
                                            for k, v in row["loss"].items()}
        rows.append(row)
    return rows


def length_label(n: int, block_size: int) -> str:
    return f"L={n} ({n / block_size:g}x)"


def markdown_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(cells) + " |" for cells in [columns, ["---"] * len(columns), *rows]]


def interval_text(row: dict) -> str:
    """A paired row's interval, each end rounded from its own value; where no test was made, why not."""
    return row["untested"] or f"[{row['low']:+.4f}, {row['high']:+.4f}]"


def p_text(p: float) -> str:
    return "n/a" if math.isnan(p) else f"{p:.2g}"


def comparison_table(rows: list[dict], block_size: int, labels: dict[str, str], reference: str = "") -> list[str]:
    """A family's pairs, each the other cell − the reference where the pair holds it (plots.against: the paired
    plot's sign), with the seeds in which a is lower (plots.seeds_lower: the plot's count)."""
    def side(name: str, protocol: str, other: str) -> str:
        return f"{labels.get(name, name)} ({protocol})" if protocol != other else labels.get(name, name)

    rows = [against(r, reference) for r in rows]
    tested = any("verdict" in r for r in rows)
    cells = [[length_label(r["length"], block_size), side(r["a"], r["a_protocol"], r["b_protocol"]),
              side(r["b"], r["b_protocol"], r["a_protocol"]), f"{r['mean']:+.4f}", interval_text(r),
              f"{r['mean_bits_per_byte']:+.4f}", p_text(r["p"]), seeds_lower(r),
              "yes" if r["significant"] else "no",
              "**yes**" if r["holm"] else "no"] + ([p_text(r["tost_p"]), f"**{r['verdict']}**"] if tested else [])
             for r in rows]
    columns = ["length", "a", "b", f"mean a − b ({rows[0]['unit']})", f"{CONFIDENCE:.0%} CI", "a − b (bits/byte)",
               "p (paired t)", "seeds a lower", "CI excludes 0", "after Holm"]
    columns += [f"p (TOST, ±{rows[0]['margin']:g})", "verdict"] if tested else []
    return markdown_table(columns, cells)


# The families of every pair of cells (study_comparisons' pairs_of), which grow as the square of the cells
PAIRS = ("training length", "training length, each cell at its own learning rate", "longer, nonoverlapping",
         "longer, sliding")
# A family of more pairs than this (every pair of 44 cells, at each length: 4,400 rows, 1.3 MB of results.md) shows
# the pairs a person reads in results.md; results.json keeps every pair (python -m study.table prints them).
SHOWN_PAIRS = 60


def shown_pairs(rows: list[dict], reference: str, extended: set[str]) -> tuple[list[dict], str]:
    """The rows of a family results.md shows and which they are: all of them (""), or for a large family the
    pairs of cells that extend no other (from_cell), or fewer still, the pairs that hold the reference."""
    if len(rows) <= SHOWN_PAIRS:
        return rows, ""
    bases = [r for r in rows if not extended & {r["a"], r["b"]}]
    if len(bases) <= SHOWN_PAIRS:
        return bases, "pairs of cells that extend no other"
    return [r for r in bases if reference in (r["a"], r["b"])], "pairs with the reference"


def family_lines(family: str, found: list[dict], study: dict, reference: str) -> list[str]:
    """A family's section of results.md: its note and its table, and a line where it shows part of the family."""
    shown, which = shown_pairs(found, reference, set(study["from_cells"])) if family in PAIRS else (found, "")
    lines = ["", f"## Paired differences: {family}", "", FAMILY_NOTES[family]]
    if which:
        lines += ["", f"Shown: the {len(shown)} {which}, of the family's {len(found)} (Holm corrects over all of them "
                  f"at each length; {sum(r['holm'] for r in found)} survive). Every pair: results.json, or "
                  f"`python -m study.table --study={study['ablate_config']['study_dir']} --family=\"{family}\"`."]
    return lines + ["", *comparison_table(shown, study["block_size"], study["labels"], reference)]


def study_comparisons(records: list[dict], cells: list[str], lengths: list[int], ablate: AblateConfig,
                      block_size: int, own: dict[str, str] | None = None,
                      bases: dict[str, str] | None = None) -> dict[str, list[dict]]:
    """The families of paired tests the results report; Holm's correction applies within each (and length).
    cells: the cells at the common learning rate; own: {cell: the cell at its own learning rate} after a sweep;
    bases: {finetune cell: the cell it started from} (ablate's from_cell).
    Past block_size the sliding protocol is compared only where its window is shorter than the eval length
    (else both protocols are one computation, and a model would be compared with itself)."""
    margin = ablate.equivalence_margin
    at_block = [block_size]

    def pairs_of(names: list[str], protocol: str) -> list[tuple]:  # every pair, or each with a compare_to cell
        kept = {(own or {}).get(c, c) for c in ablate.compare_to} | set(ablate.compare_to)
        return [((a, protocol), (b, protocol)) for a, b in itertools.combinations(names, 2)
                if not kept or a in kept or b in kept]

    families = {"training length": comparisons(records, pairs_of(cells, "nonoverlapping"), at_block, margin)}
    if own:
        families["training length, each cell at its own learning rate"] = comparisons(
            records, pairs_of(list(own.values()), "nonoverlapping"), at_block, margin)
        families["own learning rate against the common one"] = comparisons(
            records, [((own[c], "nonoverlapping"), (c, "nonoverlapping")) for c in cells if own[c] != c], at_block,
            margin)
    longer = [n for n in lengths if n > block_size]
    past_window = [n for n in longer if n > sliding_geometry(ablate, block_size)[0]]
    if "sliding" in ablate.protocols and "nonoverlapping" in ablate.protocols:
        families["extrapolation against the sliding window"] = comparisons(
            records, [((c, "nonoverlapping"), (c, "sliding")) for c in cells], past_window)
    for protocol in ablate.protocols:
        families[f"longer, {protocol}"] = comparisons(records, pairs_of(cells, protocol),
                                                      longer if protocol == "nonoverlapping" else past_window)
    if bases and "sliding" in ablate.protocols and "nonoverlapping" in ablate.protocols:
        extends = {r["variant"] for r in records if r["settings"]["train_config"]["extend_positions"]}
        # A cell that does not extend its base (a control) reads past block_size by its sliding window alone: set
        # beside its base's, it is what training more gives without reading further.
        families["finetune against its base's sliding window"] = comparisons(
            records, [((c, "nonoverlapping" if c in extends else "sliding"), (b, "sliding"))
                      for c, b in bases.items()], past_window)
        controls = control_cells(records, bases)
        if controls:
            families["finetune against its control's sliding window"] = comparisons(
                records, [((c, "nonoverlapping"), (control, "sliding")) for c, control in controls.items()],
                past_window)
    return families


def budget_summary(records: list[dict], study: dict, ablate: AblateConfig) -> dict:
    """Every budget at L = block_size: each cell's mean and interval, and each cell's paired gap to the reference
    cell (with the TOST verdict when a margin is set); the data of the loss- and gap-against-tokens plots."""
    block_size, cells = study["block_size"], study["cells"]
    reference = ablate.reference or cells[0]
    longer = [n for n in study["lengths"] if n > block_size] if set(PROTOCOLS) <= set(ablate.protocols) else []
    by_budget = {}
    # Cells of their own steps (a time-to-target study) share no budget: a gap at each would lack the reference
    for budget in [] if study["own_steps"] else sorted({r["budget"] for r in records}):
        runs = [r for r in records if r["budget"] == budget]
        pairs = [((c, "nonoverlapping"), (reference, "nonoverlapping")) for c in cells if c != reference]
        itself = [((c, "nonoverlapping"), (c, "sliding")) for c in cells]
        by_budget[budget] = {"rows": summarize(runs, [block_size], ["nonoverlapping"], study["labels"]),
                             "gaps": comparisons(runs, pairs, [block_size], ablate.equivalence_margin),
                             # past block_size at every budget: does longer training make reading further worse?
                             "extrapolation": comparisons(runs, itself, longer)}
    return {"reference": reference, "by_budget": by_budget, "moves": gap_moves(by_budget)}


def gap_moves(by_budget: dict, kind: str = "gaps") -> list[dict]:
    """Whether the ranking was read where it had stopped moving: for each budget after the first, each cell's
    paired gap to the reference there minus at the budget before, seed by seed on the seeds both have (extra
    budgets have fewer; a larger budget continues the same seeds' runs, so the change is paired too), with its
    interval and the paired t test that it is 0, Holm-corrected over the cells of that pair of budgets. A gap
    whose change the test rejects was still moving, however small the change is against the gap's own interval.
    kind "extrapolation": the same of each cell's whole window minus its sliding window (by_budget's rows at one
    length: study.table's "extrapolation changes between budgets")."""
    moves = []
    for (low, before), (high, after) in itertools.pairwise(sorted(by_budget.items())):
        earlier = {g["a"]: g for g in before[kind]}
        cells = {}
        for gap in after[kind]:
            if gap["a"] not in earlier or gap["untested"]:
                continue
            was = dict(zip(earlier[gap["a"]]["seeds"], earlier[gap["a"]]["differences"], strict=True))
            seeds = [seed for seed in gap["seeds"] if seed in was]
            now = dict(zip(gap["seeds"], gap["differences"], strict=True))
            test = paired([now[seed] for seed in seeds], [was[seed] for seed in seeds])
            cells[gap["a"]] = {"change": test["mean"], "low": test["low"], "high": test["high"], "p": test["p"],
                               "untested": test["untested"], "seeds": len(seeds)}
        for cell, rejected in zip(cells.values(), holm([c["p"] for c in cells.values()]), strict=True):
            cell["moved"] = rejected
        moves.append({"from": low, "to": high, "cells": cells})
    return moves


FAMILY_NOTES = {
    "training length": "Every pair of cells at L = block_size, non-overlapping windows (the headline).",
    "training length, each cell at its own learning rate": "The same pairs, each cell at the learning rate the "
    "sweep picked for it on val (the common rate where that was its best).",
    "own learning rate against the common one": "Each cell at its own learning rate minus the same cell at the "
    "common one, at L = block_size.",
    "extrapolation against the sliding window": "Each cell's own final model: the whole window as context "
    "(non-overlapping) minus at most the sliding window. Negative: looking further back than it was trained "
    "to helps; positive: it hurts, and the sliding window is the better way to use that model on long text.",
    "longer, nonoverlapping": "Pairs of cells past the training length, non-overlapping windows.",
    "longer, sliding": "Pairs of cells past the training length, sliding window.",
    "finetune against its base's sliding window": "Each from_cell cell (an extended, perhaps finetuned model) with "
    "its whole window as context minus the model it started from under the sliding window, past the training "
    "length. Negative: the extension reads further than the base can. A control (the base trained as many steps "
    "more at its own length) is read under its sliding window: what the extra training alone gives.",
    "finetune against its control's sliding window": "Each extended and finetuned cell with its whole window as "
    "context minus its base's control under the sliding window: the base trained as many steps more at its own "
    "length, on as many tokens a step. Negative: the extension reads further, beyond what the extra training "
    "gives.",
}

TITLE_CELLS = 8  # cells a report's title names by their labels
FEW_SEEDS = 5  # fewer seeds than this and the report's first line says a surviving comparison is a lead


def study_title(study: dict, cells: list[str]) -> str:
    """"# Study: " and its cells' labels; past a few, the cells that extend others (from_cell) are counted."""
    labels = list(dict.fromkeys(study["labels"][cell] for cell in cells))
    bases = list(dict.fromkeys(study["labels"][cell] for cell in cells if cell not in study["from_cells"]))
    if len(labels) <= TITLE_CELLS:
        return f"# Study: {', '.join(labels)}"
    shown = bases[:TITLE_CELLS]
    more = [f"{len(bases) - len(shown)} more"] * (len(bases) > len(shown)) + [
        f"{len(labels) - len(bases)} cells that extend them"] * (len(labels) > len(bases))
    return f"# Study: {', '.join(shown)} and {' and '.join(more)}"


def scope_line(study: dict, records: list[dict], families: dict[str, list[dict]]) -> str:
    """What the study can and cannot conclude, in one line: its seeds, budget and split, and how many of its paired
    comparisons survive Holm; few seeds are said to be few."""
    seeds = min(len({r["seed"] for r in records if r["variant"] == cell})
                for cell in dict.fromkeys(r["variant"] for r in records))
    steps = sorted({r["budget"] for r in records})
    budget = (f"each cell's own steps ({steps[0]}–{steps[-1]})" if study["own_steps"] and len(steps) > 1
              else f"{study['headline_budget']} steps")
    others = sorted(set(study["ablate_config"]["budgets"]) - {study["headline_budget"]})
    budget += f" (other budgets: {', '.join(map(str, others))})" if others and not study["own_steps"] else ""
    pairs = [r for found in families.values() for r in found]
    margin = study["ablate_config"]["equivalence_margin"]
    survived = (f"{sum(r['holm'] for r in pairs)} of {len(pairs)} paired comparisons survive Holm's correction"
                + (f", {sum(r.get('equivalent', False) for r in pairs)} are equivalent within ±{margin:g}" if margin
                   else "") if pairs else "one cell: no paired comparison")
    if seeds == 1:
        few = "with 1 seed no comparison is tested: the tables rank single runs, and a rerun may reorder them"
    elif seeds < FEW_SEEDS:
        few = (f"with {seeds} seeds each interval rests on {seeds - 1} degree{'s' * (seeds > 2)} of freedom: "
               "a comparison that survives is a lead to rerun with more seeds, not a settled result")
    else:
        few = ""
    split = study["split"] + (" (the split choices are made on: confirm on test)" if study["split"] == "val" else "")
    return (f"**What this study can conclude:** {seeds} seed{'s' * (seeds > 1)} per cell, {budget}, scored on the "
            f"{split} split; {survived}. It says nothing of other budgets, data or model sizes" + (
                f"; {few}" if few else "") + ".")


def header_lines(ablate: AblateConfig, plan: list[StudyRun], records: list[dict], study: dict,
                 families: dict[str, list[dict]]) -> list[str]:
    first, model_config = plan[0].train_config, plan[0].model_config
    window, stride = sliding_geometry(ablate, model_config.block_size)
    budget = ("each cell's own steps (the steps column)" if study["own_steps"] else
              f"{study['headline_budget']} steps") + (
        f" or {first.max_seconds:g} s of training" if first.max_seconds else "")
    budgets = sorted(ablate.budgets)
    schedules = {(r.train_config.decay_lr, r.train_config.lr_schedule) for r in plan}
    schedule = ("schedule per cell" if len(schedules) > 1 else f"{first.lr_schedule} schedule" + (
        f" (decay over the last {first.wsd_decay_fraction:g} of each budget, {first.wsd_decay_shape})"
        if first.lr_schedule == "wsd" else "") if first.decay_lr else "constant learning rate")
    train_minutes = sum(r["train_seconds"] for r in records) / 60
    eval_minutes = sum(r["eval"]["seconds"] for r in records) / 60
    seeds = sorted({r["seed"] for r in records})
    counts, compute = records[0]["eval"], study["compute_seconds"]
    # The runs' threads (the order of a float sum changes with them), not this process's; older records lack them
    threads = " or ".join(str(n) for n in sorted({r["provenance"].get("threads", 0) for r in records}) if n) or "?"
    lines = [
        study_title(study, [r.variant for r in plan]), "", scope_line(study, records, families), "",
        (f"Dataset `{first.dataset}`, scored on its **{study['split']}** split ({counts['tokens']:,} tokens, "
         f"{counts['bytes']:,} bytes, {counts['chars']:,} characters)" if one_split(records) else
         f"Datasets {', '.join(sorted({f'`{r.dataset}`' for r in (run.train_config for run in plan)}))}, each "
         f"scored on its own **{study['split']}** split; the cells tokenize the text differently, so they are "
         "compared in bits per byte (a t test on each seed's bits per byte)")
        + f"; n_layer {model_config.n_layer}, n_head "
        f"{model_config.n_head}, n_embd {model_config.n_embd}, block_size {model_config.block_size}, batch "
        f"{first.batch_size}, learning rate {first.learning_rate:g}, {schedule}; the tables' budget {budget} per run"
        + (f" (budgets {', '.join(map(str, budgets))})" if len(budgets) > 1 else "")
        + (f"; extra budgets {', '.join(map(str, ablate.extra_budgets))} for {', '.join(ablate.extra_variants)} "
           f"on their first {ablate.extra_seeds} seeds" if ablate.extra_budgets else "") + f"; seeds "
        f"{seeds[0]}..{seeds[-1]} for every cell (one seed gives every cell the same initialisation of the shared "
        f"weights and the same batches). Compute at this budget: {train_minutes:.1f} min of training and "
        f"{eval_minutes:.1f} min of evaluation in all; the whole study (every budget"
        + (", the learning-rate sweep" if study["lr_sweep"] else "") + f"): {compute['train'] / 60:.1f} + "
        f"{compute['eval'] / 60:.1f} min; each run on {threads} torch thread(s).", "",
        f"Each number is the mean over {len(seeds)} seed(s) ± the half-width of its {CONFIDENCE:.0%} t confidence "
        f"interval. Every run's **final** model ({CHECKPOINT}) is scored on the **whole** {study['split']} split at "
        "each length L"
        + (": *nonoverlapping*: consecutive windows of L tokens, every token scored once with the tokens before it "
           "in its window as context" if "nonoverlapping" in ablate.protocols else "")
        + (f"; *sliding*: the same windows, but no forward pass holds more than {window} tokens (pieces advance by "
           f"{stride}, so a token past position {window} has {window - stride}..{window - 1} tokens of context). "
           f"At L = block_size both are the same number, the headline {study['split']} loss"
           if "sliding" in ablate.protocols else "") + ". Losses in nats per token; bits per byte and per "
        "character divide the same total by the UTF-8 bytes and the characters the scored tokens stand for.",
    ]
    if any(entry is None for r in records for by_length in r["eval"]["protocols"].values()
           for entry in by_length.values()):
        lines += ["", "n/a: a learned table has no rows past block_size."]
    return lines + [f"\nNote: {line}." for line in untrained_buckets(plan, ablate)]


def main_table(rows: list[dict], study: dict) -> list[str]:
    block_size = study["block_size"]
    keys = [k for k in rows[0]["loss"] if not (k.startswith("sliding") and int(k.split()[1]) <= study["window"])]
    headline = f"nonoverlapping {block_size}"
    columns = ["cell", "parameters", "steps", "train s/run"] + [
        f"{k.split()[0]} {length_label(int(k.split()[1]), block_size)}" for k in keys] + [
        f"bits/byte {length_label(block_size, block_size)}", f"bits/char {length_label(block_size, block_size)}"]
    table = [[row["label"], f"{row['parameters']:,}", f"{row['steps']:g}", f"{row['train_seconds'][0]:.0f}"]
             + [plus_minus(row["loss"][k]) for k in keys]
             + [plus_minus(row["bits_per_byte"].get(headline)), plus_minus(row["bits_per_char"].get(headline))]
             for row in rows]
    return markdown_table(columns, table)


def budget_table(budgets: dict, study: dict) -> list[str]:
    """Each cell's loss at L = block_size at every budget, and its gap to the reference."""
    labels, reference = study["labels"], budgets["reference"]
    tokens = {budget: budget_tokens(entry, reference) for budget, entry in budgets["by_budget"].items()}
    # A column's one count would be wrong for a cell of another batch size or a batch-size schedule: it says its own
    own = any(row["tokens_seen"] != tokens[b] for b, entry in budgets["by_budget"].items() for row in entry["rows"])
    lines = ["", "## Budgets", "", f"Each cell at each budget, L = block_size, non-overlapping (nats/token; bits per "
             f"byte after the slash); gap: the cell − {labels.get(reference, reference)}, paired by seed"
             + (", with the TOST verdict" if study["ablate_config"]["equivalence_margin"] else "")
             + (f". A column's heading counts the tokens {labels.get(reference, reference)} trained on; a cell that "
                "trained on others (another batch size, a batch-size schedule) gives its own in brackets"
                if own else "") + ".", ""]
    columns = ["cell"] + [f"{b} steps ({tokens[b]:,} tokens)" for b in budgets["by_budget"]]
    table = []
    for cell in dict.fromkeys(row["variant"] for entry in budgets["by_budget"].values() for row in entry["rows"]):
        cells = [labels.get(cell, cell)]
        for budget, entry in budgets["by_budget"].items():
            row = next((r for r in entry["rows"] if r["variant"] == cell), None)
            gap = next((g for g in entry["gaps"] if g["a"] == cell), None)
            key = f"nonoverlapping {study['block_size']}"
            text = "" if row is None else (
                f"{plus_minus(row['loss'][key])} / {plus_minus(row['bits_per_byte'][key])}" + (
                    f" [{row['tokens_seen']:,} tokens]" if row["tokens_seen"] != tokens[budget] else ""))
            if gap is not None:
                text += f"; gap {gap['mean']:+.4f} {interval_text(gap)}" + (
                    f" {gap['verdict']}" if "verdict" in gap and not gap["untested"] else "")
            cells.append(text)
        table.append(cells)
    return lines + markdown_table(columns, table) + ["", last_budgets_change(budgets, study)] + moves_text(
        budgets, study) + extrapolation_table(budgets, study)


def extrapolation_table(budgets: dict, study: dict) -> list[str]:
    """Each cell's whole window minus its own sliding window past block_size, at every budget."""
    entries = [(budget, row) for budget, entry in budgets["by_budget"].items()
               for row in entry.get("extrapolation", [])]
    if not entries:
        return []
    labels, block_size = study["labels"], study["block_size"]
    columns = list(dict.fromkeys((budget, row["length"]) for budget, row in entries))
    found = {(row["a"], budget, row["length"]): row for budget, row in entries}
    lines = ["", "Past the training length at each budget: the whole window minus the same model's sliding window "
             "(nats/token, paired by seed; positive: the longer context hurts).", ""]
    table = [[labels.get(cell, cell)] + [
        "" if (cell, budget, n) not in found else
        f"{found[cell, budget, n]['mean']:+.4f} {interval_text(found[cell, budget, n])}" for budget, n in columns]
        for cell in dict.fromkeys(row["a"] for _, row in entries)]
    head = [f"{budget} steps, {length_label(n, block_size)}" for budget, n in columns]
    return lines + markdown_table(["cell"] + head, table)


def moves_text(budgets: dict, study: dict) -> list[str]:
    labels = study["labels"]
    reference = labels.get(budgets["reference"], budgets["reference"])
    lines = []
    for moves in budgets.get("moves", []):
        if not moves["cells"]:
            continue
        changes = [f"{labels.get(cell, cell)} {m['change']:+.4f} "
                   f"{m['untested'] or interval_text(m)}{', moving' * m['moved']}"
                   for cell, m in moves["cells"].items()]
        moved = [labels.get(cell, cell) for cell, m in moves["cells"].items() if m["moved"]]
        seeds = "/".join(sorted({str(m["seeds"]) for m in moves["cells"].values()}))
        lines += ["", f"Change of each gap to {reference} from {moves['from']} to {moves['to']} steps, seed by seed on "
                  f"the {seeds} seeds both have, with its {CONFIDENCE:.0%} interval (paired t test of no change, Holm "
                  f"over the cells): {', '.join(changes)}. "
                  + (f"Still moving: {', '.join(moved)}." if moved else "No change told apart from 0.")]
    return lines


def last_budgets_change(budgets: dict, study: dict) -> str:
    """How much each cell's mean loss still moved between the two largest budgets: whether the ranking was read
    where training had stopped improving."""
    (low, before), (high, after) = list(budgets["by_budget"].items())[-2:]
    key = f"nonoverlapping {study['block_size']}"
    means = [{row["variant"]: row["loss"][key][0] for row in entry["rows"]} for entry in (before, after)]
    changes = [f"{study['labels'].get(cell, cell)} {(means[1][cell] - means[0][cell]) / means[0][cell]:+.2%}"
               for cell in means[1] if cell in means[0]]
    return f"Change of the mean loss from {low} to {high} steps: {', '.join(changes)}."


def learning_rate_table(sweep: dict, rows: list[dict], study: dict, common: float) -> list[str]:
    """Each cell at the common learning rate and at its own (picked on val), with the sweep's val losses."""
    by_cell = {row["variant"]: row for row in rows}
    key = f"nonoverlapping {study['block_size']}"
    rates = sorted({lr for by_rate in sweep["val"].values() for lr in by_rate})
    split = study["split"]
    columns = ["cell", f"{split} loss at lr {common:g}", "own lr (val pick)", f"{split} loss at own lr"]
    columns += [f"val, lr {lr:g}" for lr in rates]
    table = [[study["labels"].get(cell, cell), plus_minus(by_cell[cell]["loss"][key]), f"{sweep['picks'][cell]:g}",
              plus_minus(by_cell[sweep["own"][cell]]["loss"][key])]
             + [plus_minus(interval(sweep["val"][cell][lr])) for lr in rates] for cell in sweep["val"]]
    return ["", "## Learning rate per cell", "", f"The sweep trained every cell at each rate for {sweep['budget']} "
            "steps on its own seeds and scored it on **val**; each cell's own rate is its lowest mean val loss "
            "(min_lr scales with it). The headline runs are scored on the test split.", "",
            *markdown_table(columns, table)]


def comparison_notes(families: dict[str, list[dict]], margin: float) -> list[str]:
    """The footnotes of the paired tables, the TOST margin in the unit the rows were compared in."""
    unit = next((row["unit"] for found in families.values() for row in found), "nats/token")
    lines = ["", f"Paired: seed s of one cell against seed s of the other. p: two-sided paired t test. *CI excludes "
             f"0*: significant at {1 - CONFIDENCE:.0%} on its own; *after Holm*: still significant when the whole "
             "table at that length is corrected for multiple comparisons (Holm 1979). *no spread: no test*: every "
             "seed gave the same difference, so t is undefined: the row is neither significant nor equivalent."]
    if margin:
        lines += [f"TOST: two one-sided paired t tests of |a − b| ≥ {margin:g} {unit}, the margin fixed in the "
                  "study's config before it ran, Holm-corrected like the t test. *equivalent*: TOST rejects (the "
                  f"difference is within ±{margin:g}); *different*: the t test rejects after Holm; *inconclusive*: "
                  "neither."]
    return lines


def write_results(study_dir: Path, rows: list[dict], families: dict[str, list[dict]], records: list[dict],
                  header: list[str], study: dict, plots: list[str], budgets: dict, target: list[dict] | None) -> None:
    labels = study["labels"]
    lines = header + ["", *main_table(rows, study)]
    if target:
        config = study["ablate_config"]
        lines += target_table(target, config["target_loss"], labels, config["reference"] or target[0]["variant"],
                              study["split"])
    if len(budgets["by_budget"]) > 1:
        lines += budget_table(budgets, study)
    if study["lr_sweep"]:
        lines += learning_rate_table(study["lr_sweep"], rows, study, records[0]["settings"]["train_config"][
            "learning_rate"])
    reference = study["ablate_config"]["reference"] or study["cells"][0]
    for family, found in families.items():
        if found:
            lines += family_lines(family, found, study, reference)
    lines += comparison_notes(families, study["ablate_config"]["equivalence_margin"])
    lines += [""] + [f"![{name}]({name}.png)" for name in plots]
    results = {"results.md": "\n".join(lines) + "\n", "results.csv": results_csv(rows, budgets),
               "results.json": json.dumps({**study, "summary": rows, "comparisons": families, "budgets": budgets,
                                           **({"target": target} if target else {}),
                                           "runs": [run_summary(r) for r in records]}, indent=1)}
    for name, text in results.items():
        write_report_file(study_dir / name, functools.partial(Path.write_text, data=text))


def run_summary(record: dict) -> dict:
    """A run as results.json keeps it: its numbers and its val-estimate curve, not its per-position losses,
    train-loss log or settings (those stay in the run's own done.json and eval.json)."""
    kept = {k: v for k, v in record.items() if k not in ("settings", "train_losses", "eval")}
    evaluation = record["eval"]
    return {**kept, "eval": {**{k: v for k, v in evaluation.items() if k != "protocols"}, "loss": {
        f"{protocol} {n}": None if entry is None else entry["loss"]
        for protocol, by_length in evaluation["protocols"].items() for n, entry in by_length.items()}}}


def results_csv(rows: list[dict], budgets: dict) -> str:
    """One line per cell, budget, protocol and length: the headline budget's rows, then the other budgets'."""
    table_csv = io.StringIO()
    writer = csv.writer(table_csv)
    writer.writerow(["cell", "protocol", "length", "mean", "ci_half_width", "seeds", "parameters", "steps", "label",
                     "budget", "tokens_seen", "bits_per_byte", "bits_per_char"])
    others = [row for b, entry in budgets["by_budget"].items() if b != rows[0]["budget"] for row in entry["rows"]]
    for row in rows + others:
        for k, value in row["loss"].items():
            protocol, n = k.split()
            bpb, bpc = row["bits_per_byte"][k], row["bits_per_char"][k]
            writer.writerow([row["variant"], protocol, n, *(("n/a", "n/a") if value is None else value),
                             len(row["seeds"]), row["parameters"], row["steps"], row["label"], row["budget"],
                             row["tokens_seen"], "n/a" if bpb is None else bpb[0], "n/a" if bpc is None else bpc[0]])
    return table_csv.getvalue()


# ---------------------------------------------------------------------------------------------------- the report


def initial_model(run: StudyRun) -> GPT:
    """The model a run starts from, rebuilt exactly as train() builds it (same seed, same code path)."""
    description = read_description(resolve_data_dir(run.train_config.dataset))
    torch.manual_seed(run.seed)
    # From scratch even for a branch (whose config resumes its start's checkpoint): step 0 of its seed.
    model, _ = build_model(replace(run.train_config, init_from="scratch"), replace(run.model_config),
                           description)
    return model


def position_tables(plan: list[StudyRun], records: list[dict]) -> dict | None:
    """The learned position table of the first learned run, at initialisation and at the end (from its record)."""
    learned = next(((run, record) for run, record in zip(plan, records, strict=True)
                    if run.model_config.pos_encoding == "learned"), None)
    if learned is None:
        return None
    run, record = learned
    return {"cell": run.variant, "seed": run.seed, "tables": {
        "at initialisation (step 0)": initial_model(run).input_layer.wpe.detach().float(),
        f"after training (step {record['iter_num']})": torch.tensor(record["eval"]["position_table"])}}


def with_history(plan: list[StudyRun], records: list[dict]) -> list[dict]:
    """The records with each branch's val-estimate curve preceded by those of the runs it continues (a wsd
    branch's own curve starts where its constant-rate segment ended), and its training time theirs added."""
    by_dir = {run.dir: (run, record) for run, record in zip(plan, records, strict=True)}
    full = []
    for run, record in zip(plan, records, strict=True):
        evals, seconds, start = list(record["evals"]), record["train_seconds"], run.start_from
        while start is not None:
            earlier, earlier_record = by_dir[start]
            evals = [e for e in earlier_record["evals"] if e["iter"] < evals[0]["iter"]] + evals
            seconds += earlier_record["train_seconds"]
            start = earlier.start_from
        full.append({**record, "evals": evals, "train_seconds": seconds})
    return full


def report_study(study_dir: Path, plan: list[StudyRun], records: list[dict], study: dict,
                 ablate: AblateConfig) -> dict:
    """Tables, comparisons and plots of the evaluated runs: the main ones at the headline budget."""
    def at_headline(budget: int) -> bool:  # cells of their own steps (a time-to-target study) are all headline
        return study["own_steps"] or budget == study["headline_budget"]

    evaluated = [r for r in with_history(plan, records) if "eval" in r]
    headline = [r for r in evaluated if at_headline(r["budget"])]
    cells = list(dict.fromkeys(r["variant"] for r in headline))
    reference = ablate.reference or cells[0]
    rows = summarize(headline, study["lengths"], ablate.protocols, study["labels"])
    families = study_comparisons(headline, study["cells"], study["lengths"], ablate, study["block_size"],
                                 (study["lr_sweep"] or {}).get("own"), study["from_cells"])
    budgets = budget_summary(evaluated, study, ablate)
    headline_runs = [(run, record) for run, record in zip(plan, records, strict=True)
                     if run.role == "run" and at_headline(run.budget)]
    headline_plan = [run for run, _ in headline_runs]
    plots = plot_all(study_dir, rows, headline, families, study,
                                  position_tables(headline_plan, [record for _, record in headline_runs]),
                                  reference, budgets)
    # every budget of each cell (how soon it reaches the target), timed against the reference at the headline
    target = target_rows(evaluated, cells, reference, ablate.target_loss, study["block_size"], next(
        r["budget"] for r in headline if r["variant"] == reference)) if ablate.target_loss else None
    if target:
        plots.append(plot_time_to_target(study_dir, target, study, ablate.target_loss))
    header = header_lines(ablate, headline_plan, headline, study, families)
    write_results(study_dir, rows, families, headline, header, study, plots, budgets, target)
    return {"summary": rows, "comparisons": families, "budgets": budgets, "runs": records,
            **({"target": target} if target else {})}
