"""The package's shape: subpackages by concern in layers, no import circles, short modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "python" / "ridgefill"

# bottom to top: a module may import its own layer's units and lower layers' only
LAYERS = [
    {"errors", "paths", "files", "fetch", "_core"},
    {"upstream"},
    {"sources"},
    {"format"},
    {"runtime"},
    {"fit"},
    {"serve"},
    {"bench"},
    {"evals"},
    {"tune"},
    {"cli", "demo", "__main__", "__init__"},
]
MAX_LINES = 300


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that `name` imports, at run time or for type checking alike: a type-only import is
    a dependency too (it says what a module reads), so it goes down the layers and closes no circle."""
    tree = ast.parse(path.read_text())
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            mod = ".".join(p for p in (base, node.module or "") if p)
            for alias in node.names:
                target = f"{mod}.{alias.name}"
                out.add(target if target in known or target == "ridgefill._core" else mod)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in known or m == "ridgefill._core"}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def test_every_unit_has_a_layer():
    units = {_unit(m) for m in _modules()}
    placed = set().union(*LAYERS)
    assert units <= placed, f"place {sorted(units - placed)} in LAYERS"


def test_imports_go_down_the_layers(graph):
    upward = [f"{m} -> {d}" for m, deps in graph.items() for d in deps if _layer(_unit(d)) > _layer(_unit(m))]
    assert upward == []


def test_no_import_circles(graph):
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if d.startswith(m + "."):  # a package importing its own submodules is not a circle
                continue
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_modules_are_short():
    long = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_every_subpackage_says_what_it_owns():
    missing = [str(p.relative_to(PKG)) for p in PKG.rglob("__init__.py") if not ast.get_docstring(ast.parse(p.read_text()))]
    assert missing == []


def test_nothing_imports_an_experiment():
    """Research lives in experiments/ and bench/ holds scripts: neither is on the product's or the tests' path."""
    offenders = [str(p.relative_to(ROOT)) for p in [*PKG.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
                 if p != Path(__file__) and "sys.path" in p.read_text()]
    assert offenders == []


@pytest.mark.slow  # a child process
def test_the_gpu_entry_needs_no_compiled_bindings():
    """bench/gpu.sh runs `python -m ridgefill.cli.gpu gen|run` where ridgefill._core was never built."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['ridgefill._core'] = None; import runpy; sys.argv = ['gpu', '--help']\n"
            "try:\n    runpy.run_module('ridgefill.cli.gpu', run_name='__main__')\nexcept SystemExit as e:\n"
            "    sys.exit(e.code)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "pack" in run.stdout and "gen" in run.stdout
