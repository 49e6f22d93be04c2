"""The README and docs/*.md name only files that exist: a reader who follows a path finds it."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The repository's top-level folders: a word starting with one of these is a path into the repository.
PREFIXES = ("memoryapp/", "tests/", "bench/", "evals/", "templates/", "static/", "scripts/", "docs/", "clients/")
PREFIXES += ("examples/",)
# Files a documented command writes (they are outputs, not part of the checkout).
OUTPUTS = {"docs/results/drill.json"}

_FENCE = re.compile(r"^(```|~~~)")
_BACKTICKS = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
# A word made of path characters that does not continue another one (so "/path/to/x.py" yields nothing).
_WORD = re.compile(r"(?<![\w./$~-])[A-Za-z_][\w./-]*")
_FILE = re.compile(r"\.(?:py|md|html|css|js|json|jsonl|npz|tsv|txt|png|toml|in)$")
_PLACEHOLDER = re.compile(r"[*{}<>…$]|\.\.\.")


def _clean(word):
    return word.rstrip(".,;:)")


def _blocks(text):
    """(code block number or None for prose, line) for every line of a Markdown text."""
    block, count = None, 0
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            count += block is None
            block = count if block is None else None
            continue
        yield block, line


def _prose_paths(line):
    """Repository paths named in backticks on a prose line, with an optional ::test name."""
    for span in _BACKTICKS.findall(line):
        for word in span.split():
            path, _, test = word.partition("::")
            path = _clean(path)
            if path.startswith(PREFIXES) and not _PLACEHOLDER.search(word):
                yield path, _clean(test).split("[")[0] or None


def _code_paths(lines):
    """Paths in code blocks: words under a path prefix, and the entries of a file tree.

    A tree starts with a folder at the start of a line (`memoryapp/`); the file and folder names on
    the indented lines below it are inside that folder. A bare `name.py` anywhere else (a diagram)
    must be some file of the repository.
    """
    root = None
    for line in lines:
        words = [_clean(w) for w in _WORD.findall(line) if not _PLACEHOLDER.search(w)]
        if not line[:1].isspace() and words and line.startswith(words[0]) and words[0].endswith("/"):
            root = words[0] if words[0].startswith(PREFIXES) else None
        elif not line.strip() or not line[:1].isspace():
            root = None
        for word in words:
            if word.startswith(PREFIXES):
                yield word, None
            elif root and (word.endswith("/") or _FILE.search(word)) and line[:1].isspace():
                yield root + word, None
            elif "/" not in word and word.endswith(".py"):
                yield "*/" + word, None


def named_paths(doc):
    """(path, test name or None) for every repository path `doc` names."""
    blocks = {}
    for block, line in _blocks(doc.read_text(encoding="utf-8")):
        if block is not None:
            blocks.setdefault(block, []).append(line)
            continue
        yield from _prose_paths(line)
        for target in _LINK.findall(line):
            if "://" not in target and not target.startswith(("#", "mailto:")):
                relative = (doc.parent / target.split("#")[0]).resolve().relative_to(ROOT)
                yield str(relative), None
    for lines in blocks.values():
        yield from _code_paths(lines)


def _exists(path):
    if path.startswith("*/"):  # a bare file name: somewhere in the repository
        return any(ROOT.glob(f"**/{path[2:]}"))
    return (ROOT / path).exists()


def _defines(path, name):
    source = (ROOT / path).read_text(encoding="utf-8")
    return re.search(rf"^\s*(?:async )?(?:def|class) {re.escape(name.split('::')[-1])}\b", source, re.M)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_path_the_docs_name_exists(doc):
    missing = sorted(
        {path for path, _ in named_paths(doc) if path not in OUTPUTS and not _exists(path)},
    )
    assert not missing, f"{doc.name} names files that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_test_the_docs_cite_is_defined_in_its_file(doc):
    stale = sorted(
        {
            f"{path}::{test}"
            for path, test in named_paths(doc)
            if test and path.endswith(".py") and _exists(path) and not _defines(path, test)
        }
    )
    assert not stale, f"{doc.name} cites tests that are not in their files: {stale}"


def test_the_check_finds_a_missing_path_in_prose_a_tree_and_a_diagram(tmp_path):
    doc = tmp_path / "README.md"
    doc.write_text(
        "See `memoryapp/nowhere.py` and `tests/test_docs.py::test_every_path_the_docs_name_exists`.\n"
        "Output: `docs/results/*.json`, a URL [x](https://example.com/memoryapp/x.py).\n"
        "```\nmemoryapp/\n  writing.py gone.py   what they do\n```\n"
        "```\n agent ──HTTP──▶ api_that_is_not_here.py\n```\n",
        encoding="utf-8",
    )
    found = {path for path, _ in named_paths(doc)}
    assert {"memoryapp/nowhere.py", "memoryapp/gone.py", "*/api_that_is_not_here.py"} <= found
    assert not [p for p in found if not p.startswith("*/") and "*" in p], "a glob is not a path"
    assert not {p for p in found if _exists(p)} - {"tests/test_docs.py", "memoryapp/", "memoryapp/writing.py"}
