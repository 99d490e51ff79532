"""Every pointer into the docs resolves: code and docs send readers to ``docs/x.md#anchor`` or to
``docs/x.md, "Section"``, and a renamed heading or a moved page must not leave them pointing at nothing.

Checked in every ``.py`` and ``.md`` file of the repository: Markdown links to ``.md`` files (relative to
the linking file) and plain ``docs/...md`` / ``bench/...md`` paths (relative to the root) name a file that
exists and, with ``#anchor``, a heading of it (GitHub's anchors: lower case, punctuation dropped, spaces
as hyphens, ``-1``, ``-2`` for repeats); a quoted section after a path names a heading of that file (the
heading itself or its start, e.g. "Rollups" for "Rollups (issue #20)") or a bold label in it.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SKIP_DIRS = {"build", "dist", "var", "node_modules", "__pycache__"}

LINK = re.compile(r"\]\(([^)\s#]*\.md)(#[^)\s]*)?\)")
PLAIN = re.compile(r"(?<![\w/.\-])(?<!\]\()((?:docs|bench|tests|deploy)/[\w./-]*\.md|README\.md|CHANGELOG\.md)(#[\w\-]+)?")
QUOTED = re.compile(r"([\w./-]+\.md)\)?,? \(?\"([^\"]{1,160})\"")
HEADING = re.compile(r"#{1,6} (.+)")
BOLD = re.compile(r"\*\*([^*]{1,100}?)\*\*")


def doc_files(root: Path) -> list[Path]:
    """The .py and .md files of a tree, without hidden folders (.git, .venv) and build output."""
    out = []
    for path in root.rglob("*"):
        rel = path.relative_to(root).parts
        if any(p.startswith(".") or p in SKIP_DIRS or p.endswith(".egg-info") for p in rel[:-1]):
            continue
        if path.suffix in (".py", ".md") and path.is_file():
            out.append(path)
    return sorted(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def headings(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(anchors, heading texts and bold labels) of a Markdown file; code blocks left out."""
    anchors: set[str] = set()
    names: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    text = path.read_text()
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            anchors.add(s if n == 0 else f"{s}-{n}")
            names.add(m.group(1).strip())
    names |= {" ".join(m.group(1).split()).rstrip(".:") for m in BOLD.finditer(text)}
    return frozenset(anchors), frozenset(names)


def _names_section(names: frozenset[str], quoted: str) -> bool:
    return any(h == quoted or (h.startswith(quoted) and not h[len(quoted)].isalnum()) for h in names)


def broken_references(root: Path, files: list[Path]) -> list[str]:
    """One line per reference that does not resolve."""
    bad: list[str] = []

    def check(source: Path, target: Path, anchor: str | None, shown: str) -> None:
        where = source.relative_to(root)
        if not target.is_file():
            bad.append(f"{where}: {shown}: no such file")
        elif anchor and anchor not in headings(target.resolve())[0]:
            bad.append(f"{where}: {shown}: no heading with this anchor")

    for f in files:
        text = f.read_text()
        for m in LINK.finditer(text):
            if not m.group(1).startswith(("http:", "https:")):
                check(f, f.parent / m.group(1), (m.group(2) or "#")[1:], m.group(0))
        for m in PLAIN.finditer(text):
            check(f, root / m.group(1), (m.group(2) or "#")[1:], m.group(0))
        for m in QUOTED.finditer(text):
            target = next((c for c in (root / m.group(1), f.parent / m.group(1), root / "docs" / m.group(1))
                           if c.is_file()), None)
            quoted = " ".join(w for w in m.group(2).split() if w != "#")  # a quote wrapped over comment lines
            shown = " ".join(m.group(0).split())
            if target is None:
                bad.append(f"{f.relative_to(root)}: {shown}: no such file")
            elif not _names_section(headings(target.resolve())[1], quoted):
                bad.append(f"{f.relative_to(root)}: {shown}: no such section")
    return bad


def test_every_doc_reference_resolves():
    files = [f for f in doc_files(ROOT) if f != Path(__file__).resolve()]
    assert len(files) > 100
    bad = broken_references(ROOT, files)
    assert not bad, "references to docs that do not resolve:\n" + "\n".join(bad)


def test_the_check_sees_broken_references(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# A\n\n## Why it is fast (issue #1)\n\n**Noise.** text\n\n```\n# not a heading\n```\n\n## A\n")
    good = tmp_path / "good.py"
    good.write_text('"""See docs/a.md#why-it-is-fast-issue-1, docs/a.md#a-1, docs/a.md, "Why it is fast",\n'
                    'docs/a.md, "Noise" and [a](docs/a.md#a)."""\n')
    assert broken_references(tmp_path, [good]) == []
    bad = tmp_path / "bad.md"
    bad.write_text('[x](docs/a.md#why-it-is-slow) docs/a.md#not-a-heading docs/b.md docs/a.md, "Why it is slow"\n'
                   '[y](docs/c.md) docs/a.md, "Why it is fast (issue #2)"\n')
    assert len(broken_references(tmp_path, [bad])) == 6
