"""The imports have a top and a bottom: no circle in a package, no package imports one above it.

Checks over the source with ``ast``, no module is imported. A module's imports are its ``import`` and
``from ... import`` statements wherever they are, at module level or inside a function (the trainer
app's old circle ran through imports inside functions). For the circles, the imports under
``if TYPE_CHECKING:`` are left out: they never run. ``importlib.import_module`` is not seen.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {
    "numa_bind": 0,
    "shm_transport": 0,
    "fastsac_topology": 1,
    "fastsac_core": 2,
    "fastsac_async": 3,
    "fastsac_trainer": 4,
}
"""Each workspace package's layer: a package imports only packages of a lower layer (DESIGN.md)."""
APP_ONLY = ("hydra", "omegaconf", "rich", "gymnasium", "mujoco")
"""Third-party packages only the app imports (DESIGN.md: a library never imports hydra, rich or gymnasium)."""
PUBLIC_SUBMODULES = ("fastsac_async.testing", "fastsac_core.testing")
"""The submodules a library documents as public besides its top (each is named in its package's docstring)."""


def _sources() -> dict[str, Path]:
    """Each workspace package's import name -> its folder under ``src/``."""
    found = ROOT.glob("packages/*/src/*/__init__.py"), ROOT.glob("apps/*/src/*/__init__.py")
    return {init.parent.name: init.parent for paths in found for init in paths}


def _modules(package: Path) -> dict[str, tuple[Path, bool]]:
    """Each module of ``package`` by its dotted name -> (its file, whether it is a package's ``__init__``)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        is_init = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_init else parts)] = (path, is_init)
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, *, run_only: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of ``tree`` at any depth; ``run_only``: not those under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(tree):
        nodes: Sequence[ast.AST] = [child]
        if run_only and isinstance(child, ast.If) and _is_type_checking(child):
            nodes = child.orelse
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node
            yield from _imports(node, run_only=run_only)


def _imported(
    node: ast.Import | ast.ImportFrom, module: str, is_init: bool, modules: Collection[str]
) -> set[str]:
    """The modules of ``modules`` that ``node``, in ``module``, imports (relative imports resolved).

    ``import a.b`` imports ``a.b``; ``from a import b`` imports the submodule ``a.b`` if there is one,
    else the module ``a`` (where the name ``b`` comes from). A name not in ``modules`` is cut back to its
    nearest module (``a.b.Name`` -> ``a.b``); other packages' names are left out.
    """
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_init else module.split(".")[:-1]
            base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    found = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


def _graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package that its running imports import."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, (path, is_init) in modules.items():
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")), run_only=True):
            graph[module] |= _imported(node, module, is_init, modules)
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph`` as ``[a, b, ..., a]``, else None."""
    state: dict[str, str] = {}  # "open" while on the current path, then "done"
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)) is not None:
                return found
        state[module] = "done"
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)) is not None:
            return found
    return None


def test_the_check_sees_imports_inside_functions_and_skips_type_only_ones(tmp_path: Path) -> None:
    """A circle closed by an import inside a function is found; one closed by a type-only import is not."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.a import run\n")
    (package / "a.py").write_text("from pkg import b\ndef run(): pass\n")
    (package / "b.py").write_text("def f():\n    from .sub.c import g\n")
    (package / "sub").mkdir()
    (package / "sub/__init__.py").write_text("")
    (package / "sub/c.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from pkg.a import run\n")
    assert _graph(package)["pkg.b"] == {"pkg.sub.c"}
    assert _circle(_graph(package)) is None
    (package / "sub/c.py").write_text("def g():\n    from ..a import run\n")
    assert _circle(_graph(package)) == ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]


def test_every_package_has_a_layer() -> None:
    """Each workspace package is placed in the layers (a new package must be, to be checked)."""
    assert sorted(_sources()) == sorted(LAYERS)


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_no_import_circle_inside_a_package(package: str) -> None:
    """No module of the package imports itself back, through any chain of running imports."""
    circle = _circle(_graph(_sources()[package]))
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def _project_imports(package: Path) -> Iterator[tuple[str, str]]:
    """``(file:line, top-level name)`` of every import of a project's code and tests, type-only ones too."""
    project = package.parents[1]
    for path in sorted([*package.rglob("*.py"), *(project / "tests").rglob("*.py")]):
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")), run_only=False):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                yield f"{path.relative_to(ROOT)}:{node.lineno}", name.partition(".")[0]


def test_no_package_imports_a_package_above_it() -> None:
    """A package (its code and its tests) imports only workspace packages of a lower layer."""
    upward = [
        f"{where}: {own} imports {name}"
        for own, package in _sources().items()
        for where, name in _project_imports(package)
        if name in LAYERS and name != own and LAYERS[name] >= LAYERS[own]
    ]
    assert not upward, "imports that point up (or sideways):\n" + "\n".join(upward)


def test_no_library_imports_the_apps_dependencies() -> None:
    """Only the app imports hydra, omegaconf, rich, gymnasium or mujoco (a library's tests do not either)."""
    found = [
        f"{where}: {own} imports {name}"
        for own, package in _sources().items()
        if own != "fastsac_trainer"
        for where, name in _project_imports(package)
        if name in APP_ONLY
    ]
    assert not found, "\n".join(found)


def _exported(package: Path) -> set[str]:
    """The names in the ``__all__`` of ``package``'s ``__init__``."""
    for node in ast.parse((package / "__init__.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return {element.value for element in ast.walk(node.value) if isinstance(element, ast.Constant)}
    return set()


def test_the_app_imports_only_what_the_libraries_export() -> None:
    """The app imports a library's names from its top (its ``__all__``) or a documented public submodule."""
    sources = _sources()
    app = sources["fastsac_trainer"]
    past_the_face = []
    for path in sorted(app.rglob("*.py")):
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")), run_only=False):
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(node, ast.Import):
                modules = [(alias.name, None) for alias in node.names]
            elif node.level == 0 and node.module:
                modules = [(node.module, [alias.name for alias in node.names])]
            else:
                continue
            for module, names in modules:
                top = module.partition(".")[0]
                if top not in LAYERS or top == "fastsac_trainer" or module in PUBLIC_SUBMODULES:
                    continue
                if module != top:
                    past_the_face.append(f"{where}: imports {module}")
                elif names is not None:
                    hidden = sorted(set(names) - _exported(sources[top]))
                    past_the_face += [f"{where}: {name} is not in {top}.__all__" for name in hidden]
    assert not past_the_face, "the app imports past a library's face:\n" + "\n".join(past_the_face)


@pytest.mark.parametrize("module", PUBLIC_SUBMODULES)
def test_each_public_submodule_is_documented_in_its_package(module: str) -> None:
    """A submodule the app may import is named as public in its package's docstring."""
    package, _, name = module.partition(".")
    init = ast.parse((_sources()[package] / "__init__.py").read_text(encoding="utf-8"))
    assert (module in (ast.get_docstring(init) or "")) and (_sources()[package] / f"{name}.py").is_file()
