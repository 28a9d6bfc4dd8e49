"""A study's paired gaps as a Markdown table, each number rounded once from the exact value its results.json holds
(a number rounded from results.md's four places again is off in its last digit). The write-ups' study tables are
its output, with the command beside them:

    python -m study.table --study=docs/positions_budgets --family="gaps by budget"
    python -m study.table --study=docs/context_extension --family="finetune against its base's sliding window"

A row is a pair a − b (the cells' labels), a column a budget, a length or both: --family is "gaps by budget" (each
cell against the reference at L = block_size), "changes between budgets" (each such gap's paired change), or
"extrapolation by budget" (each cell's whole window against its sliding window past block_size), "extrapolation
changes between budgets" (each such extrapolation's paired change), or any family of results.md's "Paired
differences" at the headline budget ("training length", "longer, sliding", ...). A change between budgets is paired
by seed (a larger budget continues the same seeds' runs) and starred where it survives Holm over the cells at its
length and pair of budgets.

--against=CELL tests pairs the report did not: each other cell − CELL, paired by seed from the headline runs that
results.json keeps, at the lengths of "training length", "longer, nonoverlapping" or "longer, sliding":

    python -m study.table --study=docs/positions_extrapolation --family="longer, sliding" --against="rope lr 0.003"

A pair chosen after seeing the results is exploration, not the study's test: say so beside it.

--pairs is a family of its own, pairs chosen after the results (a write-up's literature verdicts rest on them):
each "a − b" with a side "LABEL @L" or "LABEL (sliding) @L" (non-overlapping unless named; a side's own length, so
that a cell's 2x can be set against its 1x), paired by seed from the headline runs; each pair's p of the paired t
test and of TOST at the study's equivalence margin, both uncorrected and Holm-adjusted over the family:

    python -m study.table config/table_extrapolation_literature.py
"""

import math
import re
import sys
from dataclasses import dataclass, field

from errors import UserError
from study.compare import read_results
from study.paired_stats import CONFIDENCE, holm_adjusted, paired, tost
from study.report import comparisons, gap_moves, p_text, seed_values

BY_BUDGET = {"gaps by budget": "gaps", "extrapolation by budget": "extrapolation"}
MOVES = "changes between budgets"
EXTRAPOLATION_MOVES = "extrapolation changes between budgets"


@dataclass
class TableConfig:
    study: str = ""  # a study folder holding results.json (ablate.py writes it)
    family: str = "gaps by budget"  # a family of the docstring's: by budget, between budgets, or one of results.md's
    lengths: list[int] = field(default_factory=list)  # the eval lengths to show (empty: every one)
    budgets: list[int] = field(default_factory=list)  # the budgets to show (empty: every one)
    digits: int = 3  # decimals of every number, each rounded once from its exact value
    bits_per_byte: bool = False  # the gaps in bits per byte of the scored text, not nats per token
    against: str = ""  # a cell (label or name): each other cell − it from the headline runs, not the report's pairs
    pairs: list[str] = field(default_factory=list)  # a family of its own: "a @L − b @L" each, Holm over them all


def entries(results: dict, family: str) -> list[tuple[dict, int | str, int | None]]:
    """(paired row, budget or "from → to", length) of the family, in the order results.json keeps them."""
    by_budget = results["budgets"]["by_budget"]
    if family in BY_BUDGET:
        return [(row, int(b), row["length"]) for b, entry in by_budget.items() for row in entry[BY_BUDGET[family]]]
    if family == MOVES:
        reference = results["budgets"]["reference"]
        return [({**row, "a": cell, "b": reference, "a_protocol": "", "b_protocol": "", "mean": row["change"]},
                 f"{move['from']} → {move['to']}", None)
                for move in results["budgets"]["moves"] for cell, row in move["cells"].items()]
    if family == EXTRAPOLATION_MOVES:
        by_budget = {int(b): entry for b, entry in results["budgets"]["by_budget"].items()}
        lengths = dict.fromkeys(row["length"] for entry in by_budget.values() for row in entry["extrapolation"])
        return [({**row, "a": cell, "b": cell, "a_protocol": "nonoverlapping", "b_protocol": "sliding",
                  "mean": row["change"]}, f"{move['from']} → {move['to']}", n)
                for n in lengths
                for move in gap_moves({b: {"extrapolation": [r for r in entry["extrapolation"] if r["length"] == n]}
                                       for b, entry in by_budget.items()}, "extrapolation")
                for cell, row in move["cells"].items()]
    if family not in results["comparisons"]:
        known = [*BY_BUDGET, MOVES, EXTRAPOLATION_MOVES, *results["comparisons"]]
        raise UserError(f"--family={family!r} is not in this study; it has: {', '.join(map(repr, known))}")
    # a time-to-target study's cells each train their own steps (results.json before it had no own_steps)
    budget = "each cell's own steps" if results.get("own_steps") else results["headline_budget"]
    return [(row, budget, row["length"]) for row in results["comparisons"][family]]


