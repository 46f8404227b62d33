"""The docs stand on their own: no pointer to notes outside the repository, no link to a missing file.

Checked over every text file of the checkout that git tracks or would track (*.py, *.md, *.sh, *.toml, *.j2):
no mention of the team's private note files, and every `docs/NAME.md` it names exists. Every relative
markdown link `](path)` in README.md and docs/*.md must resolve to a file or directory.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = (".py", ".md", ".sh", ".toml", ".j2")
# the internal note files that are not part of the repository (names split so this file does not name them)
PRIVATE_NOTES = ("CONTRA" "CTS.md", "DES" "IGN.md", "C" "PU.md")
PRIVATE_RE = re.compile("|".join(re.escape(n) for n in PRIVATE_NOTES))
DOCS_PATH_RE = re.compile(r"(?<![\w/.-])docs/[\w.-]+\.md\b")
LINK_RE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE_RE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
SKIP_DIRS = {".git", "build", "__pycache__", ".hypothesis", ".pytest_cache", ".ruff_cache", "node_modules"}


def text_files(root: Path = ROOT) -> list[Path]:
    """Text files git tracks or would track (untracked but not ignored); a plain walk where git is absent."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout.decode()
        paths = [root / p for p in out.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for p in root.rglob("*")
                 if not any(part in SKIP_DIRS or part.startswith(".venv") or part.endswith(".egg-info")
                            for part in p.relative_to(root).parts)]
    return sorted(p for p in paths if p.suffix in TEXT_SUFFIXES and p.is_file())


def private_note_mentions(root: Path = ROOT) -> list[str]:
    """`file:line: text` for every line that names one of the private note files."""
    hits = []
    for f in text_files(root):
        for i, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if PRIVATE_RE.search(line):
                hits.append(f"{f.relative_to(root)}:{i}: {line.strip()}")
    return hits


def missing_docs_paths(root: Path = ROOT) -> list[str]:
    """`file:line: docs/X.md` for every docs/X.md named in a text file that does not exist in the checkout."""
    bad = []
    for f in text_files(root):
        if f.resolve() == Path(__file__).resolve():
            continue  # this file's examples name pages that do not exist on purpose
        for i, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for m in DOCS_PATH_RE.finditer(line):
                if not (root / m.group(0)).is_file():
                    bad.append(f"{f.relative_to(root)}:{i}: {m.group(0)}")
    return bad


def markdown_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def broken_links(root: Path = ROOT) -> list[str]:
    """`file: target` for every relative markdown link (outside code blocks) whose target does not exist."""
    bad = []
    for md in markdown_files(root):
        text = FENCE_RE.sub("", md.read_text())
        for target in LINK_RE.findall(text):
            if re.match(r"^[a-zA-Z][\w+.-]*:", target) or target.startswith("#"):
                continue  # a URL (https:, mailto:) or an anchor in the same page
            path = target.split("#", 1)[0]
            if not (md.parent / path).exists():
                bad.append(f"{md.relative_to(root)}: {target}")
    return bad


def test_no_file_cites_the_private_notes():
    hits = private_note_mentions()
    assert not hits, "point to a docs/ page instead of the internal notes:\n" + "\n".join(hits)


def test_every_named_docs_page_exists():
    bad = missing_docs_paths()
    assert not bad, "these docs/ pages do not exist:\n" + "\n".join(bad)


def test_markdown_links_resolve():
    assert (ROOT / "docs").is_dir() and len(markdown_files()) > 1
    bad = broken_links()
    assert not bad, "broken relative links:\n" + "\n".join(bad)


def test_link_checker_sees_links_and_skips_urls_and_code(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("[ok](a.md) [sec](a.md#x) [web](https://example.com) [here](#top)\n")
    (tmp_path / "README.md").write_text("[a](docs/a.md) [gone](docs/gone.md)\n```\n[code](docs/nope.md)\n```\n")
    assert broken_links(tmp_path) == ["README.md: docs/gone.md"]
