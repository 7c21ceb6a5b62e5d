"""The house's rules, checked: the import contracts in pyproject.toml, no import circle among the product's modules,
and no long module without a written reason. docs/architecture.md draws what these check. Ref: #14"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("portal", "scheduling", "telemetry", "agent", "cli")
#: A product module longer than this says why at its top, in its docstring, with these words.
MAX_LINES = 400
LONG_REASON = "Long on purpose:"


def test_the_import_contracts_hold(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    code = lint_imports(config_filename="pyproject.toml", no_cache=True, no_logo=True)
    assert code == 0, capsys.readouterr().out


def _cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative): every import circle is in one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert _cycles({"a": ["b"], "b": []}) == []


def test_no_import_circle_among_the_product_modules() -> None:
    """Every import counts, function-local ones included: a lazy import hides a circle from Python, not from a
    reader."""
    graph = grimp.build_graph(*PRODUCT, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(edges) == []


def _product_files() -> list[Path]:
    return [
        path for package in PRODUCT for path in sorted((ROOT / package).rglob("*.py")) if "migrations" not in path.parts
    ]


def test_long_modules_say_why() -> None:
    unexplained = []
    for path in _product_files():
        lines = path.read_text().count("\n")
        if lines > MAX_LINES:
            docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
            if LONG_REASON not in docstring:
                unexplained.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert unexplained == []
