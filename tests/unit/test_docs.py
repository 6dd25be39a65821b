"""The documentation held to the code and to itself.

The pages ``docs/gen.py`` writes from the code (the command-line reference and the module map) must
be current, so a change to the CLI or to a module's docstring that does not regenerate them fails
here. Every relative link in ``README.md`` and under ``docs/`` must reach a file that exists, and a
link's ``#anchor`` into a Markdown file a heading of that file. The README stays a door: short.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 250

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
EXPLICIT_ID = re.compile(r"\{[^}]*#([\w-]+)[^}]*\}\s*$")


def _load_gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "docs" / "gen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_gen", module)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where brackets are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` (and so mkdocs) gives a heading."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        explicit = EXPLICIT_ID.search(heading)
        found.add(explicit.group(1) if explicit else _slug(heading))
    return found


def _links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_prose(page.read_text(encoding="utf-8")))]


def test_generated_pages_are_current() -> None:
    gen = _load_gen()
    stale = [str(path.relative_to(ROOT)) for path in gen.stale()]
    assert not stale, f"stale, run `python docs/gen.py`: {', '.join(stale)}"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file(page: Path) -> None:
    broken = []
    for target in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (http:, mailto:) or a place on this page (mkdocs checks those)
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve()
        if not resolved.exists():
            broken.append(f"{target} (no file {resolved.relative_to(ROOT)})")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target} (no heading #{anchor} in {resolved.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {'; '.join(broken)}"


def test_readme_anchor_links_reach_a_heading_of_its_own() -> None:
    own = _anchors(README)
    missing = [t for t in _links(README) if t.startswith("#") and t[1:] not in own]
    assert not missing, f"README.md: no such heading: {', '.join(missing)}"


def test_readme_stays_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


def test_link_finder_sees_links_and_skips_code() -> None:
    page = "[a](x.md) ![img](y.png) `[no](z.md)`\n```\n[no](w.md)\n```\n[b [c]](v.md#h)\n"
    assert [m.group(1) for m in LINK.finditer(_prose(page))] == ["x.md", "y.png", "v.md#h"]
    assert _slug("Pools and per-client sessions") == "pools-and-per-client-sessions"
    assert _slug("`keeper`: one worker's life") == "keeper-one-workers-life"
