"""The plots of a study (ablate.py): one function per figure, each reading the study's records and summary."""

import math
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from errors import UserError
from files import atomic_files
from study.paired_stats import CONFIDENCE, interval
from study.plan import control_cells

BAND = f"bands: {CONFIDENCE:.0%} t interval over seeds"
# What a report that could not be written says: the runs are done and recorded, only their report is missing.
REPORT_FIX = ("the runs' records are whole: free space (or make the folder writable) and run again with "
              "--report_only=True")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 12, "axes.titlesize": 13, "figure.titlesize": 15, "legend.fontsize": 10,
                         "axes.grid": True, "grid.alpha": 0.3})
    return plt


# Twenty colours a reader tells apart: matplotlib's ten, then ten darker or brighter ones (the extrapolation study
# plots 17 cells). A larger study samples a colour map instead, nearer neighbours but still none repeated.
PALETTE = [f"tab:{c}" for c in ("blue", "orange", "green", "red", "purple", "brown", "pink", "gray", "olive",
                                "cyan")] + ["black", "navy", "gold", "lime", "magenta", "maroon", "teal",
                                            "darkkhaki", "slateblue", "salmon"]


def colors(cells: list[str]) -> dict[str, str | tuple]:
    """One colour per cell, none repeated."""
    if len(cells) <= len(PALETTE):
        return dict(zip(cells, PALETTE, strict=False))
    cmap = pyplot().get_cmap("turbo")
    return {cell: cmap(i / (len(cells) - 1)) for i, cell in enumerate(cells)}


# More cells than this and a legend inside a panel covers its lines (the extrapolation study draws 17): the figure
# then has one legend, below its panels, LEGEND_COLUMNS names a row.
LEGEND_INSIDE, LEGEND_COLUMNS, LEGEND_ROW_INCHES = 8, 3, 0.22


def legend_inches(cells: int) -> float:
    """The height a figure of `cells` lines grows by to hold its legend below the panels (0: legends inside)."""
    return 0.0 if cells <= LEGEND_INSIDE else LEGEND_ROW_INCHES * math.ceil(cells / LEGEND_COLUMNS) + 0.3


def place_legends(fig, axes, cells: int, fontsize: int | None = None) -> None:
    """Each panel's legend inside it, or for many cells one legend of every panel's lines under the panels (in the
    legend_inches(cells) the figure was made taller by); then lay the figure out."""
    below = legend_inches(cells)
    if not below:
        for ax in axes:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=fontsize)
        fig.tight_layout()
        return
    named = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            named.setdefault(label, handle)
    fig.legend(list(named.values()), list(named), loc="lower center", ncol=LEGEND_COLUMNS, frameon=False,
               fontsize=fontsize)
    fig.tight_layout(rect=(0, below / fig.get_figheight(), 1, 1))


