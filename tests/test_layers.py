"""The package's layers only point down (docs/architecture.md): CLI -> pipeline -> backends ->
evaluate -> decoding (methods, tasks) -> models (and the metrics they time, the sandbox) -> core. A
module-level import from a lower layer to a higher one fails here, as does the report CLI
importing torch (it reads stored results; torch costs it seconds)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "specbench"
# highest first; a module's layer is its top-level package or module under specbench/
LAYERS = [
    {"run", "__main__", "report"},
    {"pipeline"},
    {"backends"},
    {"evaluate"},
    {"decoding", "method", "tasks"},
    {"models", "metrics", "sandbox"},
    {"config", "errors", "paths", "registry", "devices", "interrupt", "runs", "cpu_kernels"},
]


def layer_of(module: str) -> int:
    top = module.split(".")[1] if "." in module else module
    return next(i for i, names in enumerate(LAYERS) if top in names)


def module_imports(path: Path) -> list[str]:
    """The specbench modules `path` imports at module level (imports inside a function, as a
    registry's type check, run only when called)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specbench."):
            found.append(node.module)
        elif isinstance(node, ast.ImportFrom) and node.module == "specbench":
            found += [f"specbench.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("specbench.")]
    return found


def upward_imports() -> list[str]:
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(("specbench", *path.relative_to(ROOT).with_suffix("").parts))
        for imported in module_imports(path):
            if imported != "specbench.__version__" and layer_of(imported) < layer_of(module):
                upward.append(f"{module} -> {imported}")
    return upward


def test_no_module_imports_from_a_higher_layer() -> None:
    assert upward_imports() == []


def test_every_package_has_a_layer() -> None:
    tops = {
        p.stem if p.is_file() else p.name
        for p in ROOT.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert tops - {"__init__"} <= set().union(*LAYERS)


def test_the_layer_check_fails_on_an_upward_import(tmp_path, monkeypatch) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "bad.py").write_text("from specbench.pipeline import execute\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert upward_imports() == ["specbench.models.bad -> specbench.pipeline"]


def test_the_report_cli_imports_no_torch(tmp_path) -> None:
    """A Pareto plot of committed runs (markers and metric directions read from the configs
    and tasks, not from the methods' torch code)."""
    code = (
        "import sys; from specbench.report.cli import main; sys.argv = ['specbench-report', "
        f"'--results', 'results/reference', '--out', '{tmp_path}', '--experiment', 'psd_xl', "
        "'pareto', '--task', 'tiny_code', '--quality', 'prefix_match']; main(); "
        "print('torch' in sys.modules)"
    )
    cwd = ROOT.parent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
    assert (tmp_path / "pareto-tiny_code-prefix_match.png").exists()
