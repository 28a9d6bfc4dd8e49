"""README.md and docs/: every relative link resolves (file and #anchor), no page names a path of one machine, and
the README's test command is the one CI runs."""

import json
import math
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# Paths that exist on one machine only: the sibling folder of a checkout, a workspace, an absolute tiktoken cache.
MACHINE_PATHS = re.compile(r"\.\./shared\b|\bshared/(?:DESIGN|data|tiktoken)|/work/|TIKTOKEN_CACHE_DIR=/")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans, where Markdown links live."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M)}


def relative_links(page: Path):
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {path}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO_ROOT)}")
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_machine_paths(page):
    found = [line for line in page.read_text(encoding="utf-8").splitlines() if MACHINE_PATHS.search(line)]
    assert not found, found


def absolute_paths(value) -> list[str]:
    """The strings in a JSON value that are absolute file paths (POSIX, home-relative or Windows)."""
    if isinstance(value, dict):
        return [found for item in value.values() for found in absolute_paths(item)]
    if isinstance(value, list):
        return [found for item in value for found in absolute_paths(item)]
    return [value] if isinstance(value, str) and re.match(r"^(?:/[^/\s]|~/|[A-Za-z]:\\)", value) else []


def test_no_committed_record_or_config_names_an_absolute_path():
    """Study records and configs are committed: a path of the machine that made them means nothing on another."""
    found = []
    for path in sorted((REPO_ROOT / "docs").rglob("*.json")):
        found += [f"{path.relative_to(REPO_ROOT)}: {value}"
                  for value in absolute_paths(json.loads(path.read_text(encoding="utf-8")))]
    for path in sorted((REPO_ROOT / "config").glob("*.py")):
        found += [f"{path.relative_to(REPO_ROOT)}: {line}" for line in path.read_text(encoding="utf-8").splitlines()
                  if MACHINE_PATHS.search(line) or re.search(r"[\"'](?:/[^/\s]|~/)", line)]
    assert not found, found[:5]


def test_the_tests_read_nothing_beside_the_repository():
    """A user's clone has nothing beside it: no test may reach out of the repository for data."""
    found = [f"{path.name}: {line.strip()}" for path in sorted((REPO_ROOT / "tests").glob("*.py"))
             for line in path.read_text(encoding="utf-8").splitlines()
             if re.search(r"\b(?:REPO_ROOT|REPO)\.parent\b|[\"']shared[\"']|\.parents\[[2-9]\]", line)]
    assert not found, found


SOURCES = sorted(p for folder in ("", "gpt", "text", "training", "study", "benchmarks", "config", "data")
                 for p in (REPO_ROOT / folder).glob("*.py" if folder in ("", "config") else "**/*.py"))
DOC_PATH = re.compile(r"\bdocs/[\w./-]*\w(?:#[\w-]+)?")
README_SECTION = re.compile(r"README, \"?([A-Z][\w ']*[\w'])")


def pointer_problems(text: str) -> list[str]:
    """What a comment or docstring points at that does not exist: a docs/ file or its #anchor, a README section."""
    problems = []
    for target in DOC_PATH.findall(text):
        path, _, anchor = target.partition("#")
        file = REPO_ROOT / path
        if not file.exists():
            problems.append(f"{target}: no file {path}")
        elif anchor and anchor not in anchors(file):
            problems.append(f"{target}: no heading #{anchor} in {path}")
    readme = [heading.lower() for heading in re.findall(r"^#{1,6}\s+(.*?)\s*$", (REPO_ROOT / "README.md").read_text(
        encoding="utf-8"), flags=re.M)]
    problems += [f"README, {section}: no such section" for section in README_SECTION.findall(text)
                 if not any(heading.startswith(section.lower()) for heading in readme)]
    return problems


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_code_points_only_at_docs_that_exist(source):
    """Comments and docstrings name docs/ pages, their sections and README sections: each must still be there."""
    assert not pointer_problems(source.read_text(encoding="utf-8"))


STUDY_PAGES = ["docs/positions/README.md", "docs/positions_bpe/README.md", "docs/context_extension.md"]
NUMBER = r"[−+-]?\d+\.\d+"
INTERVAL = re.compile(rf"({NUMBER}) \[({NUMBER}), ({NUMBER})\]")


def interval_records(value, found: list) -> list[tuple[float, float, float]]:
    """Every (mean, low, high) a results.json holds: paired gaps (also in bits per byte where the study gives the
    mean in both units), and each gap's change between budgets."""
    if isinstance(value, dict):
        if {"low", "high"} <= value.keys() and ("mean" in value or "change" in value):
            mean = value.get("mean", value.get("change"))
            found.append((mean, value["low"], value["high"]))
            if value.get("mean_bits_per_byte") is not None and mean:
                scale = value["mean_bits_per_byte"] / mean
                found.append((value["mean_bits_per_byte"], value["low"] * scale, value["high"] * scale))
        for key, item in value.items():
            if key not in ("per_position", "position_table", "runs"):
                interval_records(item, found)
    elif isinstance(value, list):
        for item in value:
            interval_records(item, found)
    return found


def printed_from(text: str, value: float) -> bool:
    """Whether text is value rounded once to text's own number of decimals (a minus sign may be typeset as −)."""
    if not isinstance(value, float) or math.isnan(value):
        return False
    decimals = len(text.split(".")[1])
    return f"{value:.{decimals}f}".lstrip("+") == text.replace("−", "-").lstrip("+")