def protocols_of(losses: dict[str, float | None]) -> dict[str, dict]:
    """results.json's {"protocol length": loss} of a run in eval.json's shape, {protocol: {length: {"loss"}}}, which
    report.comparisons reads (None: the cell has no positions that far)."""
    protocols: dict[str, dict] = {}
    for key, loss in losses.items():
        protocol, n = key.split()
        protocols.setdefault(protocol, {})[n] = None if loss is None else {"loss": loss}
    return protocols


def headline_records(results: dict) -> list[dict]:
    """The headline runs results.json keeps, each with its losses in eval.json's shape (as report.comparisons
    reads them)."""
    return [{**run, "eval": {**run["eval"], "protocols": protocols_of(run["eval"]["loss"])}}
            for run in results["runs"]]


def cell_named(results: dict, given: str, where: str) -> str:
    """The cell of a label or name; a UserError naming the cells where there is none (where: the option, as the
    message starts)."""
    cell = {label: name for name, label in results["labels"].items()}.get(given, given)
    if cell not in results["labels"]:
        raise UserError(f"{where}{given!r} is not a cell of this study; its cells: "
                        f"{', '.join(map(repr, results['labels'].values()))}")
    return cell


def against_entries(results: dict, family: str, against: str) -> list[tuple[dict, int | str, int | None]]:
    """Each other cell − the cell `against` at the family's protocol and lengths, paired by seed over the headline
    runs results.json keeps (their losses per protocol and length)."""
    cell = cell_named(results, against, "--against=")
    block_size, longer = results["block_size"], [n for n in results["lengths"] if n > results["block_size"]]
    where = {"training length": ("nonoverlapping", [block_size]), "longer, nonoverlapping": ("nonoverlapping", longer),
             "longer, sliding": ("sliding", [n for n in longer if n > results["window"]])}
    if family not in where:
        raise UserError(f"--against pairs two cells under one protocol: give --family as one of "
                        f"{', '.join(map(repr, where))}, not {family!r}")
    protocol, lengths = where[family]
    records = headline_records(results)
    pairs = [((other, protocol), (cell, protocol)) for other in results["labels"] if other != cell]
    budget = "each cell's own steps" if results.get("own_steps") else results["headline_budget"]
    return [(row, budget, row["length"]) for row in comparisons(records, pairs, lengths)]


# One side of a --pairs pair: a cell's label or name, its protocol in brackets if not non-overlapping, its length
SIDE = re.compile(r"(?P<cell>.+?)(?: \((?P<protocol>nonoverlapping|sliding)\))? @(?P<length>[0-9]+)")


def pair_sides(results: dict, pair: str) -> list[tuple[str, str, int]]:
    """The two (cell, protocol, length) of a --pairs entry "a − b" (an ASCII hyphen between spaces will do)."""
    sides = re.split(r" [−-] ", pair.strip())
    matched = [SIDE.fullmatch(side.strip()) for side in sides]
    if len(sides) != 2 or None in matched:
        raise UserError(f"--pairs: {pair!r} is not \"a − b\" with each side \"LABEL @L\" or \"LABEL (sliding) @L\", "
                        "e.g. \"xpos lr 0.003 @64 − rope lr 0.003 @64\"")
    return [(cell_named(results, m["cell"], f"--pairs: {pair!r}: "), m["protocol"] or "nonoverlapping",
             int(m["length"])) for m in matched]


def pair_name(results: dict, sides: list[tuple[str, str, int]]) -> str:
    """A pair as --pairs takes it back, each cell by its label."""
    return " − ".join(f"{results['labels'][cell]}" + (f" ({protocol})" if protocol != "nonoverlapping" else "")
                      + f" @{n}" for cell, protocol, n in sides)


