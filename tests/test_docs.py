"""README.md and docs/: every relative link resolves (file and #anchor), no page names a path of one machine, and
the README's test command is the one CI runs."""

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


def test_the_checker_finds_what_it_should(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A title, with `code`\n\n[ok](#a-title-with-code) [gone](missing.md) `[not a link](x.md)`\n"
                    "```sh\n[inside code](y.md)\n```\n")
    assert list(relative_links(page)) == ["#a-title-with-code", "missing.md"]
    assert "a-title-with-code" in anchors(page)
    assert MACHINE_PATHS.search("python3 prepare.py --input=../shared/data/tinyshakespeare/input.txt")
    assert MACHINE_PATHS.search("TIKTOKEN_CACHE_DIR=/somewhere/tiktoken_cache python3 bench.py")
    assert not MACHINE_PATHS.search("TIKTOKEN_CACHE_DIR=<folder holding tiktoken's cached GPT-2 files>")


def test_readme_test_command_is_what_ci_runs():
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert ci.replace(" -q", "") in readme, ci
