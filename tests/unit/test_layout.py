"""The harness's layout, kept: no import cycle between its modules, and no arrow between its parts
that the importing part's docstring does not allow (its `May import:` paragraph, the one place the
layer rules are written). Every import counts: module-level, inside a function, under
TYPE_CHECKING. Read from the source with `ast`, so nothing is imported and nothing is missed
because a branch did not run.

A part is a subpackage of harness/ (harness.verdict) or a module at its top level (harness.runner).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HARNESS = REPO / "harness"
MAY_IMPORT = re.compile(r"^May import:\s*(?P<what>.+?)(?:\n\s*\n|\Z)", re.MULTILINE | re.DOTALL)
MAX_TOP_LEVEL_MODULES = 3


@dataclass(frozen=True)
class Arrow:
    """`source` imports `target` (both dotted module names) at `where` (path:line)."""

    source: str
    target: str
    where: str


def module_name(path: Path, root: Path = REPO) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = REPO) -> dict[str, Path]:
    """Every module of root/harness, by dotted name (a package by its __init__.py)."""
    return {module_name(path, root): path for path in sorted((root / "harness").rglob("*.py"))}


def imported(path: Path, known: dict[str, Path], root: Path = REPO) -> Iterator[tuple[str, int]]:
    """The harness modules a file imports, wherever the import stands: `from harness.x import y`
    names harness.x.y when that is a module, else harness.x; relative imports are resolved."""
    own = module_name(path, root)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "harness":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != "harness":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in known else base), node.lineno


def arrows(known: dict[str, Path], root: Path = REPO) -> list[Arrow]:
    return [Arrow(source, target, f"{path.relative_to(root)}:{line}")
            for source, path in known.items() for target, line in imported(path, known, root) if target != source]


def part_of(module: str) -> str:
    """harness.verdict.training -> harness.verdict; harness.runner -> harness.runner; harness -> harness."""
    return ".".join(module.split(".")[:2])


def parts(known: dict[str, Path]) -> dict[str, Path]:
    """Each part and the file whose docstring states its rules (a package's __init__.py)."""
    return {name: path for name, path in known.items() if name.count(".") == 1}


def allowed(path: Path) -> set[str]:
    """The parts named by the `May import:` paragraph of a file's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    found = MAY_IMPORT.search(doc)
    if found is None:
        raise AssertionError(f"{path}: its docstring has no `May import:` paragraph "
                             "(expected e.g. `May import: harness.errors, harness.config.`)")
    return set(re.findall(r"\bharness(?:\.\w+)?\b", found["what"]))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def cycle_problems(edges: list[Arrow], of: Callable[[str], str] = str) -> list[str]:
    graph: dict[str, set[str]] = {}
    for arrow in edges:
        graph.setdefault(of(arrow.source), set()).add(of(arrow.target))
    problems = []
    for component in cycles(graph):
        ties = [f"{a.source} -> {a.target} ({a.where})" for a in edges
                if of(a.source) in component and of(a.target) in component and of(a.source) != of(a.target)]
        problems.append(f"import cycle {' <-> '.join(component)}: " + "; ".join(ties))
    return problems


def layer_problems(known: dict[str, Path], root: Path = REPO) -> list[str]:
    rules = {name: allowed(path) for name, path in parts(known).items()}
    problems = []
    for arrow in arrows(known, root):
        source, target = part_of(arrow.source), part_of(arrow.target)
        if source != target and target != "harness" and target not in rules.get(source, set()):
            problems.append(f"{arrow.source} imports {arrow.target} ({arrow.where}): {source} may import "
                            f"only {', '.join(sorted(rules.get(source, ()))) or 'nothing of the harness'}")
    return problems


def test_no_module_imports_itself_back():
    known = modules()
    assert cycle_problems(arrows(known)) == []


def test_no_part_imports_itself_back():
    known = modules()
    assert cycle_problems(arrows(known), part_of) == []


def test_every_arrow_between_parts_is_allowed_by_the_importing_part():
    assert layer_problems(modules()) == []


def test_every_part_says_what_it_owns_and_may_import():
    for name, path in parts(modules()).items():
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and len(doc.split()) > 12, f"{path.relative_to(REPO)}: no docstring saying what {name} owns"
        allowed(path)  # raises naming the file when the rules are missing
    for folder in (p for p in HARNESS.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        assert (folder / "__init__.py").exists(), f"{folder.relative_to(REPO)} has no __init__.py: " \
            "pyproject's package discovery would not ship it"


def test_the_top_level_holds_few_modules():
    top = sorted(p.name for p in HARNESS.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"harness/ has {len(top)} top-level modules ({', '.join(top)}): " \
        f"at most {MAX_TOP_LEVEL_MODULES}, the rest in the subpackage of their role"


def test_outside_code_names_only_harness_modules_that_exist():
    # A stale `from harness.old_name import x` could still import from another checkout's editable install.
    known = modules()
    for folder in ("testbins", "tests", "bench"):
        for path in (REPO / folder).rglob("*.py"):
            for target, line in imported(path, known):
                assert target in known, f"{path.relative_to(REPO)}:{line} imports {target}, which harness/ lacks"


# The checker itself, on a house made for the purpose: a test that can fail.

def write_house(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return modules(root)


def test_a_function_level_or_type_only_import_back_is_a_cycle(tmp_path):
    known = write_house(tmp_path, {
        "harness/__init__.py": '"""Root.\n\nMay import: nothing."""\n',
        "harness/low/__init__.py": '"""Low part.\n\nMay import: harness.errors."""\n',
        "harness/low/a.py": "def f():\n    from harness.low.b import g\n",
        "harness/low/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from harness.low import a\n",
    })
    problems = cycle_problems(arrows(known, tmp_path))
    assert len(problems) == 1 and "harness.low.a <-> harness.low.b" in problems[0]
    assert "harness/low/a.py:2" in problems[0] and "harness/low/b.py:3" in problems[0]


def test_a_forbidden_arrow_is_named_with_its_line(tmp_path):
    known = write_house(tmp_path, {
        "harness/__init__.py": '"""Root.\n\nMay import: nothing."""\n',
        "harness/errors.py": '"""Errors.\n\nMay import: nothing of the harness."""\n',
        "harness/verdict/__init__.py": '"""Verdicts.\n\nMay import: harness.errors."""\n',
        "harness/verdict/training.py": "import json\n\nfrom harness.cluster.client import Cluster\n",
        "harness/cluster/__init__.py": '"""Cluster.\n\nMay import: harness.errors."""\n',
        "harness/cluster/client.py": "from harness.errors import ApiError\n",
    })
    assert layer_problems(known, tmp_path) == [
        "harness.verdict.training imports harness.cluster.client (harness/verdict/training.py:3): "
        "harness.verdict may import only harness.errors"]


# The README's layout list, kept equal to the tree.

def readme_layout() -> dict[str, str]:
    """The rows of README.md's `## Layout` table: first cell (a path) -> the rest of the row."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \|(.*)\|\s*$", section, re.MULTILINE)
    return dict(rows)


def test_readme_lists_every_harness_package_and_module_and_nothing_gone():
    rows = readme_layout()
    packages = {f"harness/{p.parent.relative_to(HARNESS).as_posix()}/" for p in HARNESS.rglob("__init__.py")
                if p.parent != HARNESS}
    listed = {path for path in rows if path.startswith("harness/") and path != "harness/"}
    assert listed == packages, f"README's layout lists {sorted(listed - packages)} (gone) " \
        f"and lacks {sorted(packages - listed)}"
    for folder in ["harness/", *sorted(packages)]:
        files = {p.name for p in (REPO / folder).iterdir()
                 if p.suffix in (".py", ".yaml") and p.name != "__init__.py"}
        named = set(re.findall(r"`(\w+\.(?:py|yaml))`", rows[folder]))
        assert named == files, f"README's layout row {folder}: lists {sorted(named - files)} (gone) " \
            f"and lacks {sorted(files - named)}"


def test_readme_lists_every_docs_file_and_tests_folder():
    rows = readme_layout()
    docs = {p.name for p in (REPO / "docs").glob("*.md")}
    assert set(re.findall(r"`([\w-]+\.md)`", rows["docs/"])) == docs
    folders = {p.name for p in (REPO / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"
               and any(p.glob("*.py"))}
    assert set(re.findall(r"`(\w+)/`", rows["tests/"])) == folders
