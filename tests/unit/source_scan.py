"""What the source-scanning tests share: which string constants of a module are docstrings (prose
may name anything; code may not)."""

from __future__ import annotations

import ast


def docstring_ids(tree: ast.AST) -> set[int]:
    """ids of the string constants in ``tree`` that are docstrings."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids
