"""Layers import downwards (docs/development.md's layout), and one module, core/hooks.py, intercepts the model (its
hooks, replaced forwards, switched attention kernels and attention weights asked for).

Read from the source with `ast` (nothing is imported): every import of a module, at module level or inside a function,
names its own layer or one below (`from attnlib import x`, x not a module, names the package's `__init__`, the top),
never the app (streamlit, ui/, app_pages/); the views are imported by the package's top in one place only
(DRAWN_FROM_THE_TOP), lazily; and no circle of imports joins two layers.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "attnlib"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("attnlib.results",),  # result files' format and where the shipped data lie: no model (but precomputed)
    ("attnlib.core",),  # models, families, hooks, the runner, corpora
    ("attnlib.stats",),  # statistics: functions of arrays and their sums
    ("attnlib.analyses",),  # one module per analysis
    ("attnlib.results.precomputed", "attnlib.search"),  # shipped results found by analysis; search by example
    ("attnlib.present", "attnlib.views"),  # tables, the report, the tour; views and figures
    ("attnlib.cli",),  # the command line
    ("attnlib", "attnlib.__main__", "attnlib.moved", "attnlib.runs"),  # the package, notebook runs, old paths, -m
)
"""Lowest first; a module is in the layer of its longest matching prefix (the package itself: only its own name)."""

THE_APP = ("streamlit", "ui", "app_pages")
VIEWS = "attnlib.views"
DRAWN_FROM_THE_TOP = [("attnlib.runs", "attnlib.views.drawing")]
"""The one import of the views by the package's top (inside a function: plotly is the `views` extra): the notebook's
run asks the views' registry for its figures."""
INTERCEPTOR = "attnlib.core.hooks"


