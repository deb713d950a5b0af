"""No function in cockpit/ or training/ takes more than 12 parameters: a longer list is a parameter
object waiting to be named (a workload, a placement, `RestartPolicy`), and the long hand-packed
calls it forces are what `# fmt: skip` used to hide."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
MOST = 12


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """What a caller may pass: every named parameter, `*args` and `**kwargs` one each, a method's
    `self` or `cls` not counted."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    bound = 1 if positional and positional[0].arg in ("self", "cls") else 0
    return len(positional) - bound + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)


def test_no_function_takes_more_than_twelve_parameters() -> None:
    files = sorted((ROOT / "cockpit").rglob("*.py")) + sorted((ROOT / "training").rglob("*.py"))
    assert any(f.name == "events.py" and f.parent.name == "contract" for f in files)  # the walk reaches them
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} takes {n}"
        for path in files
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (n := _parameters(node)) > MOST
    ]
    assert not long, f"more than {MOST} parameters (take a parameter object): {long}"
