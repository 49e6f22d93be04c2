"""The layout keeps its promises: no import cycles, the domain never imports the benchmarks,
imports inside functions say why, and importing the settings starts nothing."""

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("memoryapp", "bench", "evals")


def _modules():
    """Every module of the three packages: dotted name -> path (migrations excluded)."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(path, name, modules):
    """The project modules `name` imports, at load time or inside a function: a cycle through a
    function-level import is a cycle all the same, only hidden until that function runs."""
    tree = ast.parse(path.read_text(), filename=str(path))
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:  # relative import
                package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
                for _ in range(node.level - 1):
                    package = package.rsplit(".", 1)[0]
                base = f"{package}.{base}"
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.add(full if full in modules else base)
    return {t for t in targets if t in modules and t != name}


def _graph():
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def test_the_import_graph_has_no_cycles():
    graph = _graph()
    assert "memoryapp.api.sessions" in graph["memoryapp.api"]  # the walk sees real edges
    state, cycles = {}, []

    def walk(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                walk(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_would_catch_a_cycle(tmp_path):
    """The walk is not vacuous: two modules importing each other form a cycle in its graph."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from memoryapp import sessions\n")
    b.write_text("def later():\n    from memoryapp import writing\n")
    modules = {"memoryapp.sessions": a, "memoryapp.writing": b}
    assert _imports(a, "memoryapp.writing", modules) == {"memoryapp.sessions"}
    assert _imports(b, "memoryapp.sessions", modules) == {"memoryapp.writing"}  # inside a function too


def test_the_domain_never_imports_benchmarks_or_evaluation():
    graph = _graph()
    offenders = {
        name: sorted(t for t in targets if t.startswith(("bench", "evals")))
        for name, targets in graph.items()
        if name.startswith("memoryapp")
    }
    assert not {k: v for k, v in offenders.items() if v}
    for path in (ROOT / "memoryapp").rglob("*.py"):  # imports inside functions too
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(("bench", "evals")), path
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith(("bench", "evals")) for a in node.names), path


def test_imports_inside_functions_say_why():
    """An import inside a function is allowed only with a comment on it or just above it."""
    silent = []
    for path in _modules().values():
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    line, above = lines[node.lineno - 1], node.lineno - 2
                    while lines[above].strip().startswith(("import ", "from ")):  # a block of imports
                        above -= 1
                    if "#" not in line and not lines[above].strip().startswith("#"):
                        silent.append(f"{path.relative_to(ROOT)}:{node.lineno}: {line.strip()}")
    assert not sorted(set(silent)), "imports inside functions without a reason:\n" + "\n".join(sorted(set(silent)))


def test_importing_the_settings_starts_no_process_and_writes_nothing(tmp_path):
    data = tmp_path / "data"
    env = {**os.environ, "MEMORYAPP_DATA_DIR": str(data), "DJANGO_SETTINGS_MODULE": "memoryapp.settings"}
    env.pop("DATABASE_URL", None)
    code = "import memoryapp.settings, psutil, os; print(len(psutil.Process(os.getpid()).children(recursive=True)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
    assert not data.exists(), "importing the settings created the data folder"
    for command in (["help"], ["check"], ["makemigrations", "--check", "--dry-run"]):
        done = subprocess.run(
            [sys.executable, "manage.py", *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (command, done.stderr)
        assert not (data / "pg").exists(), f"manage.py {' '.join(command)} started the embedded database"
    assert not (ROOT / "control").exists(), "the filesystem broker wrote into the repository"


def test_embedded_db_command_reports_a_stopped_server_without_starting_it(tmp_path):
    env = {**os.environ, "MEMORYAPP_DATA_DIR": str(tmp_path / "data")}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "embedded_db", "status"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("not running")
    assert not (tmp_path / "data" / "pg").exists()
