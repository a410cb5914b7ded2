"""Refuse a ``train()`` that the run's worker processes would run again: a call outside the main guard.

The workers are started by multiprocessing's fork server (Note [fork server] in
``fastsac_async.parent.fork_server``), which prepares each of them as ``spawn`` does: it imports the
parent's main script again, as ``__mp_main__``, so that what the script defines can be unpickled
there. A script that calls ``train()`` at its top level, outside ``if __name__ == "__main__":``,
would start a run in every worker. :func:`check_main_guard` refuses that call in one line, in the
parent before anything is created, and in a worker importing the script (the case the parent's
check cannot see: a script whose source cannot be read).
"""

from __future__ import annotations

import ast
import inspect
import multiprocessing
import os
import sys
from types import FrameType, ModuleType

from fastsac_trainer.config.exceptions import TrainerAppError

__all__ = ["check_main_guard"]

_GUARD = 'if __name__ == "__main__":'
_FIX = f"put the call under `{_GUARD}`, as the README's example does"
_TESTS = ('__name__ == "__main__"', '"__main__" == __name__')
"""The main guard's test, as ``ast.unparse`` writes it (double quotes)."""


def check_main_guard() -> None:
    """Refuse a call of ``train()`` that the run's workers would repeat when they import the main script.

    Raises:
        TrainerAppError: This process is a worker importing the main script, or the call is made at
            the top level of a main script that the workers will import, outside the main guard.
    """
    # The flag multiprocessing's own check reads (spawn._check_not_importing_main): set while a new
    # process prepares itself, which includes importing the parent's main script.
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise TrainerAppError(
            "train() is called while a worker process of a run imports the main script again, so the "
            f"script calls it unguarded; {_FIX}"
        )
    main = sys.modules.get("__main__")
    if main is None or not _reimported_by_workers(main):
        return
    frame = _top_level_frame(main)
    if frame is None:
        return
    path, line = frame.f_code.co_filename, frame.f_lineno
    try:
        with open(path, encoding="utf-8") as file:
            tree = ast.parse(file.read(), path)
    except (OSError, SyntaxError, ValueError):
        return  # nothing to read: a worker importing the script is refused by the check above
    if line is None or _in_main_guard(tree, line):
        return
    raise TrainerAppError(
        f"train() is called at line {line} of {path} outside `{_GUARD}`: every worker process of the run "
        f"imports that script again and would start a run of its own; {_FIX}"
    )


def _reimported_by_workers(main: ModuleType) -> bool:
    """Whether a new process imports ``main`` again (``multiprocessing.spawn.get_preparation_data``)."""
    name = getattr(main.__spec__, "name", None)
    if name is not None:  # ``python -m package.module``; a package's ``__main__`` is never imported again
        return name != "__main__" and not name.endswith(".__main__")
    path = getattr(main, "__file__", None)  # a script; none in a notebook, the REPL or ``python -c``
    return path is not None and os.path.splitext(os.path.basename(path))[0] != "ipython"


def _top_level_frame(main: ModuleType) -> FrameType | None:
    """The frame running ``main``'s top-level code, if this call comes from it."""
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>":
            return frame
        frame = frame.f_back
    return None


def _in_main_guard(tree: ast.Module, line: int) -> bool:
    """Whether ``line`` is in the body of an ``if __name__ == "__main__":`` of ``tree``."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and ast.unparse(node.test).replace("'", '"') in _TESTS
            and node.body[0].lineno <= line <= (node.body[-1].end_lineno or node.body[-1].lineno)
        ):
            return True
    return False