def band(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds (axis 0) and the lower and upper ends of its interval; no band for one seed."""
    means, halves = np.array([interval(column.tolist()) for column in values.T]).T
    halves = np.nan_to_num(halves)
    return means, means - halves, means + halves


def interval_line(ax, points: list[tuple], color: str, label: str, style: str = "-", alpha: float = 0.2) -> tuple:
    """A mean line through (x, mean, half-width) points, sorted by x, with its interval as a band (none where a
    half-width is nan: one seed); its x and means."""
    xs, means, halves = np.array(sorted(points)).T
    halves = np.nan_to_num(halves)
    ax.plot(xs, means, style, color=color, marker="o", label=label)
    ax.fill_between(xs, means - halves, means + halves, color=color, alpha=alpha, linewidth=0)
    return xs, means


def write_report_file(path: Path, write: Callable[[Path], object]) -> None:
    """write(temp) to a temporary file beside path, which then replaces it (files.atomic_files): a full disk leaves
    the file as it was, never half a plot, and is one line naming the file, the error and the fix."""
    try:
        with atomic_files(path) as (temp,):
            write(temp)
    except UserError as e:  # atomic_files' OSError: the file and the error
        raise UserError(f"{e}; {REPORT_FIX}") from None


def save(fig, path: Path) -> None:
    try:
        write_report_file(path, lambda temp: fig.savefig(temp, dpi=100, format="png"))  # temp ends in .tmp
    finally:
        pyplot().close(fig)


def plot_training(study_dir: Path, records: list[dict], cells: list[str]) -> str:
    """Validation estimate against step: the whole run, and the second half zoomed in, where the cells differ."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5 + legend_inches(len(cells))))
    palette = colors(cells)
    tails = []  # per cell: lowest and highest band edge in the second half, where that half starts and ends
    for cell in cells:
        runs = [r for r in records if r["variant"] == cell]
        steps = sorted(set.intersection(*(set(e["iter"] for e in r["evals"]) for r in runs)))
        losses = np.array([[next(e["val_loss"] for e in r["evals"] if e["iter"] == s) for s in steps] for r in runs])
        mean, low, high = band(losses)
        for ax in axes:
            ax.plot(steps, mean, color=palette[cell], marker="o", markersize=3, label=cell)
            ax.fill_between(steps, low, high, color=palette[cell], alpha=0.25, linewidth=0)
        tail = [i for i, s in enumerate(steps) if s >= max(steps) / 2]
        tails.append((low[tail].min(), high[tail].max(), steps[tail[0]], steps[-1]))
    lows, highs, starts, ends = zip(*tails, strict=True)
    low, high, start, end = min(lows), max(highs), max(starts), max(ends)
    margin = 0.05 * (high - low) + 1e-3
    axes[1].set_xlim(start - 0.02 * (end - start), end + 0.02 * (end - start) + 1e-9)
    axes[1].set_ylim(low - margin, high + margin)
    axes[0].set_title("Whole run")
    axes[1].set_title("Second half, zoomed in")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.set_ylabel("val loss estimate (nats/token)")
    fig.suptitle(f"Validation loss during training (train.py's estimate; {BAND})")
    place_legends(fig, axes, len(cells))
    save(fig, study_dir / "training.png")
    return "training"


def plot_loss_vs_length(study_dir: Path, rows: list[dict], study: dict) -> str:
    """Mean loss on the study's split against eval length, one panel per protocol, with the seed interval as a
    band."""
    plt = pyplot()
    block_size, lengths, protocols = study["block_size"], study["lengths"], study["ablate_config"]["protocols"]
    fig, axes = plt.subplots(1, len(protocols), figsize=(7.5 * len(protocols), 6 + legend_inches(len(rows))),
                             sharey=True, squeeze=False)
    palette = colors([row["variant"] for row in rows])
    for ax, protocol in zip(axes[0], protocols, strict=True):
        for row in rows:
            points = [(n, *row["loss"][f"{protocol} {n}"]) for n in lengths if row["loss"][f"{protocol} {n}"]]
            if not points:
                continue
            interval_line(ax, points, palette[row["variant"]], row["variant"])
        ax.axvline(block_size, color="gray", linestyle="--", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [f"{n}\n({n / block_size:g}x)" for n in lengths])
        ax.minorticks_off()
        ax.set_xlabel("eval window length L (tokens); dashed: block_size")
        what = ("whole window as context" if protocol == "nonoverlapping"
                else f"at most {study['window']} tokens per forward")
        ax.set_title(f"{protocol}: {what}")
        ax.set_ylabel(f"mean {study['split']} loss, whole {study['split']} split (nats/token)")
    fig.suptitle(f"Loss against eval length (final models; {BAND})")
    place_legends(fig, axes[0], len(rows))
    save(fig, study_dir / "loss_vs_length.png")
    return "loss_vs_length"


def seed_entries(records: list[dict], cell: str, protocol: str, n: int) -> dict[int, dict] | None:
    """{seed: {"loss", "per_position"}} of a cell under one protocol at length n, in seed order; None when the
    cell cannot run that length (or has no runs)."""
    entries = {r["seed"]: r["eval"]["protocols"].get(protocol, {}).get(str(n))
               for r in sorted(records, key=lambda r: r["seed"]) if r["variant"] == cell}
    return None if not entries or None in entries.values() else entries


def position_curves(records: list[dict], cell: str, protocol: str, n: int) -> np.ndarray | None:
    """(seeds, n) loss at each position, in seed order; None when the cell cannot run the length."""
    entries = seed_entries(records, cell, protocol, n)
    return None if entries is None else np.array([entry["per_position"] for entry in entries.values()])


def moving_mean(curves: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions (centres) and each row's moving mean over `width` positions."""
    kernel = np.ones(width) / width
    return (np.arange(curves.shape[1] - width + 1) + (width - 1) / 2,
            np.array([np.convolve(c, kernel, mode="valid") for c in curves]))


def draw_bands(ax, curves: dict[str, np.ndarray], palette: dict[str, str], width: int,
               cut_above: float = math.inf) -> list[str]:
    """Each cell's mean curve and band; the y axis stops cut_above nats over the lowest cell's mean, so that one
    exploding cell does not flatten the rest. The cells left off the scale, by name."""
    low_values, high_values, off_scale = [], [], []
    floor = min((float(np.mean(v)) for v in curves.values()), default=0.0)
    for cell, values in curves.items():
        x, smoothed = moving_mean(values, width)
        mean, low, high = band(smoothed)
        ax.plot(x, mean, color=palette[cell], linewidth=1.5, label=cell)
        if float(np.mean(values)) > floor + cut_above:
            off_scale.append(cell)  # its line leaves the axes; its band would cover them
        else:
            ax.fill_between(x, low, high, color=palette[cell], alpha=0.2, linewidth=0)
            low_values.append(low.min())
            high_values.append(high.max())
    if off_scale and low_values:
        margin = 0.05 * (max(high_values) - min(low_values)) + 1e-3
        ax.set_ylim(min(low_values) - margin, max(high_values) + margin)
    return off_scale


def plot_loss_by_position(study_dir: Path, records: list[dict], study: dict, cells: list[str], reference: str) -> str:
    """Loss at each position of the windows (top) and, below, paired differences that cancel the text's own
    position-to-position noise (every model scores the same tokens at a position): at block_size against the
    reference cell, at the longest length the whole window against the same model's sliding window."""
    plt = pyplot()
    block_size, longest = study["block_size"], max(study["lengths"])
    protocols = study["ablate_config"]["protocols"]
    columns = [block_size] + ([longest] if longest > block_size and "sliding" in protocols else [])
    fig, axes = plt.subplots(2, len(columns), figsize=(8 * len(columns), 10 + legend_inches(len(cells))),
                             squeeze=False)
    palette = colors(cells)
    for column, n in enumerate(columns):
        width = max(1, n // 32)  # a moving mean over positions: one position of the split is ~1/n of its tokens
        top, bottom = axes[0, column], axes[1, column]
        absolute = {c: v for c in cells if (v := position_curves(records, c, "nonoverlapping", n)) is not None}
        cut = 1.0 if n > block_size else math.inf  # past block_size a failing encoding can reach 5 nats and more
        off_scale = draw_bands(top, absolute, palette, width, cut)
        if n == block_size:
            base = position_curves(records, reference, "nonoverlapping", n)
            differences = {c: v - base for c, v in absolute.items() if c != reference}
            bottom.set_title(f"cell − {reference}, same tokens, seed by seed")
        else:
            differences = {c: v - position_curves(records, c, "sliding", n) for c, v in absolute.items()}
            bottom.set_title("whole window − sliding window, same model")
        off_scale += draw_bands(bottom, differences, palette, width, cut)
        bottom.axhline(0, color="black", linewidth=1)
        # wrapped to the panel's width: one line of many names runs into the next panel's title
        top.set_title(f"nonoverlapping, L = {n} ({n / block_size:g}x block_size)" + (
            "\n" + textwrap.fill(f"off the scale: {', '.join(dict.fromkeys(off_scale))}", 60) if off_scale else ""))
        for ax in (top, bottom):
            if n > block_size:
                ax.axvline(block_size - 0.5, color="gray", linestyle="--", linewidth=1)
            ax.set_xlim(-0.5, n - 0.5)
            ax.set_xlabel("position in the window" + (f" ({width}-position moving mean)" if width > 1 else ""))
        top.set_ylabel(f"mean {study['split']} loss (nats/token)")
        bottom.set_ylabel("loss difference (nats/token); negative: better")
    fig.suptitle(f"Loss at each position of the eval windows\n(final models; {BAND})")
    place_legends(fig, axes.flat, len(cells), fontsize=9)
    save(fig, study_dir / "loss_by_position.png")
    return "loss_by_position"


# A name longer than this wraps onto more lines (the paired plot's rows, its panel titles): one 90-character cell
# name on one line took the whole width of the figure and left its panel a sliver.
NAME_WIDTH, TITLE_WIDTH = 40, 80


def wrapped(text: str, width: int = NAME_WIDTH) -> str:
    return textwrap.fill(text, width, break_on_hyphens=False)


def seeds_lower(row: dict) -> str:
    """In how many of the pair's seeds the first is lower, of how many: "3/5", the one count tables and plots give."""
    return f"{row['a_wins']}/{row['n']}"


def paired_note(row: dict) -> str:
    return row["untested"] or f"lower in {seeds_lower(row)} seeds, p = {row['p']:.2g}"


def forest(ax, rows: list[dict], labels: list[str], title: str) -> None:
    """Paired differences: each seed's (dots), their mean and its interval (red: the interval excludes 0); each row
    named on the left, its count of seeds and p on the right."""
    y = np.arange(len(rows))[::-1]
    for yi, row in zip(y, rows, strict=True):
        color = "tab:red" if row["significant"] else "tab:gray"
        ax.scatter(row["differences"], np.full(row["n"], yi + 0.22), s=12, color="black", alpha=0.5, linewidth=0)
        # No interval where no test was made (study_report's "untested"): the mean alone, and why.
        xerr = np.nan_to_num([[row["mean"] - row["low"]], [row["high"] - row["mean"]]])
        ax.errorbar(row["mean"], yi, xerr=xerr, fmt="o", color=color, capsize=5, markersize=7,
                    markerfacecolor=color if row["significant"] else "white")
    ax.axvline(0, color="black", linewidth=1)
    ax.set_yticks(y, [wrapped(label) for label in labels], fontsize=10)
    ax.set_ylim(-0.6, len(rows) - 0.2)
    ax.margins(x=0.1)
    notes = ax.twinx()  # the notes beside the axes, where no point or bar can run into them
    notes.set_ylim(ax.get_ylim())
    notes.set_yticks(y, [paired_note(row) for row in rows], fontsize=9)
    notes.grid(False)
    ax.set_title(wrapped(title, TITLE_WIDTH), loc="left")
    unit = rows[0].get("unit", "nats/token")  # bits/byte where the cells tokenize differently (study_report)
    ax.set_xlabel(f"loss difference ({unit}); negative: the first is better")


def flipped(row: dict) -> dict:
    """The same comparison as b − a."""
    swapped = {"a": row["b"], "b": row["a"], "a_wins": row["b_wins"], "b_wins": row["a_wins"]}
    if "a_protocol" in row:
        swapped.update(a_protocol=row["b_protocol"], b_protocol=row["a_protocol"])
    if "mean_bits_per_byte" in row:
        swapped["mean_bits_per_byte"] = -row["mean_bits_per_byte"]
    return {**row, **swapped, "mean": -row["mean"], "low": -row["high"], "high": -row["low"],
            "differences": [-d for d in row["differences"]]}


def against(row: dict, reference: str) -> dict:
    """A pair as the tables and the plots show it: the other cell − the reference where the reference is one of
    the two (negative: better than the reference), any other pair as it was compared."""
    return flipped(row) if row["a"] == reference != row["b"] else row


def paired_panels(families: dict[str, list[dict]], study: dict, reference: str,
                  extended: set[str] = frozenset()) -> list[tuple[list[dict], list[str], str]]:
    """What plot_paired draws, (rows, their names, title) per panel: every cell − the reference at block_size, and
    each cell's whole window − its sliding window at the longest length. The extended cells (from_cell) are left
    to their own figure (plot_extension)."""
    block_size, longest = study["block_size"], max(study["lengths"])
    versus = [against(r, reference) for r in families["training length"]
              if reference in (r["a"], r["b"]) and not extended & {r["a"], r["b"]}]
    extrapolation = [r for r in families.get("extrapolation against the sliding window", [])
                     if r["length"] == longest and r["a"] not in extended]
    panels = [(versus, [f"{r['a']} − {reference}" for r in versus],
               f"At L = block_size = {block_size}: cell − {reference}, seed by seed"),
              (extrapolation, [r["a"] for r in extrapolation],
               f"At L = {longest}: whole window − sliding window of the same model, seed by seed")]
    return [panel for panel in panels if panel[0]]


def row_inches(labels: list[str]) -> float:
    """The height of a forest panel's rows: a row per name, taller for a name wrapped onto more lines."""
    return sum(max(0.5, 0.2 * (wrapped(label).count("\n") + 1) + 0.1) for label in labels)


def plot_paired(study_dir: Path, families: dict[str, list[dict]], study: dict, reference: str,
                extended: set[str] = frozenset()) -> str | None:
    """The reference cell against every other cell at block_size, and each cell's extrapolation against its own
    sliding window at the longest length."""
    panels = paired_panels(families, study, reference, extended)
    if not panels:
        return None
    plt = pyplot()
    heights = [1.3 + row_inches(labels) for _, labels, _ in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 0.8 + sum(heights)), squeeze=False, layout="constrained",
                             gridspec_kw={"height_ratios": heights})
    for ax, (rows, labels, title) in zip(axes[:, 0], panels, strict=True):
        forest(ax, rows, labels, title)
    fig.suptitle(f"Paired differences: dots are seeds, bars the {CONFIDENCE:.0%} t interval of their mean "
                 "(red: excludes 0)")
    save(fig, study_dir / "paired_differences.png")
    return "paired_differences"


def plot_similarity(study_dir: Path, tables: dict) -> str:
    """Cosine similarity of the learned position rows, before and after training."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 6), layout="constrained")
    for ax, (title, table) in zip(axes, tables["tables"].items(), strict=True):
        rows = F.normalize(torch.as_tensor(table), dim=1)
        image = ax.imshow((rows @ rows.T).numpy(), cmap="RdBu_r", vmin=-1, vmax=1, origin="upper")
        ax.grid(False)  # grid lines would read as structure in the heatmap
        ax.set_title(title)
        ax.set_xlabel("position j")
        ax.set_ylabel("position i")
    fig.colorbar(image, ax=axes, shrink=0.8, label="cosine similarity of rows i and j")
    fig.suptitle(f"Learned position table (wpe) of {tables['cell']}, seed {tables['seed']}: row similarity")
    save(fig, study_dir / "position_similarity.png")
    return "position_similarity"


def sweeps(records: list[dict]) -> list[tuple[str, dict[str, float]]]:
    """Numeric settings that take 3 or more values over cells that differ in nothing else: (field, {cell: value})."""
    configs = {}
    for r in records:
        configs[r["variant"]] = {**r["settings"]["train_config"], **r["settings"]["model_config"]}
    # A setting of one encoding is absent from another's records (records.LATER_MODEL_FIELDS): absent is a value too
    names = dict.fromkeys(k for c in configs.values() for k in c)
    varying = [k for k in names if len({repr(c.get(k)) for c in configs.values()}) > 1]
    found = []
    for name in varying:
        if not all(isinstance(c.get(name), (int, float)) and not isinstance(c.get(name), bool)
                   for c in configs.values()):
            continue
        groups: dict[tuple, dict[str, float]] = {}
        for cell, c in configs.items():
            groups.setdefault(tuple(repr(c.get(k)) for k in varying if k != name), {})[cell] = c[name]
        found += [(name, group) for group in groups.values() if len(set(group.values())) >= 3]
    return found


def plot_sweep(study_dir: Path, rows: list[dict], records: list[dict], study: dict) -> str | None:
    """Loss against each swept setting, at block_size and at the longest length (non-overlapping windows)."""
    found = sweeps(records)
    if not found:
        return None
    plt = pyplot()
    block_size, longest = study["block_size"], max(study["lengths"])
    fig, axes = plt.subplots(len(found), 2, figsize=(13, 5 * len(found)), squeeze=False)
    by_cell = {row["variant"]: row for row in rows}
    for (name, group), pair in zip(found, axes, strict=True):
        for ax, n in zip(pair, (block_size, longest), strict=True):
            points = sorted((value, *by_cell[cell]["loss"][f"nonoverlapping {n}"]) for cell, value in group.items()
                            if by_cell[cell]["loss"].get(f"nonoverlapping {n}"))
            if not points:
                continue
            x, means, halves = np.array(points).T
            ax.errorbar(x, means, yerr=np.nan_to_num(halves), marker="o", capsize=4, label="mean and interval")
            seeds = [(value, entry["loss"]) for cell, value in group.items()
                     for entry in (seed_entries(records, cell, "nonoverlapping", n) or {}).values()]
            ax.scatter(*np.array(seeds).T, s=14, color="black", alpha=0.6, zorder=3, label="one seed")
            ax.legend()
            if min(x) > 0 and max(x) / min(x) >= 10:
                ax.set_xscale("log")
            ax.set_xticks(x, [f"{v:g}" for v in x])
            ax.minorticks_off()
            ax.set_xlabel(name)
            ax.set_ylabel(f"mean {study['split']} loss (nats/token)")
            ax.set_title(f"non-overlapping, L = {n} ({n / block_size:g}x)")
    seeds = len({r["seed"] for r in records})
    fig.suptitle(f"Sweep (final models, {seeds} seeds; error bars: {CONFIDENCE:.0%} t interval of the mean)")
    fig.tight_layout()
    save(fig, study_dir / "sweep.png")
    return "sweep"


def budget_tokens(entry: dict, reference: str) -> int:
    """The tokens a budget's column and tick name: the reference cell's (a cell of another batch size, or under a
    batch-size schedule, trained on others: its own point and table cell say so), the first cell's without it."""
    return next((row for row in entry["rows"] if row["variant"] == reference), entry["rows"][0])["tokens_seen"]


def plot_budgets(study_dir: Path, budgets: dict, study: dict) -> str:
    """Each cell's loss at L = block_size against the tokens it trained on (one point per budget, each with its own
    schedule), and each cell's paired gap to the reference cell, with the seed interval as a band."""
    plt = pyplot()
    by_budget = list(budgets["by_budget"].values())
    cells = list(dict.fromkeys(row["variant"] for entry in by_budget for row in entry["rows"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 6 + legend_inches(len(cells))))
    palette = colors(cells)
    key = f"nonoverlapping {study['block_size']}"
    for cell in cells:
        points = [(row["tokens_seen"], *row["loss"][key]) for entry in by_budget for row in entry["rows"]
                  if row["variant"] == cell]
        gaps = [(budget_tokens(entry, budgets["reference"]), g["mean"], g["low"], g["high"]) for entry in by_budget
                for g in entry["gaps"] if g["a"] == cell]
        interval_line(left, points, palette[cell], cell)
        if gaps:
            tokens, means, lows, highs = np.array(gaps).T
            right.plot(tokens, means, color=palette[cell], marker="o", label=cell)
            right.fill_between(tokens, np.where(np.isnan(lows), means, lows), np.where(np.isnan(highs), means, highs),
                               color=palette[cell], alpha=0.2, linewidth=0)  # no band for one seed
    right.axhline(0, color="black", linewidth=1)
    margin = study["ablate_config"]["equivalence_margin"]
    if margin:
        right.axhspan(-margin, margin, color="gray", alpha=0.15, label=f"equivalence margin ±{margin:g}")
    ticks = {budget_tokens(entry, budgets["reference"]): budget for budget, entry in budgets["by_budget"].items()}
    seen = sorted(ticks)
    # budgets this near each other: their two-line labels would run into each other
    close = any(b / a < 1.4 for a, b in zip(seen, seen[1:], strict=False))
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks(list(ticks), [f"{tokens / 1e6:.3g}M{' ' if close else chr(10)}({budget} steps)"
                                    for tokens, budget in ticks.items()],
                      rotation=60 if close else 0, ha="right" if close else "center")
        ax.minorticks_off()
        ax.set_xlabel("tokens seen in training (one point per budget, each a complete schedule)")
    left.set_ylabel(f"{study['split']} loss at L = block_size (nats/token)")
    right.set_ylabel("paired difference (nats/token)\nnegative: the cell is better")
    left.set_title("Loss against tokens seen")
    right.set_title(f"Gap to {budgets['reference']}, seed by seed")
    fig.suptitle(f"Budgets (final models; {BAND})")
    place_legends(fig, (left, right), len(cells), fontsize=9)
    save(fig, study_dir / "budgets.png")
    return "budgets"


def extensions(records: list[dict], from_cells: dict[str, str]) -> dict[str, dict]:
    """{cell: its base, method, new block_size and finetune steps} for each from_cell cell that extends its base,
    from its records (a control, which trains at the base's length, extends nothing)."""
    found = {}
    for record in records:
        if record["variant"] in from_cells and record["settings"]["train_config"]["extend_positions"]:
            train, model = record["settings"]["train_config"], record["settings"]["model_config"]
            found[record["variant"]] = {"base": from_cells[record["variant"]], "method": train["extend_positions"],
                                        "block_size": model["block_size"], "steps": train["max_iters"]}
    return found


def plot_extension(study_dir: Path, rows: list[dict], records: list[dict], study: dict,
                   from_cells: dict[str, str]) -> str:
    """Each base read at 1x, 2x and 4x its block_size, by itself under both protocols and extended: a model
    extended to L read at L with the whole window as context, as extended (top) and after its finetune (below)."""
    plt = pyplot()
    cells = extensions(records, from_cells)
    controls = {(from_cells[c], cells[c]["steps"]): control
                for c, control in control_cells(records, from_cells).items()}
    by_cell = {row["variant"]: row for row in rows}
    bases = list(dict.fromkeys(c["base"] for c in cells.values()))
    steps = sorted({c["steps"] for c in cells.values()})
    methods = list(dict.fromkeys(c["method"] for c in cells.values()))
    palette = colors(methods)
    block_size, lengths = study["block_size"], study["lengths"]
    fig, axes = plt.subplots(len(steps), len(bases), figsize=(5 * len(bases), 4.8 * len(steps)), squeeze=False,
                             sharey="col", layout="constrained")

    for column, base in enumerate(bases):
        loss = by_cell[base]["loss"]
        sliding = [(n, *loss[f"sliding {n}"]) for n in lengths if loss.get(f"sliding {n}")]
        top = max(mean for _, mean, _ in sliding) + 0.3  # the baseline's worst plus a margin: outliers are marked
        for row, count in enumerate(steps):
            ax = axes[row, column]
            low = min(interval_line(ax, sliding, "black", f"{base}, sliding window {study['window']}", "--",
                                    0.15)[1])
            whole = [(n, *loss[f"nonoverlapping {n}"]) for n in lengths if loss.get(f"nonoverlapping {n}")]
            interval_line(ax, whole, "gray", f"{base}, whole window", alpha=0.15)
            if (base, count) in controls:  # the base trained as many steps more at its own length
                trained = by_cell[controls[base, count]]["loss"]
                low = min(low, *interval_line(ax, [(n, *trained[f"sliding {n}"]) for n in lengths
                                                   if trained.get(f"sliding {n}")], "black",
                                              f"control ({count} steps more at {block_size}), sliding window",
                                              ":", 0.15)[1])
            for method in methods:
                points = [(block_size, *loss[f"nonoverlapping {block_size}"])]
                points += [(c["block_size"], *by_cell[cell]["loss"][f"nonoverlapping {c['block_size']}"])
                           for cell, c in cells.items() if (c["base"], c["method"], c["steps"]) == (base, method,
                                                                                                   count)]
                if len(points) == 1:
                    continue
                ns, means = interval_line(ax, points, palette[method], f"{method}, extended to L", alpha=0.15)
                low = min(low, *means)
                for n, mean in zip(ns, means, strict=True):
                    if mean > top:  # off the scale: its value at the top edge, one line per method
                        ax.annotate(f"{mean:.2f}", (n, top), xytext=(-4, -12 - 11 * methods.index(method)),
                                    textcoords="offset points", ha="right", fontsize=9, color=palette[method])
            ax.set_ylim(low - 0.05, top)
            ax.set_xscale("log", base=2)
            ax.set_xticks(lengths, [f"{n}\n({n / block_size:g}x)" for n in lengths])
            ax.minorticks_off()
            ax.set_title(f"{base}: {'as extended' if count == 0 else f'after {count} finetune steps'}")
            ax.set_xlabel("L: eval window, and the extended model's block_size")
            ax.set_ylabel(f"{study['split']} loss (nats/token)")
            ax.legend(fontsize=8)
    fig.suptitle(f"Longer context: each model extended to L, read at L, against its base\n({BAND})")
    save(fig, study_dir / "extension.png")
    return "extension"


def plot_time_to_target(study_dir: Path, rows: list[dict], study: dict, target: float) -> str:
    """Each cell's loss against its training time, a point per budget (study/target.py's rows): the loss's mean and
    seed interval up and down, the time's median and min-max across; the target as a dashed line."""
    plt = pyplot()
    cells = list(dict.fromkeys(row["variant"] for row in rows))
    fig, ax = plt.subplots(figsize=(12, 6 + 0.25 * len(cells)))  # the legend's lines below the axes
    name = labels_of(study["labels"])
    palette = colors(cells)
    for cell in cells:
        points = [row for row in rows if row["variant"] == cell]
        seconds = np.array([row["seconds"]["median"] for row in points])
        spread = np.array([[row["seconds"]["median"] - row["seconds"]["min"] for row in points],
                           [row["seconds"]["max"] - row["seconds"]["median"] for row in points]])
        means, halves = np.array([row["loss"] for row in points]).T
        ax.errorbar(seconds, means, yerr=np.nan_to_num(halves), xerr=spread, color=palette[cell], marker="o",
                    capsize=3, label=name(cell))
    ax.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("training seconds (evaluation excluded): median, min-max over seeds")
    ax.set_ylabel(f"{study['split']} loss at L = block_size (nats/token)")
    ax.set_title(f"Loss against training time, each point a budget ({BAND.replace('bands', 'bars')})")
    # Below the axes: inside, many cells would hide points; beside, long cell names squeeze the axes to a strip.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), fontsize="small")
    fig.tight_layout()
    save(fig, study_dir / "time_to_target.png")
    return "time_to_target"


def labels_of(labels: dict[str, str]):
    """A cell's name as the plots show it: its label where every label is unique, else the cell itself."""
    unique = len(set(labels.values())) == len(labels)
    return lambda cell: labels.get(cell, cell) if unique else cell


def relabelled(labels: dict[str, str], rows: list[dict], records: list[dict], families: dict[str, list[dict]],
               tables: dict | None, budgets: dict, reference: str) -> tuple:
    """The plots' inputs with every cell named by its label (as a person writes it), where labels are unique."""
    name = labels_of(labels)  # each cell itself where labels are not unique

    def rename(row: dict, *keys: str) -> dict:
        return {**row, **{k: name(row[k]) for k in keys if k in row}}

    rows = [rename(r, "variant") for r in rows]
    records = [rename(r, "variant") for r in records]
    families = {f: [rename(r, "a", "b") for r in found] for f, found in families.items()}
    tables = None if tables is None else rename(tables, "cell")
    budgets = {"reference": name(budgets["reference"]), "by_budget": {
        b: {"rows": [rename(r, "variant") for r in e["rows"]], "gaps": [rename(g, "a", "b") for g in e["gaps"]]}
        for b, e in budgets["by_budget"].items()}}
    return rows, records, families, tables, budgets, name(reference)


def plot_all(study_dir: Path, rows: list[dict], records: list[dict], families: dict[str, list[dict]], study: dict,
             tables: dict | None, reference: str, budgets: dict) -> list[str]:
    """Every plot that the study has data for; their names (PNG files in study_dir)."""
    rows, records, families, tables, budgets, reference = relabelled(study["labels"], rows, records, families, tables,
                                                                     budgets, reference)
    name = labels_of(study["labels"])
    from_cells = {name(cell): name(base) for cell, base in study.get("from_cells", {}).items()}
    extension = plot_extension(study_dir, rows, records, study, from_cells) if from_cells else None
    # The per-cell plots draw the bases alone when there are extensions: those have a figure of their own.
    rows = [row for row in rows if row["variant"] not in from_cells]
    records = [record for record in records if record["variant"] not in from_cells]
    cells = [row["variant"] for row in rows]
    names = [plot_training(study_dir, records, cells),
             plot_loss_vs_length(study_dir, rows, study) if len(study["lengths"]) > 1 else None,
             extension,
             plot_loss_by_position(study_dir, records, study, cells, reference),
             plot_paired(study_dir, families, study, reference, set(from_cells)),
             plot_similarity(study_dir, tables) if tables is not None else None,
             plot_sweep(study_dir, rows, records, study),
             plot_budgets(study_dir, budgets, study) if len(budgets["by_budget"]) > 1 else None]
    return [name for name in names if name is not None]
