"""The run folder's names are spelled in one module (``fastsac_async.run_layout``): a check over the tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / "packages/fastsac-async/src/fastsac_async/run_layout.py"
SEARCHED = ("packages/*/src", "apps/*/src", "benchmarks")
"""The code. Tests may spell the names: a message or a file name a user sees is what they check."""

NAMES = re.compile(
    r"config\.yaml|overrides\.txt|logs|trainer\.log|async_errors|.+_error\.log|checkpoints|best\.pt"
    r"|model_[\d*]*(\.\w+)?|replay_rank[\d*]*(\.\w+)?|videos|eval_[\d*]+(\.\w+)?|wandb_id\.txt|ddp_rendezvous"
)
"""A path component that names something in a run folder (an f-string's text parts count too)."""


def _names_a_run_file(text: str) -> bool:
    """True when a ``/``-separated part of ``text`` is a name of :data:`NAMES`."""
    return any(NAMES.fullmatch(part) for part in text.split("/"))


def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of ``tree`` that are code, not documentation (a bare string statement)."""
    documentation = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in documentation
    ]


def _spelled(path: Path) -> list[str]:
    """``file:line: 'text'`` for each code string of ``path`` that names a run folder's file or folder."""
    found = []
    for node in _code_strings(ast.parse(path.read_text(encoding="utf-8"))):
        if _names_a_run_file(node.value):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    return found


def test_the_check_sees_a_run_folder_name_and_skips_documentation() -> None:
    """A path built from a folder name or a checkpoint name is found; docstrings and prose are not."""
    source = (
        '"""Writes logs/<worker>.log."""\n'
        'x = run_dir / "logs" / f"{worker}.log"\n'
        'y = f"model_{step:07d}.pt"\n'
        '"""An attribute docstring naming checkpoints/best.pt."""\n'
        'z = "resume from a model_*.pt checkpoint"\n'
        'w = f"eval_{name}"\n'
    )
    found = [node.value for node in _code_strings(ast.parse(source)) if _names_a_run_file(node.value)]
    assert sorted(found) == ["logs", "model_"]


def test_no_module_but_the_layout_spells_the_run_folder_names() -> None:
    """Only fastsac_async.run_layout names a file or folder of runs/<run>/ in the code."""
    files = [path for pattern in SEARCHED for path in ROOT.glob(f"{pattern}/**/*.py")]
    assert LAYOUT in files
    spelled = [hit for path in files if path != LAYOUT for hit in _spelled(path)]
    assert not spelled, "ask fastsac_async.RunLayout for these paths instead:\n" + "\n".join(spelled)
