"""The extrapolation write-up's literature verdicts (docs/positions_extrapolation/README.md): every number of its
family table and every verdict word of its literature table, derived again from the committed results.json by the
write-up's own rule, with the statistics written out here (Student's t, TOST, Holm) rather than study's."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
STUDY = REPO / "docs" / "positions_extrapolation"
ALPHA, MARGIN = 0.05, 0.01
SETTING_WORDS = {"not tested", "outside the claim's range"}  # the rule's words that no statistic decides


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each row of the Markdown table whose header line starts so."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def holm_adjusted(p: list[float]) -> list[float]:
    """Holm's adjusted p: the k-th smallest becomes max over j <= k of (m - j + 1) p_(j), at most 1."""
    adjusted, running = [0.0] * len(p), 0.0
    for k, i in enumerate(sorted(range(len(p)), key=lambda i: p[i])):
        running = max(running, (len(p) - k) * p[i])
        adjusted[i] = min(1.0, running)
    return adjusted


def tost_p(d: np.ndarray) -> float:
    return max(stats.ttest_1samp(d, -MARGIN, alternative="greater").pvalue,
               stats.ttest_1samp(d, MARGIN, alternative="less").pvalue)


@pytest.fixture(scope="module")
def study() -> dict:
    results = json.loads((STUDY / "results.json").read_text())
    names = {label: name for name, label in results["labels"].items()}
    losses = {}  # (cell, protocol, length) -> {seed: loss}
    for run in results["runs"]:
        for key, loss in run["eval"]["loss"].items():
            protocol, n = key.split()
            if loss is not None:
                losses.setdefault((run["variant"], protocol, int(n)), {})[run["seed"]] = loss
    return {"results": results, "names": names, "losses": losses, "text": (STUDY / "README.md").read_text()}


def side(study: dict, text: str) -> tuple[str, str, int]:
    m = re.fullmatch(r"(.+?)(?: \((sliding)\))? @(\d+)", text)
    return study["names"][m[1]], m[2] or "nonoverlapping", int(m[3])


def differences(study: dict, a: tuple, b: tuple) -> np.ndarray:
    va, vb = study["losses"][a], study["losses"][b]
    return np.array([va[s] - vb[s] for s in sorted(set(va) & set(vb))])


def planned_family(study: dict, a: tuple, b: tuple) -> tuple[str, list[tuple]] | None:
    """The study's own family (name, its pairs at that length) that planned a − b, as the study's config sets
    them (each cell against a compare_to cell under one protocol; each cell's whole window against its sliding
    one past the window); None for a pair chosen afterwards."""
    results = study["results"]
    references = results["ablate_config"]["compare_to"]
    (ca, pa, n), (cb, pb, m) = a, b
    if n != m:
        return None
    cells = [c for c in results["cells"] if (c, pa, n) in study["losses"]]
    if ca == cb and {pa, pb} == {"nonoverlapping", "sliding"}:
        return ("extrapolation against the sliding window",
                [((c, "nonoverlapping", n), (c, "sliding", n)) for c in cells])
    if pa == pb and (ca in references or cb in references):
        pairs = {frozenset((c, r)) for r in references for c in cells if c != r and r in cells}
        name = "training length" if n == results["block_size"] else f"longer, {pa}"
        return name, [tuple((c, pa, n) for c in sorted(pair)) for pair in pairs]
    return None


@pytest.fixture(scope="module")
def family(study) -> dict[str, dict]:
    """Each pair of the write-up's family table ("#n": its row and what this test computes for it)."""
    rows = table_rows(study["text"], "| | a − b |")
    assert rows and all(row[0] == f"#{i}" for i, row in enumerate(rows, 1)), "the family table's rows are #1..#n"
    pairs = {row[0]: [side(study, s) for s in row[1].split(" − ")] for row in rows}
    chosen = [key for key, (a, b) in pairs.items() if planned_family(study, a, b) is None]
    p_chosen = [stats.ttest_1samp(differences(study, *pairs[key]), 0.0).pvalue for key in chosen]
    tost_chosen = [tost_p(differences(study, *pairs[key])) for key in chosen]
    found = {}
    for row in rows:
        a, b = pairs[row[0]]
        d = differences(study, a, b)
        planned = planned_family(study, a, b)
        if planned is None:
            name, index = "literature", chosen.index(row[0])
            p_family, tost_family = p_chosen, tost_chosen
        else:
            name, members = planned
            index = next(i for i, (x, y) in enumerate(members) if {x, y} == {a, b})
            p_family = [stats.ttest_1samp(differences(study, x, y), 0.0).pvalue for x, y in members]
            tost_family = [tost_p(differences(study, x, y)) for x, y in members]
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
        found[row[0]] = {"row": row, "mean": d.mean(), "low": d.mean() - half, "high": d.mean() + half,
                         "p": p_family[index], "holm_p": holm_adjusted(p_family)[index],
                         "tost_p": tost_family[index], "holm_tost_p": holm_adjusted(tost_family)[index],
                         "family": f"{name} ({len(p_family)})"}
    return found


def signed(value: float) -> str:
    return f"{value:+.3f}".replace("-", "−")


def test_every_number_of_the_family_table_is_results_json_s(family):
    assert sum(f["family"].startswith("literature") for f in family.values()) == 22
    for key, f in family.items():
        row = f["row"]
        assert row[2] == f"{signed(f['mean'])} [{signed(f['low'])}, {signed(f['high'])}]", key
        assert row[3:7] == [f"{f[k]:.2g}" for k in ("p", "holm_p", "tost_p", "holm_tost_p")], key
        assert row[7] == f["family"], key


def rule(f: dict, sign: str) -> str:
    """The write-up's verdict rule for a claim that a − b has this sign."""
    if f["holm_p"] <= ALPHA:
        return "agrees" if (f["mean"] < 0) == (sign == "<") else "contradicts"
    return "equivalent within ±0.01" if f["holm_tost_p"] <= ALPHA else "not told apart"


def test_every_literature_verdict_follows_from_its_statistics_by_the_write_ups_rule(study, family):
    rows = table_rows(study["text"], "| published claim |")
    assert len(rows) == 17
    for claim, _, _, tested_as, verdict in rows:
        claimed = dict(re.findall(r"(#\d+) ([<>]) 0", tested_as))
        assert claimed and len(claimed) == tested_as.count("#"), claim
        cited = []
        for segment in re.split(r"; (?=\*\*)", verdict):  # a new word, in bold, after "; "
            word, refs = re.match(r"\*\*(.+?)\*\*", segment)[1], re.findall(r"#\d+", segment)
            if not refs:
                assert word in SETTING_WORDS, (claim, segment)
            for ref in refs:
                assert word == rule(family[ref], claimed[ref]), (claim, ref, word)
            cited += refs
        assert sorted(cited) == sorted(claimed), claim
