"""The never-arrows of design.md, read from the source: the protocol layer (dissectors/) never
imports analyzer/; nothing outside the CLI (analyzer/cli.py, analyzer/commands/) imports the
CLI: not the sinks, the runners (file, workers, live, Spark), the tables, the model or the
errors; the Rust core never imports our Python packages. Every import counts, those inside
functions and ``importlib.import_module("...")`` included."""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = ("analyzer.cli", "analyzer.commands")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, module: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, module imported) for each import of ``source`` (the module ``module``), relative
    ones resolved; ``from a import b`` gives both ``a`` and ``a.b`` (b may be a module)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            name = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, name
            for alias in node.names:
                yield node.lineno, f"{name}.{alias.name}"
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                   or isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))):
            yield node.lineno, node.args[0].value


def under(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def role(module: str) -> str | None:
    """What the design calls the module, for the message; None for the CLI itself."""
    if under(module, CLI) or module == "analyzer.__main__":
        return None
    if under(module, ("analyzer.sinks",)):
        return "a sink"
    if module in ("analyzer.shards", "analyzer.live", "analyzer.pipeline", "analyzer.runs") \
            or module.startswith("analyzer.spark"):
        return "a runner"
    return {"analyzer.tables": "the tables", "analyzer.model": "the model",
            "analyzer.errors": "the errors"}.get(module, "a module outside the CLI")


def broken_arrows(module: str, source: str, is_package: bool = False, where: str | None = None) -> list[str]:
    """The design's rules ``source`` (the module ``module``, in the file ``where``) breaks: the
    import statement and the rule, one line each."""
    out: dict[int, str] = {}        # (one a line)
    who = role(module)
    text = source.splitlines()
    for line, name in imports(source, module, is_package):
        if module.startswith("dissectors") and under(name, ("analyzer",)):
            rule = "the protocol layer (dissectors/) never imports analyzer/"
        elif who is not None and under(name, CLI):
            rule = f"{who} never imports the CLI (analyzer.cli, analyzer.commands)"
        else:
            continue
        out.setdefault(line, f"{where or module}:{line}: {text[line - 1].strip()}  ({name}: {rule})")
    return [out[line] for line in sorted(out)]


def python_modules() -> list[tuple[str, Path]]:
    return [(module_name(p), p) for d in ("analyzer", "dissectors") for p in sorted((ROOT / d).rglob("*.py"))]


def test_the_python_never_arrows_hold() -> None:
    checked = {m for m, _ in python_modules()}
    # (the roles the rules name are there to be checked: a moved folder would check nothing)
    for must in ("dissectors.kafka", "analyzer.sinks.check", "analyzer.sinks.output", "analyzer.shards",
                 "analyzer.live", "analyzer.pipeline", "analyzer.tables", "analyzer.model", "analyzer.errors"):
        assert must in checked, f"{must} not found under {ROOT}"
    assert any(m.startswith("analyzer.spark") for m in checked), "no Spark runner (analyzer/spark*) found"
    broken = [b for m, p in python_modules()
              for b in broken_arrows(m, p.read_text(), p.name == "__init__.py", str(p.relative_to(ROOT)))]
    assert not broken, "imports against design.md:\n" + "\n".join(broken)


def test_nothing_imports_the_cli_module() -> None:
    """analyzer.cli registers the commands; the commands take what they share from
    analyzer.commands.options, never from analyzer.cli (only the entry point does)."""
    broken = [f"{m}:{line} imports {name}" for m, p in python_modules()
              if m not in ("analyzer.cli", "analyzer.__main__")
              for line, name in imports(p.read_text(), m, p.name == "__init__.py")
              if under(name, ("analyzer.cli",))]
    assert not broken, "imports of analyzer.cli besides the entry point:\n" + "\n".join(broken)


# an import call of the binding (PyO3: py.import, PyModule::import, import_bound) naming a module
RUST_IMPORT = re.compile(r'\bimport(?:_bound)?\s*\(\s*(?:[\w&]+\s*,\s*)?"([\w.]+)"')


def rust_imports_of_ours(text: str) -> list[tuple[int, str]]:
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in RUST_IMPORT.finditer(text)
            if under(m.group(1), ("analyzer", "dissectors"))]


def test_the_core_never_imports_our_python() -> None:
    files = sorted((ROOT / "core" / "src").rglob("*.rs"))
    assert files
    broken = [f"{p.relative_to(ROOT)}:{line} imports {name}: the Rust side never imports our Python packages"
              for p in files for line, name in rust_imports_of_ours(p.read_text())]
    assert not broken, "\n".join(broken)


def test_the_checks_see_every_kind_of_import() -> None:
    """The checks above can fail: each kind of import they must see, seen."""
    bad = ("import analyzer.cli\n"
           "def f():\n    from analyzer import commands\n"
           "def g():\n    from ..commands.options import lean_decode\n"
           "import importlib\nimportlib.import_module('analyzer.cli')\n")
    assert sorted(imports(bad, "analyzer.sinks.x")) == [
        (1, "analyzer.cli"), (3, "analyzer"), (3, "analyzer.commands"), (5, "analyzer.commands.options"),
        (5, "analyzer.commands.options.lean_decode"), (6, "importlib"), (7, "analyzer.cli")]
    assert len(broken_arrows("analyzer.sinks.x", bad)) == 4
    assert broken_arrows("analyzer.spark.job", "from analyzer.cli import main") == [
        "analyzer.spark.job:1: from analyzer.cli import main  (analyzer.cli: a runner never imports the CLI "
        "(analyzer.cli, analyzer.commands))"]
    assert broken_arrows("dissectors", "from analyzer import model", is_package=True)
    assert broken_arrows("dissectors.kafka", "from . import field") == []
    assert broken_arrows("analyzer.commands.read", "from analyzer.cli import main") == []
    assert rust_imports_of_ours('let m = py.import("dissectors.field")?;\nPyModule::import_bound(py, '
                                '"analyzer.model")\npy.import("builtins")') == [
        (1, "dissectors.field"), (2, "analyzer.model")]
