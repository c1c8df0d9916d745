"""The layout of the ruled packages (harness/, localcluster/, testbins/, workloads/), kept: no import
cycle between their modules, and no arrow between their parts (or into another package) that the
importing part's docstring does not allow (its `May import:` paragraph, the one place the layer rules
are written); and no import cycle anywhere in the repository. Every import counts: module-level,
inside a function, under TYPE_CHECKING. Read from the source with `ast`, so nothing is imported and
nothing is missed because a branch did not run.

A part is a subpackage of a layered package (harness.verdict, localcluster.control) or a module at
its top level (harness.runner, localcluster.cli).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HARNESS = REPO / "harness"
# The packages whose parts state their rules; their top-level names are what `imported` follows.
LAYERED = ("harness", "localcluster")
# Every package whose imports are ruled: the layered ones part by part; testbins and workloads by
# their subpackages, a top-level module keeping its package's rules (its __init__.py docstring).
# An arrow into another package is allowed by naming that package (`harness`) or its part.
RULED = (*LAYERED, "testbins", "workloads")
# Every folder of this repository's own Python, for the repository-wide cycle check (hack/go's
# vendored module caches and the like hold none of ours).
OWN_CODE = ("harness", "localcluster", "testbins", "workloads", "manifests", "bench", "hack", "tests")
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


def modules(root: Path = REPO, folders: tuple[str, ...] = RULED) -> dict[str, Path]:
    """Every module under root/<folder> for each folder, by dotted name (a package by its __init__.py)."""
    return {module_name(path, root): path for folder in folders for path in sorted((root / folder).rglob("*.py"))
            if "__pycache__" not in path.parts}


def imported(path: Path, known: dict[str, Path], root: Path = REPO,
             tops: tuple[str, ...] = RULED) -> Iterator[tuple[str, int]]:
    """The modules of `tops` a file imports, wherever the import stands: `from harness.x import y`
    names harness.x.y when that is a module, else harness.x; relative imports are resolved."""
    own = module_name(path, root)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in tops:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] not in tops:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in known else base), node.lineno


def arrows(known: dict[str, Path], root: Path = REPO, tops: tuple[str, ...] = RULED) -> list[Arrow]:
    return [Arrow(source, target, f"{path.relative_to(root)}:{line}")
            for source, path in known.items() for target, line in imported(path, known, root, tops)
            if target != source]


def repository_arrows(root: Path = REPO) -> list[Arrow]:
    """Every arrow between this repository's own modules: the dotted names from the root, and the
    bare names a script's folder (not a package) puts on sys.path (bench's `import bench_common`)
    resolved to the module beside it."""
    known = {name: path for name, path in modules(root, OWN_CODE).items() if not name.startswith("hack.go")}
    tops = tuple({name.split(".")[0] for name in known})
    found = arrows(known, root, tops)
    for source, path in known.items():
        folder = source.rpartition(".")[0]
        if (path.parent / "__init__.py").exists():
            continue  # in a package a bare name is another top-level module (`import html`), not a sibling
        siblings = {name.rpartition(".")[2]: name for name in known if name.rpartition(".")[0] == folder}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module
                     else [])
            found += [Arrow(source, siblings[name], f"{path.relative_to(root)}:{node.lineno}")
                      for name in names if name in siblings and name not in tops and siblings[name] != source]
    return found


def part_of(module: str) -> str:
    """harness.verdict.training -> harness.verdict; harness.runner -> harness.runner; harness -> harness."""
    return ".".join(module.split(".")[:2])


def root_of(module: str) -> str:
    return module.split(".", maxsplit=1)[0]


def parts(known: dict[str, Path]) -> dict[str, Path]:
    """Each part and the file whose docstring states its rules (a package's __init__.py); outside the
    layered packages only subpackages are parts, and the package itself states its modules' rules."""
    return {name: path for name, path in known.items()
            if (name.count(".") == 1 and (root_of(name) in LAYERED or path.name == "__init__.py"))
            or (name.count(".") == 0 and name not in LAYERED)}


def allowed(path: Path) -> set[str]:
    """The parts named by the `May import:` paragraph of a file's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    found = MAY_IMPORT.search(doc)
    if found is None:
        raise AssertionError(f"{path}: its docstring has no `May import:` paragraph "
                             "(expected e.g. `May import: harness.errors, harness.config.`)")
    return set(re.findall(rf"\b(?:{'|'.join(RULED)})(?:\.\w+)?\b", found["what"]))


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


def ruled_part(module: str, rules: dict[str, set[str]]) -> str:
    """The part whose rules hold for a module; a top-level module of testbins or workloads is its package's."""
    part = part_of(module)
    return part if root_of(part) in LAYERED or part in rules else root_of(part)


def layer_problems(known: dict[str, Path], root: Path = REPO) -> list[str]:
    rules = {name: allowed(path) for name, path in parts(known).items()}
    problems = []
    for arrow in arrows(known, root):
        source, target = ruled_part(arrow.source, rules), ruled_part(arrow.target, rules)
        ruler, mine = source, rules.get(source, set())
        across = root_of(source) != root_of(target)
        if across and not (root_of(target) in mine or target in mine):
            others = sorted(name for name in mine if root_of(name) != root_of(source))
            problems.append(f"{arrow.source} imports {arrow.target} ({arrow.where}): {ruler} may import "
                            f"only {', '.join(others) or 'nothing of another package'}")
        elif not across and source != target and target != root_of(target) and target not in mine:
            problems.append(f"{arrow.source} imports {arrow.target} ({arrow.where}): {ruler} may import "
                            f"only {', '.join(sorted(mine)) or f'nothing of {root_of(source)}'}")
    return problems


def test_no_module_imports_itself_back():
    known = modules()
    assert cycle_problems(arrows(known)) == []


def test_nothing_in_the_repository_imports_itself_back():
    # Scripts, tests and bench too: a circle anywhere is one a reader must hold in mind at once.
    assert cycle_problems(repository_arrows()) == []


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
    for folder in (p for top in RULED for p in (REPO / top).rglob("*") if p.is_dir() and p.name != "__pycache__"
                   and any(p.glob("*.py"))):
        assert (folder / "__init__.py").exists(), f"{folder.relative_to(REPO)} has no __init__.py: " \
            "pyproject's package discovery would not ship it"


def test_the_top_level_holds_few_modules():
    for package in LAYERED:
        top = sorted(p.name for p in (REPO / package).glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
        assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{package}/ has {len(top)} top-level modules " \
            f"({', '.join(top)}): at most {MAX_TOP_LEVEL_MODULES}, the rest in the subpackage of their role"


def test_outside_code_names_only_modules_that_exist():
    # A stale `from harness.old_name import x` could still import from another checkout's editable install.
    known = modules()
    for folder in ("testbins", "tests", "bench", "hack"):
        for path in (REPO / folder).rglob("*.py"):
            if "go" in path.relative_to(REPO / folder).parts[:1]:
                continue
            for target, line in imported(path, known):
                assert target in known, \
                    f"{path.relative_to(REPO)}:{line} imports {target}, which {root_of(target)}/ lacks"


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


def test_a_circle_through_a_script_beside_its_module_is_found(tmp_path):
    write_house(tmp_path, {
        "bench/common.py": "def f():\n    import scale\n",
        "bench/scale.py": "import common\n",
        "localcluster/__init__.py": "", "localcluster/a.py": "from localcluster import b\n",
        "localcluster/b.py": "def g():\n    from localcluster.a import x\n",
    })
    problems = cycle_problems(repository_arrows(tmp_path))
    assert len(problems) == 2
    assert any("bench.common <-> bench.scale" in p and "bench/common.py:2" in p for p in problems)
    assert any("localcluster.a <-> localcluster.b" in p and "localcluster/b.py:2" in p for p in problems)


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


def test_an_arrow_into_another_package_needs_its_name_in_the_rules(tmp_path):
    known = write_house(tmp_path, {
        "harness/__init__.py": '"""Root.\n\nMay import: nothing of the harness."""\n',
        "harness/jobs/__init__.py": '"""Jobs.\n\nMay import: nothing of the harness."""\n',
        "harness/jobs/job.py": "def f():\n    from testbins import suite\n",
        "testbins/__init__.py": '"""Binaries.\n\nMay import: harness."""\n',
        "testbins/suite.py": "from harness.jobs.job import f\nfrom workloads import gpt\n",
        "workloads/__init__.py": '"""Workloads.\n\nMay import: nothing of another package."""\n',
        "workloads/gpt.py": "from workloads import probe\n", "workloads/probe.py": "",
    })
    assert layer_problems(known, tmp_path) == [
        "harness.jobs.job imports testbins.suite (harness/jobs/job.py:2): harness.jobs may import only "
        "nothing of another package",
        "testbins.suite imports workloads.gpt (testbins/suite.py:2): testbins may import only harness"]


# The layout list of docs/DEVELOPING.md, kept equal to the tree.
LAYOUT_DOC = "docs/DEVELOPING.md"


def readme_layout() -> dict[str, str]:
    """The rows of docs/DEVELOPING.md's `## Layout` table: first cell (a path) -> the rest of the row."""
    text = (REPO / LAYOUT_DOC).read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \|(.*)\|\s*$", section, re.MULTILINE)
    return dict(rows)


@pytest.mark.parametrize("top", RULED)  # the table names every subpackage and module of each
def test_the_layout_lists_every_package_and_module_and_nothing_gone(top):
    rows = readme_layout()
    root = REPO / top
    packages = {f"{top}/{p.parent.relative_to(root).as_posix()}/" for p in root.rglob("__init__.py")
                if p.parent != root}
    listed = {path for path in rows if path.startswith(f"{top}/") and path != f"{top}/"}
    assert listed == packages, f"{LAYOUT_DOC}'s layout lists {sorted(listed - packages)} (gone) " \
        f"and lacks {sorted(packages - listed)}"
    for folder in [f"{top}/", *sorted(packages)]:
        files = {p.name for p in (REPO / folder).iterdir()
                 if p.suffix in (".py", ".yaml") and p.name != "__init__.py"}
        named = set(re.findall(r"`(\w+\.(?:py|yaml))`", rows[folder]))
        assert named == files, f"{LAYOUT_DOC}'s layout row {folder}: lists {sorted(named - files)} (gone) " \
            f"and lacks {sorted(files - named)}"


def test_the_layout_lists_every_docs_file_and_tests_folder():
    rows = readme_layout()
    docs = {p.name for p in (REPO / "docs").glob("*.md")}
    assert set(re.findall(r"`([\w-]+\.md)`", rows["docs/"])) == docs
    # Every folder of tests at any depth (tests/ is grouped by subject, mirroring the packages).
    folders = {p.name for p in (REPO / "tests").rglob("*") if p.is_dir() and p.name != "__pycache__"
               and any(p.glob("*.py"))}
    assert set(re.findall(r"`(\w+)/`", rows["tests/"])) == folders


def test_no_folder_of_scripts_shadows_a_package_of_the_repository():
    """A script run by path (`python tests/integration/mpi_fault_suite.py`) has its own folder first on
    sys.path: a subfolder there named like one of the repository's packages (`harness/`) would be
    imported in its place. Found when tests/integration/harness/ made the MPI fault suite exit 255."""
    packages = tuple(p.name for p in REPO.iterdir() if (p / "__init__.py").is_file())
    shadows = sorted(f"{script.relative_to(REPO)} imports {name}, but {name}/ is beside it"
                     for script in (REPO / "tests").rglob("*.py")
                     if "__main__" in script.read_text() and not script.name.startswith("test_")
                     for name in sorted({module.split(".")[0] for module, _ in imported(script, {}, REPO, packages)})
                     if (script.parent / name).is_dir())
    assert not shadows, f"scripts that would import a tests folder for a package: {shadows}"



def test_hack_holds_entry_scripts_only():
    """hack/ keeps entry scripts (issue 32): its Python scripts set the path and call a package's `main`
    in a few lines, and its one folder is go/, the Go modules build-binaries.sh builds (its inputs)."""
    hack = REPO / "hack"
    assert {p.name for p in hack.iterdir() if p.is_dir() and p.name != "__pycache__"} == {"go"}
    thick = {}
    for script in sorted(hack.glob("*.py")):
        body = script.read_text().split('"""', 2)[-1]  # past the docstring
        code = [line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        if len(code) > 8:
            thick[script.name] = len(code)
    assert not thick, f"hack/ scripts holding logic (lines of code past the docstring): {thick}"
