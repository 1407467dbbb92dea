"""Links into the docs stay true: every Markdown link to a docs file names a file and heading that exist, and every
`docs/FILE.md, "Section"` pointer in the code names a section of that file (estimation.md was split into the user's
guide, methods.md and internals.md; a pointer left behind would send the reader to a page without its section)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.lstrip("#").strip() for line in lines if re.match(r"#{1,6} ", line)]


def _markdown_files() -> list[Path]:
    return sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]


def test_every_markdown_link_to_a_doc_names_a_file_and_heading_that_exist():
    bad = []
    for md in _markdown_files():
        for target, anchor in re.findall(r"\]\(([\w./-]+\.md)(?:#([\w-]+))?\)", md.read_text(encoding="utf-8")):
            path = (md.parent / target).resolve()
            if not path.exists():
                bad.append(f"{md.name}: {target} does not exist")
            elif anchor and anchor not in {_slug(h) for h in _headings(path)}:
                bad.append(f"{md.name}: {target}#{anchor} has no such heading")
    assert not bad, bad


def test_the_code_points_to_sections_that_exist():
    bad = []
    pointer = re.compile(r"docs/([\w-]+\.md)[,\s(]+\"([^\"]+)\"")
    found = 0
    for folder in ("src", "tests", "benchmarks", "docs"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in {".py", ".md"} or not path.is_file() or path == Path(__file__):
                continue
            for target, section in pointer.findall(" ".join(path.read_text(encoding="utf-8").split())):
                found += 1
                doc = DOCS / target
                if not doc.exists():
                    bad.append(f"{path.relative_to(ROOT)}: docs/{target} does not exist")
                elif not any(h.lower().startswith(section.lower()) for h in _headings(doc)):
                    bad.append(f"{path.relative_to(ROOT)}: docs/{target} has no section {section!r}")
    assert found >= 10 and not bad, (found, bad)


def test_readme_lists_the_docs_and_leads_with_start_here():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    docs_list = readme[readme.index("## Documentation") :].splitlines()[2]
    assert "docs/start-here.md" in docs_list
    for name in ("estimation.md", "methods.md", "internals.md", "findings.md", "start-here.md"):
        assert f"docs/{name}" in readme


def test_no_table_is_cut_in_two_by_a_blank_line():
    """A blank line inside a Markdown table ends it: the rows after it render as text with pipes (extraction.md's
    options table lost its second half so). Rows after a blank line must start a new table (a delimiter row)."""
    delimiter = re.compile(r"^\|[\s:|-]+\|?$")
    bad = []
    for md in _markdown_files():
        lines = md.read_text(encoding="utf-8").splitlines() + [""]
        for i in range(1, len(lines) - 2):
            cut = not lines[i].strip() and lines[i - 1].startswith("|") and lines[i + 1].startswith("|")
            if cut and not delimiter.match(lines[i + 2]):
                bad.append(f"{md.name}:{i + 1}")
    assert not bad, bad