def study_family(results: dict, sides: list[tuple[str, str, int]]) -> tuple[str, list[dict], int] | None:
    """(the name, the rows at its length, the pair's place among them) of the family of results.json's comparisons
    that tests this pair (either way round); None if none does."""
    (a, pa, n), (b, pb, m) = sides
    for name, rows in results["comparisons"].items():
        at_length = [row for row in rows if row["length"] == n]
        for index, row in enumerate(at_length):
            if n == m and {(row["a"], row["a_protocol"]), (row["b"], row["b_protocol"])} == {(a, pa), (b, pb)}:
                return name, at_length, index
    return None


def family_rows(results: dict, pairs: list[str], margin: float) -> list[dict]:
    """Each pair's paired row (paired_stats.paired) with its TOST p at margin, and both p Holm-adjusted
    ("holm_p", "holm_tost_p") over its family: the study's own family where results.json's comparisons test the
    pair (each cell against a compare_to cell, or its whole window against its sliding one: planned before the
    runs), else the others given here (chosen after the results: the literature family)."""
    records, rows, planned = headline_records(results), [], {}
    for pair in pairs:
        sides = pair_sides(results, pair)
        values = [seed_values(records, cell, protocol, n) for cell, protocol, n in sides]
        if None in values:
            raise UserError(f"--pairs: {pair!r}: {pair_name(results, [sides[values.index(None)]])} has no loss "
                            "there (a learned table has no rows past block_size)")
        seeds = sorted(set(values[0]) & set(values[1]))
        row = {"pair": pair_name(results, sides), **paired([values[0][s] for s in seeds],
                                                           [values[1][s] for s in seeds])}
        rows.append({**row, "tost_p": math.nan if row["untested"] else tost(row["differences"], margin)})
        planned[len(rows) - 1] = study_family(results, sides)
    chosen = [i for i, found in planned.items() if found is None]
    for i, found in planned.items():
        name, family, index = ("literature", [rows[j] for j in chosen], chosen.index(i)) if found is None else found
        tost_p = [math.nan if other["untested"] else tost(other["differences"], margin) for other in family]
        rows[i].update(family=f"{name} ({len(family)})", holm_p=holm_adjusted([other["p"] for other in family])[index],
                   holm_tost_p=holm_adjusted(tost_p)[index])
    return rows


