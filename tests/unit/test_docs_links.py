"""The README and docs/ send readers only to files of this repository that exist.

Every relative Markdown link must resolve to a file or folder inside the checkout, and its
`#anchor`, when it points into a Markdown file, to one of that file's headings (GitHub's
slugs). A backticked `*.md` name must be such a file too, the README's "Where things are"
table must place every module and subpackage of `provider/`, and docs/rest-api.md's error
table must match the error registry.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkdispatch.errors import ERROR_TYPES

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([REPO / "README.md", REPO / "bench" / "README.md", *(REPO / "docs").glob("*.md")])

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def _prose(text: str) -> str:
    """The text without code blocks and inline code, where link syntax is only an example."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(document: Path) -> set[str]:
    anchors: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", document.read_text(encoding="utf-8"))):
        slug = _slug(heading)
        candidate, n = slug, 0
        while candidate in anchors:  # GitHub numbers repeated headings: x, x-1, x-2
            n += 1
            candidate = f"{slug}-{n}"
        anchors.add(candidate)
    return anchors


def _relative_links(document: Path) -> list[str]:
    return [
        target for target in LINK.findall(_prose(document.read_text(encoding="utf-8"))) if not EXTERNAL.match(target)
    ]


def test_the_documents_are_found() -> None:
    names = {path.relative_to(REPO).as_posix() for path in DOCUMENTS}
    assert {"README.md", "docs/jobgraph.md", "docs/task-contract.md", "docs/rest-api.md"} <= names


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.relative_to(REPO).as_posix())
def test_relative_links_resolve_inside_the_repository(document: Path) -> None:
    problems = []
    for target in _relative_links(document):
        path_part, _, anchor = target.partition("#")
        resolved = (document.parent / path_part).resolve() if path_part else document
        if not resolved.is_relative_to(REPO):
            problems.append(f"{target}: outside this repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            problems.append(f"{target}: {resolved.name} has no heading #{anchor}")
    assert not problems, f"{document.relative_to(REPO)}: " + "; ".join(problems)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.relative_to(REPO).as_posix())
def test_named_markdown_files_exist_here(document: Path) -> None:
    text = FENCE.sub("", document.read_text(encoding="utf-8"))
    named = {match.strip("`") for match in INLINE_CODE.findall(text) if match.strip("`").endswith(".md")}
    missing = sorted(name for name in named if not (document.parent / name).exists() and not (REPO / name).exists())
    assert not missing, f"{document.relative_to(REPO)} names files this repository does not have: {missing}"


def test_readme_places_every_module_of_the_package() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Where things are") :]
    placed = {match.strip("`") for match in INLINE_CODE.findall(section)}
    provider = REPO / "provider"
    entries = [f"provider/{path.name}" for path in provider.glob("*.py")]
    entries += [f"provider/{path.parent.name}/" for path in provider.glob("*/__init__.py")]
    missing = sorted(entry for entry in entries if entry not in placed)
    assert not missing, f'README\'s "Where things are" does not place {missing}'


def test_the_rest_error_table_matches_the_registry() -> None:
    text = (REPO / "docs" / "rest-api.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (\d{3}) \|", text, re.MULTILINE)
    assert len(rows) >= 10, "docs/rest-api.md lost its error table"
    wrong = [
        f"{name} {status}"
        for name, status in rows
        if name not in ERROR_TYPES or ERROR_TYPES[name].http_status != int(status)
    ]
    assert not wrong, f"docs/rest-api.md names error types or statuses the registry does not have: {wrong}"
