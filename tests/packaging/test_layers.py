"""Layers import downwards (docs/development.md's layout), and one module, core/hooks.py, intercepts the model (its
hooks, replaced forwards, switched attention kernels and attention weights asked for).

Read from the source with `ast` (nothing is imported): a module's module-level imports (also under `if` and `try`)
may name its own layer or one below; functions may import lazily, but never the app (streamlit, ui/, app_pages/).
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
    ("attnlib", "attnlib.__main__", "attnlib.moved"),  # the package's functions, old import paths, `python -m`
)
"""Lowest first; a module is in the layer of its longest matching prefix (the package itself: only its own name)."""

THE_APP = ("streamlit", "ui", "app_pages")
SHARED_FROM_THE_TOP = {("attnlib", "__version__")}  # set before attnlib/__init__.py imports anything
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


def module_level_imports(tree: ast.Module) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) of each import run when the module is imported: top-level statements and those
    under top-level `if`/`try` blocks, not function or class bodies."""
    found: list[tuple[int, str, str | None]] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.If):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
    return found


def upward_imports(name: str, tree: ast.Module) -> list[str]:
    """The module-level imports of module `name` that name a layer above its own."""
    own = layer_of(name)
    found = []
    for line, imported, what in module_level_imports(tree):
        if (imported, what) in SHARED_FROM_THE_TOP:
            continue
        target = f"{imported}.{what}" if imported == "attnlib" and what is not None else imported
        if layer_of(target) > own:
            found.append(f"{name}:{line} imports {target} (layer {layer_of(target)} above its {own})")
    return list(dict.fromkeys(found))  # once per line and module, however many names it imports


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
    """core <- stats <- analyses <- present/views <- cli, at module level (result files below core, shipped results
    and search above analyses)."""
    assert [v for name, tree in modules().items() for v in upward_imports(name, tree)] == []


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
    )
    assert [line for line, *_ in module_level_imports(tree)] == [1, 2, 3, 5]
    assert upward_imports("attnlib.stats.x", tree) == [
        "attnlib.stats.x:1 imports attnlib.analyses.base (layer 3 above its 2)",
        "attnlib.stats.x:5 imports attnlib.views (layer 5 above its 2)",
    ]
    assert imports_of_the_app("attnlib.stats.x", tree) == ["attnlib.stats.x:7 imports streamlit"]
    touching = ast.parse(
        "m.forward = f\ndel m.forward\nc._attn_implementation_internal = 'x'\nsetattr(m, 'forward', f)\n"
        "model(x, output_attentions=True)\nmodel(x, output_attentions=layer is not None)\n"
        "kw = {'output_attentions': True}\nm.register_forward_pre_hook(h)\n"
        "model(x, output_attentions=False)\nm.forward(x)\nc._attn_implementation\n"
    )
    assert sorted(int(v.split(":")[1].split()[0]) for v in interceptions("m", touching)) == [1, 2, 3, 4, 5, 6, 7, 8]