def module_name(path: Path, root: Path = ROOT) -> str:
    """attnlib/core/hooks.py -> attnlib.core.hooks; a package's __init__.py -> the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules(package: Path = PACKAGE) -> dict[str, ast.Module]:
    """Every module of the package, parsed, by dotted name."""
    return {module_name(p, package.parent): ast.parse(p.read_text(), str(p)) for p in sorted(package.rglob("*.py"))}


def layer_of(name: str) -> int:
    """The index in LAYERS of a dotted module name (its longest matching prefix); -1 outside them."""
    matches = [
        (len(prefix), index)
        for index, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if name == prefix or (prefix != "attnlib" and name.startswith(prefix + "."))
    ]
    return max(matches)[1] if matches else -1


def imports(tree: ast.Module) -> list[tuple[int, str, bool]]:
    """(line, dotted name, inside a function) of every import of the package's modules or another package: `from P
    import x` names P.x where that is a module of attnlib, else P (the package's `__init__` for `from attnlib import
    __version__`); `importlib.import_module("P")` and `__import__("P")` of a name written out name P."""
    found: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, lazily: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, lazily) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            named = [f"{node.module}.{alias.name}" for alias in node.names]
            found.extend((node.lineno, n if n in modules() else node.module, lazily) for n in named)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value, lazily))
        inside = lazily or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return list(dict.fromkeys(found))  # once per line and module, however many names it imports


def upward_imports(name: str, tree: ast.Module) -> list[str]:
    """The imports of module `name`, at module level or inside a function, that name a layer above its own."""
    own = layer_of(name)
    return [
        f"{name}:{line} imports {imported}{' (in a function)' if lazily else ''} (layer {layer_of(imported)} above its {own})"
        for line, imported, lazily in imports(tree)
        if imported.startswith("attnlib") and layer_of(imported) > own
    ]


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it names in an import, anywhere in it (a package's `__init__` by the package's
    name; the parent packages an import runs first are not counted)."""
    graph: dict[str, set[str]] = {}
    for name, tree in modules().items():
        named = {imported for _, imported, _ in imports(tree)}
        graph[name] = {n for n in named if n in modules() and n != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each a set of modules that import each
    other, directly or round a circle; sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def imports_of_the_app(name: str, tree: ast.Module) -> list[str]:
    """Every import anywhere in the module (functions too) of streamlit, ui/ or app_pages/; outside the command line
    and `python -m attnlib`, of attnlib.cli as well."""
    banned = THE_APP + (() if layer_of(name) >= layer_of("attnlib.cli") else ("attnlib.cli",))
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found += [
            f"{name}:{node.lineno} imports {n}" for n in names if any(n == b or n.startswith(b + ".") for b in banned)
        ]
    return found


def _is_false(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def interceptions(name: str, tree: ast.Module) -> list[str]:
    """What in the module touches a model's internals: a forward assigned or deleted, the attention kernel's
    internal attribute, attention weights asked for (output_attentions other than False, as a keyword or a dict key),
    a module or tensor hook registered."""
    found = []

    def at(node: ast.AST, what: str) -> None:
        found.append(f"{name}:{getattr(node, 'lineno', '?')} {what}")

    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == "forward":
                    at(node, "replaces a forward")
        if isinstance(node, ast.Attribute) and node.attr == "_attn_implementation_internal":
            at(node, "switches the attention kernel")
        if isinstance(node, ast.Attribute) and node.attr.startswith("register_") and node.attr.endswith("hook"):
            at(node, f"registers a hook ({node.attr})")
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "setattr" and len(node.args) > 1:
                key = node.args[1]
                if isinstance(key, ast.Constant) and key.value in ("forward", "_attn_implementation_internal"):
                    at(node, f"sets {key.value}")
            for keyword in node.keywords:
                if keyword.arg == "output_attentions" and not _is_false(keyword.value):
                    at(node, "asks for attention weights")
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "output_attentions" and not _is_false(value):
                    at(node, "asks for attention weights")
    return found


def test_every_module_has_a_layer():
    """A new package or top-level module of attnlib is placed in LAYERS (else its imports would go unchecked)."""
    assert [name for name in modules() if layer_of(name) < 0] == []
    assert layer_of("attnlib.new_package.module") == -1 and layer_of("attnlib.core.hooks") == 1


def test_layers_import_downwards():
    """core <- stats <- analyses <- present/views <- cli <- the package's top (result files below core, shipped
    results and search above analyses), inside functions too: the analyses never import the views, the present layer,
    the command line or the package's `__init__`."""
    assert [v for name, tree in modules().items() for v in upward_imports(name, tree)] == []


def test_the_top_draws_through_one_lazy_import_of_the_views():
    """The package's top imports the views in one place, inside a function (import attnlib needs no plotly)."""
    top = layer_of("attnlib")
    found = [
        (name, imported, lazily)
        for name, tree in modules().items()
        if layer_of(name) == top
        for _, imported, lazily in imports(tree)
        if imported == VIEWS or imported.startswith(VIEWS + ".")
    ]
    assert found == [(name, imported, True) for name, imported in DRAWN_FROM_THE_TOP]


def test_no_import_circle_joins_two_layers():
    """No circle of imports (inside functions too, the package's `__init__` counted) has modules of two layers."""
    joining = [circle for circle in import_circles(import_graph()) if len({layer_of(n) for n in circle}) > 1]
    assert joining == []


def test_the_library_never_imports_the_app():
    """Not streamlit, ui/ or app_pages/, even lazily; nor the command line below it."""
    assert [v for name, tree in modules().items() for v in imports_of_the_app(name, tree)] == []


def test_only_core_hooks_intercepts_the_model():
    """Hooks, replaced forwards, switched attention kernels and attention weights asked for are core/hooks.py's
    named sites; no other module touches them."""
    everywhere = {name: interceptions(name, tree) for name, tree in modules().items()}
    assert everywhere[INTERCEPTOR] != []  # the checks below see what they look for: hooks.py does all of it
    assert [v for name, found in everywhere.items() if name != INTERCEPTOR for v in found] == []


def test_the_checks_find_what_they_look_for():
    """Each check flags a hand-written example of what it forbids, and nothing in one that is allowed."""
    tree = ast.parse(
        "import attnlib.analyses.base\n"
        "from attnlib import __version__\n"
        "from attnlib.core.hooks import hooks\n"
        "if True:\n    from attnlib.views import head_view\n"
        "def f():\n    import streamlit\n    from attnlib.present import report\n"
        "    importlib.import_module('attnlib.cli')\n"
    )
    assert [(line, lazily) for line, _, lazily in imports(tree)] == [
        (1, False), (2, False), (3, False), (5, False), (7, True), (8, True), (9, True)]  # fmt: skip
    assert upward_imports("attnlib.stats.x", tree) == [
        "attnlib.stats.x:1 imports attnlib.analyses.base (layer 3 above its 2)",
        "attnlib.stats.x:2 imports attnlib (layer 7 above its 2)",
        "attnlib.stats.x:5 imports attnlib.views.head_view (layer 5 above its 2)",
        "attnlib.stats.x:8 imports attnlib.present.report (in a function) (layer 5 above its 2)",
        "attnlib.stats.x:9 imports attnlib.cli (in a function) (layer 6 above its 2)",
    ]
    assert import_circles({"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"d"}}) == [["a", "b", "c"]]
    assert imports_of_the_app("attnlib.stats.x", tree) == ["attnlib.stats.x:7 imports streamlit"]
    touching = ast.parse(
        "m.forward = f\ndel m.forward\nc._attn_implementation_internal = 'x'\nsetattr(m, 'forward', f)\n"
        "model(x, output_attentions=True)\nmodel(x, output_attentions=layer is not None)\n"
        "kw = {'output_attentions': True}\nm.register_forward_pre_hook(h)\n"
        "model(x, output_attentions=False)\nm.forward(x)\nc._attn_implementation\n"
    )
    assert sorted(int(v.split(":")[1].split()[0]) for v in interceptions("m", touching)) == [1, 2, 3, 4, 5, 6, 7, 8]
