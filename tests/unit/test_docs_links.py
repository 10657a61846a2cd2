"""Every relative link in README.md and docs/ leads somewhere: its file exists and its
#anchor is one of that page's headings (GitHub's anchors: lower case, punctuation dropped,
spaces as hyphens, a repeated heading numbered). Pages move between folders (issue 77), and a
link that stops resolving is a page a reader cannot reach."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    t = re.sub(r"[`*]", "", t)
    keep = (ch for ch in t if ch in "-_ " or unicodedata.category(ch)[0] in "LN")
    return "".join(keep).replace(" ", "-")


def lines(page: Path) -> list[tuple[int, str]]:
    """The page's lines outside code blocks, numbered."""
    out, code = [], False
    for i, line in enumerate(page.read_text().splitlines(), 1):
        if line.startswith("```"):
            code = not code
        elif not code:
            out.append((i, line))
    return out


def anchors(page: Path) -> set[str]:
    """Its headings' anchors; a repeated one gets -1, -2, … as GitHub numbers them."""
    count: dict[str, int] = {}
    out = set()
    for _, line in lines(page):
        if m := re.match(r"^#{1,6}\s+(.*?)\s*$", line):
            s = slug(m.group(1))
            out.add(s if s not in count else f"{s}-{count[s]}")
            count[s] = count.get(s, 0) + 1
    return out


def broken() -> list[str]:
    out = []
    known: dict[Path, set[str]] = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for i, line in lines(page):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, mailto:
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(ROOT)}:{i}: {target}"
                if not dest.exists():
                    out.append(f"{where} (no such file)")
                elif anchor and dest.suffix == ".md":
                    if dest not in known:
                        known[dest] = anchors(dest)
                    if anchor not in known[dest]:
                        out.append(f"{where} (no such heading)")
    return out


def test_every_relative_link_in_the_docs_resolves():
    assert broken() == []


def test_the_anchors_are_githubs():
    assert slug("The thesis' own simulator (2026-12-01)") == "the-thesis-own-simulator-2026-12-01"
    assert slug("By-ratio's 3 % where the plan's gaps outlast the machine's jitter") == (
        "by-ratios-3--where-the-plans-gaps-outlast-the-machines-jitter"
    )
    assert slug("`testbed up`: what it does") == "testbed-up-what-it-does"