def family_table(config: TableConfig, results: dict) -> str:
    """--pairs: one row per pair, its interval, p and TOST p, each uncorrected and Holm-adjusted over its family,
    and what survives at the study's error rate: lower, higher, equivalent, or not told apart."""
    if config.against or config.lengths or config.budgets or config.bits_per_byte or \
            config.family != TableConfig.family:
        raise UserError("--pairs makes a family of its own at the headline budget in nats/token: drop --family, "
                        "--against, --lengths, --budgets and --bits_per_byte")
    margin, alpha = results["ablate_config"]["equivalence_margin"], 1 - CONFIDENCE
    if not margin:
        raise UserError(f"{config.study} set no equivalence_margin: --pairs has no TOST margin to test against")
    rows = family_rows(results, config.pairs, margin)

    def survives(row: dict) -> str:
        if row["holm_p"] <= alpha:
            return "lower" if row["mean"] < 0 else "higher"
        return f"equivalent within ±{margin:g}" if row["holm_tost_p"] <= alpha else "not told apart"

    lines = [f"{results['split']} loss, nats/token: a − b, mean over seeds [{CONFIDENCE:.0%} paired t interval], "
             f"p of the paired t test and of TOST (±{margin:g}), each uncorrected and Holm-adjusted over the pair's "
             "family (its size in brackets: a family of results.md where the study planned the pair, else the "
             f"literature family of the pairs here that none tests); what survives at {alpha:g} "
             f"({config.study}/results.json, {results['headline_budget']} steps)", "",
             "| | a − b | mean [95%] | p | Holm p | TOST p | Holm TOST p | family | after Holm |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for i, row in enumerate(rows, 1):
        numbers = [p_text(row[key]) for key in ("p", "holm_p", "tost_p", "holm_tost_p")]
        lines.append("| " + " | ".join([f"#{i}", row["pair"], gap_text(row, config), *numbers, row["family"],
                                        row["untested"] or survives(row)]) + " |")
    return "\n".join(lines)


def number(value: float, digits: int) -> str:
    return f"{value:+.{digits}f}".replace("-", "−")


def gap_text(row: dict, config: TableConfig) -> str:
    """"mean [low, high]", or why no test was made."""
    if row.get("untested"):
        return f"n/a ({row['untested']})"
    if config.bits_per_byte and row.get("mean_bits_per_byte") is None:
        return "n/a (no bytes recorded)"
    scale = row["mean_bits_per_byte"] / row["mean"] if config.bits_per_byte else 1.0
    mean = row["mean_bits_per_byte"] if config.bits_per_byte else row["mean"]
    low, high = (number(row[end] * scale, config.digits) for end in ("low", "high"))
    # a change between budgets that Holm's correction over the cells (at its length) still rejects is starred
    return f"{number(mean, config.digits)} [{low}, {high}]" + ("*" if row.get("moved") else "")


def side(results: dict, name: str, protocol: str, other: str) -> str:
    label = results["labels"].get(name, name)
    return f"{label} ({protocol})" if protocol and protocol != other else label


def study_table(config: TableConfig) -> str:
    if not config.study:
        raise UserError("--study is empty: name a study folder that holds results.json, e.g. "
                        "--study=docs/positions_budgets")
    if not 0 <= config.digits <= 8:
        raise UserError(f"--digits={config.digits} must be 0 to 8")
    results = read_results(config.study)
    if config.pairs:
        return family_table(config, results)
    if config.bits_per_byte and config.family in (MOVES, EXTRAPOLATION_MOVES):
        raise UserError(f"--bits_per_byte=True: the family {config.family!r} is kept in nats/token only; drop the "
                        "flag")
    block_size = results["block_size"]
    rows = (against_entries(results, config.family, config.against) if config.against else
            entries(results, config.family))
    found = [(row, budget, n) for row, budget, n in rows
             if (not config.lengths or n in config.lengths) and (not config.budgets or budget in config.budgets)]
    if not found:
        raise UserError(f"--family={config.family!r} has no rows at lengths {config.lengths or 'any'} and budgets "
                        f"{config.budgets or 'any'} in {config.study}; drop --lengths or --budgets to see them all")
    pairs = {(row["a"], row["a_protocol"], row["b"], row["b_protocol"]): None for row, _, _ in found}
    columns = list(dict.fromkeys((budget, n) for _, budget, n in found))
    one_budget, one_length = len({c[0] for c in columns}) == 1, len({c[1] for c in columns}) == 1
    one_b = len({(b, bp) for _, _, b, bp in pairs}) == 1
    itself = all(a == b for a, _, b, _ in pairs)  # each cell under two protocols

    def heading(budget: int | str, n: int | None) -> str:
        parts = [] if one_budget and len(columns) > 1 else [f"{budget} steps" if isinstance(budget, int) else budget]
        parts += [] if n is None or (one_length and len(columns) > 1) else [f"L={n} ({n / block_size:g}x)"]
        return ", ".join(parts)

    a, a_protocol, b, b_protocol = next(iter(pairs))
    first = (f"cell, {a_protocol} − {b_protocol}" if itself else
             f"cell − {side(results, b, b_protocol, a_protocol)}" if one_b else "a − b")
    unit = "bits/byte" if config.bits_per_byte else "nats/token"
    lines = [f"{results['split']} loss, {unit}: a − b, mean over seeds [{CONFIDENCE:.0%} paired t interval] "
             f"({config.study}/results.json, --family={config.family!r})"
             + ("; *: survives Holm over the cells" if config.family in (MOVES, EXTRAPOLATION_MOVES) else ""),
             "",
             "| " + " | ".join([first, *(heading(*c) for c in columns)]) + " |",
             "| --- |" + " ---: |" * len(columns)]
    values = {((row["a"], row["a_protocol"], row["b"], row["b_protocol"]), (budget, n)): row
              for row, budget, n in found}
    for pair in pairs:
        a, a_protocol, b, b_protocol = pair
        name = results["labels"].get(a, a) if itself else side(results, a, a_protocol, b_protocol) + (
            "" if one_b else f" − {side(results, b, b_protocol, a_protocol)}")
        cells = [gap_text(values[pair, c], config) if (pair, c) in values else "—" for c in columns]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    from options import parse_options

    (config,) = parse_options(argv, (TableConfig,), prog="-m study.table", description=__doc__)
    print(study_table(config))


if __name__ == "__main__":
    from errors import main_guard

    main_guard(main, sys.argv[1:])