def unmatched_intervals(lines: list[str], records: list[tuple[float, float, float]]) -> list[str]:
    """The 'mean [low, high]' of table rows that no record gives, each number rounded once (a lead may be printed
    as the negated gap, its ends swapped). The literature table's evidence cells (rows naming a paper, "et al.")
    are verdicts drawn from several records, not a study's table."""
    missing = []
    for line in lines:
        if not line.startswith("|") or "et al." in line:
            continue
        for found in INTERVAL.finditer(line):
            texts = found.groups()
            if not any(all(map(printed_from, texts, (m, lo, hi))) or all(map(printed_from, texts, (-m, -hi, -lo)))
                       for m, lo, hi in records):
                missing.append(found.group(0))
    return missing


def test_study_tables_print_each_interval_once_from_its_exact_value():
    """Each 'mean [low, high]' in the position write-ups' tables is a record of a committed results.json rounded
    once: a number rounded from results.md's four places again, or typed by hand, is off in its last digit."""
    records = []
    for path in sorted((REPO_ROOT / "docs").rglob("results.json")):
        interval_records(json.loads(path.read_text(encoding="utf-8")), records)
    for page in STUDY_PAGES:
        lines = (REPO_ROOT / page).read_text(encoding="utf-8").splitlines()
        assert sum(len(INTERVAL.findall(line)) for line in lines if line.startswith("|")) > 10, page
        assert not unmatched_intervals(lines, records), page
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()  # its findings table quotes a few
    assert sum(len(INTERVAL.findall(line)) for line in readme if line.startswith("|")) >= 2
    assert not unmatched_intervals(readme, records)
    # the examples, rounded twice: rope at 4000 from results.md's -0.0175, and rope with interpolation
    assert unmatched_intervals(["| rope | −0.026 [−0.034, −0.018] |"], records) == ["−0.026 [−0.034, −0.018]"]
    assert unmatched_intervals(["| rope | −0.026 [−0.034, −0.017] |"], records) == []


def test_the_checker_finds_what_it_should(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A title, with `code`\n\n[ok](#a-title-with-code) [gone](missing.md) `[not a link](x.md)`\n"
                    "```sh\n[inside code](y.md)\n```\n")
    assert list(relative_links(page)) == ["#a-title-with-code", "missing.md"]
    assert "a-title-with-code" in anchors(page)
    assert MACHINE_PATHS.search("python3 prepare.py --input=../shared/data/tinyshakespeare/input.txt")
    assert MACHINE_PATHS.search("TIKTOKEN_CACHE_DIR=/somewhere/tiktoken_cache python3 bench.py")
    assert not MACHINE_PATHS.search("TIKTOKEN_CACHE_DIR=<folder holding tiktoken's cached GPT-2 files>")
    assert pointer_problems("# see docs/training.md and (README, Tests); docs/study_method.md's budgets") == []
    assert pointer_problems("# (README, Speed), docs/gone.md, docs/training.md#no-such-heading") == [
        "docs/gone.md: no file docs/gone.md", "docs/training.md#no-such-heading: no heading #no-such-heading in "
        "docs/training.md", "README, Speed: no such section"]
    assert absolute_paths({"data": {"source": "/home/me/input.txt"}, "x": ["~/a", "C:\\b"]}) == [
        "/home/me/input.txt", "~/a", "C:\\b"]
    assert absolute_paths({"a": "docs/positions", "b": "1/2", "c": "/", "d": "nanoGPT data folder /x/y"}) == []


def test_readme_test_command_is_what_ci_runs():
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert ci.replace(" -q", "") in readme, ci


NUMBER_WORDS = {"six": 6, "eight": 8, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
                "fifteen": 15, "sixteen": 16, "seventeen": 17}


def test_readme_is_a_guide_of_at_most_400_lines():
    assert len((REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 400


def test_readme_claims_match_the_code():
    """What the README says of the configs and the encodings, read back from them: the quick start's steps, the
    configs table's step counts, the number of encodings and the rows of their table."""
    from layers.positions import POS_ENCODINGS
    from options import read_config_file

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    quick = read_config_file(str(REPO_ROOT / "config" / "train_python_docs_char.py"))["max_iters"]
    assert f"after {quick} steps the validation loss" in readme
    assert re.search(rf"\| the quick start's \(`train_python_docs_char.py`\) \| {quick} \|", readme)
    for config, steps in re.findall(r"^\| `(\w+\.py)`[^|]*\|[^|]*?for (\d+) steps \|$", readme, flags=re.M):
        assert read_config_file(str(REPO_ROOT / "config" / config))["max_iters"] == int(steps), config
    said = re.search(r"`--pos_encoding=NAME` picks one of (\w+)", readme).group(1)
    assert NUMBER_WORDS[said] == len(POS_ENCODINGS)
    rows = re.findall(r"^\| `(\w+)`(?: \(default\))? \| [^|]+ \| [^|]+ \|$", readme.split("## Position encodings")[1]
                      .split("\n## ")[0], flags=re.M)
    assert rows[1:] == list(POS_ENCODINGS)  # the header row first


def test_every_test_file_is_in_the_testing_page():
    """docs/testing.md says what each test file checks against: a new file gets its line."""
    page = (REPO_ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    assert [p.name for p in sorted((REPO_ROOT / "tests").glob("test_*.py")) if f"`{p.name}`" not in page] == []
