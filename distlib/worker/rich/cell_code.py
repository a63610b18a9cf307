"""A session cell's code as the worker runs it: compiled as a body plus its last expression apart (its value is
the cell's output, as in IPython), and the traceback of an error from the cell's own frames on."""

from __future__ import annotations

import ast
import sys
import traceback
from types import CodeType


def split_last_expression(code: str, filename: str) -> tuple[CodeType, CodeType | None]:
    """The cell compiled as a body, plus its last statement compiled apart when it is an expression."""
    tree = ast.parse(code, filename, "exec")
    last = None
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr):
        tree.body.pop()
        last = compile(ast.Expression(final.value), filename, "eval")
    return compile(tree, filename, "exec"), last


def user_traceback(filename: str) -> str:
    """The current exception's traceback from the cell's own frames on."""
    kind, error, tb = sys.exc_info()
    start = tb
    while start is not None and start.tb_frame.f_code.co_filename != filename:
        start = start.tb_next
    return "".join(traceback.format_exception(kind, error, start if start is not None else tb))
