"""The package structure, read from the sources with ``ast`` (nothing is imported).

The rules hold over every import statement of the packages, those inside functions and under
``if TYPE_CHECKING:`` included (a deferred import is still a dependency, and so is a type named
in annotations; deferring one only hides a cycle from Python):

1. **One stack.** ``tensor_ir`` <- ``schedules`` <- ``records`` <- ``cost_models`` <- ``search``
   <- ``autotune``: a package imports only from itself and the packages below it.
2. **No cycles.** The modules of the packages never import each other in a circle, whether the
   circle stays inside one package or not.
3. **No reaching into privates.** A module never takes another module's underscored name
   (``from m import _x`` or ``m._x``).
4. **One place knows the target kinds.** In ``autotune``, only ``autotune.backends`` compares
   a target's kind with "llvm", "cuda" or "opencl" or asks ``is_gpu``; the rest asks the
   target's backend.
5. **Settings travel as objects.** No function of the public API (what ``autotune``,
   ``search`` and ``records`` export in ``__all__``, the public methods of the classes they
   export, and ``autotune.tuning.tune.tuning_loop``) takes more than 12 parameters: past a handful,
   settings are grouped into frozen config objects checked where they are made.
6. **A folder says what it holds.** ``autotune``'s top level keeps only its public API
   (``__init__``, ``api``, ``cli``); the rest lives in the folders of its layers (``runtime``,
   ``measure``, ``backends``, ``graph``, ``frontends``, ``tuning``, ``accel``).
7. **One place probes devices.** Only ``tensor_ir.devices`` asks pycuda or pyopencl what the
   devices here are (``get_platforms()``, ``Device(0)``, ``get_driver_version()``, ...); the
   runtimes that compile and launch kernels import those libraries but ask it for a device.

Run ``python tests/test_architecture.py`` to print every violation with its file and line.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Bottom first; a package may import those before it in the list.
STACK = ("tensor_ir", "schedules", "records", "cost_models", "search", "autotune")
LEVEL = {name: i for i, name in enumerate(STACK)}


@dataclass(frozen=True)
class Import:
    module: str       # the importing module, dotted
    target: str       # the module imported from, dotted (resolved when relative)
    names: tuple      # names taken from it ("" for a plain ``import target``)
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> dict[str, Path]:
    out = {}
    for package in STACK:
        for path in sorted((ROOT / package).rglob("*.py")):
            out[module_name(path)] = path
    return out


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(module: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append(Import(module, alias.name, ("",), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            target = (_resolve(module, is_package, node.level, node.module) if node.level
                      else node.module or "")
            out.append(Import(module, target, tuple(a.name for a in node.names), node.lineno))
    return out


def _owner(target: str, modules: dict[str, Path]) -> str | None:
    """The module of ours that ``target`` names (a submodule import resolves to itself)."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def graph(modules: dict[str, Path]) -> tuple[dict[str, set[str]], list[Import]]:
    """Module -> modules it imports (ours only), and every import of ours.  ``from pkg import
    sub`` where ``sub`` is a submodule counts as an import of ``pkg.sub``, not of ``pkg``."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    found = []
    for module, path in modules.items():
        for imp in imports_of(module, path):
            owner = _owner(imp.target, modules)
            if owner is None:
                continue
            found.append(imp)
            targets = set()
            for name in imp.names:
                sub = f"{imp.target}.{name}" if name else ""
                targets.add(sub if sub in modules else owner)
            edges[module] |= {t for t in targets if t != module}
    return edges, found


def upward_imports(modules: dict[str, Path]) -> list[str]:
    _, found = graph(modules)
    out = []
    for imp in found:
        src, dst = imp.module.split(".")[0], imp.target.split(".")[0]
        if LEVEL[dst] > LEVEL[src]:
            out.append(f"{modules[imp.module].relative_to(ROOT)}:{imp.line}: {src} imports "
                       f"{imp.target} from above it")
    return out


def cycles(modules: dict[str, Path]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges, _ = graph(modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
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
                    out.append(sorted(component))
    return out


def private_uses(modules: dict[str, Path]) -> list[str]:
    """``from m import _x``, ``alias._x`` where ``alias`` is another module of ours, and
    ``obj._x`` where the module never defines ``_x`` itself (so the attribute belongs to an
    object of another module's class)."""
    out = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        aliases: dict[str, str] = {}
        foreign: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = (_resolve(module, is_package, node.level, node.module) if node.level
                          else node.module or "")
                if _owner(target, modules) is None:
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in modules:
                        aliases[alias.asname or alias.name] = sub
                    elif alias.name.startswith("_") and not alias.name.startswith("__"):
                        out.append(f"{path.relative_to(ROOT)}:{node.lineno}: takes "
                                   f"{alias.name} from {target}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.asname:
                        aliases[alias.asname] = alias.name
                for alias in node.names:
                    if _owner(alias.name, modules) is None:
                        foreign.add((alias.asname or alias.name).split(".")[0])
        own = _private_names_defined(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in aliases:
                if aliases[base.id] != module:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno}: uses "
                               f"{aliases[base.id]}.{node.attr}")
            elif isinstance(base, ast.Name) and base.id in {"self", "cls"} | foreign:
                continue
            elif node.attr not in own:
                # ``obj._x`` on an object of another module's class (``loop._resume``).
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: uses "
                           f"{ast.unparse(node)}, private to another module")
    return out


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_names_defined(tree: ast.Module) -> set[str]:
    """Underscored names a module defines itself: functions, classes, assigned names and
    attributes (``self._x = ...``), dataclass fields."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "setattr" and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant)):
            out.add(node.args[1].value)
    return {n for n in out if isinstance(n, str) and _is_private(n)}


# The public API whose signatures rule 5 bounds: the packages' ``__all__``, and functions
# beyond them that every tuning entry point goes through.
API_PACKAGES = ("autotune", "search", "records")
API_EXTRA = ("autotune.tuning.tune.tuning_loop",)
MAX_PARAMETERS = 12


def _all_names(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def _definition(module: str, name: str, modules: dict[str, Path], seen=()):
    """(defining module, FunctionDef or ClassDef) of ``name`` as ``module`` sees it, following
    ``from x import name`` re-exports; None for a submodule or a name defined elsewhere."""
    path = modules.get(module)
    if path is None or (module, name) in seen:
        return None
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return module, node
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            target = (_resolve(module, path.name == "__init__.py", node.level, node.module)
                      if node.level else node.module or "")
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _definition(target, alias.name, modules, (*seen, (module, name)))
    return None


def _parameter_count(func: ast.FunctionDef, method: bool) -> int:
    """Every parameter ``func`` takes (positional, keyword-only, ``*args``, ``**kwargs``),
    less ``self``/``cls`` of a method that is not a staticmethod."""
    args = func.args
    count = (len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
             + (args.vararg is not None) + (args.kwarg is not None))
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod"
                 for d in func.decorator_list)
    return count - (1 if method and not static and (args.posonlyargs or args.args) else 0)


def api_signatures(modules: dict[str, Path], extra=API_EXTRA) -> dict[str, int]:
    """Qualified name -> parameter count of each public API function and of each public
    method (``__init__`` included) written in the body of an exported class."""
    found: dict[str, tuple[str, ast.AST]] = {}
    for package in API_PACKAGES:
        init = ROOT / package / "__init__.py"
        for name in _all_names(ast.parse(init.read_text(), filename=str(init))):
            where = _definition(package, name, modules)
            if where is not None:
                found[f"{where[0]}.{where[1].name}"] = where
    for qualified in extra:
        module, _, name = qualified.rpartition(".")
        where = _definition(module, name, modules)
        if where is None:
            raise LookupError(f"{qualified} is not defined where the rule looks for it")
        found[qualified] = where
    out = {}
    for qualified, (_, node) in sorted(found.items()):
        if isinstance(node, ast.FunctionDef):
            out[qualified] = _parameter_count(node, method=False)
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and (item.name == "__init__"
                                                      or not item.name.startswith("_")):
                out[f"{qualified}.{item.name}"] = _parameter_count(item, method=True)
    return out


def wide_signatures(modules: dict[str, Path], extra=API_EXTRA) -> dict[str, int]:
    return {name: count for name, count in api_signatures(modules, extra).items()
            if count > MAX_PARAMETERS}


# -- the tests --------------------------------------------------------------------------------

def test_the_checker_sees_the_packages():
    modules = source_files()
    assert {m.split(".")[0] for m in modules} == set(STACK)
    edges, found = graph(modules)
    # Sanity: the stack's own spine is visible (a checker that reads nothing passes anything).
    assert "tensor_ir.func" in edges["schedules.schedule"] or any(
        e.startswith("tensor_ir") for e in edges["schedules.schedule"])
    assert len(found) > 300


def test_packages_import_only_downward():
    assert upward_imports(source_files()) == []


def test_no_import_cycles():
    assert cycles(source_files()) == []


def test_no_module_reaches_into_another_modules_privates():
    assert private_uses(source_files()) == []


# Where the target kinds may be told apart: the backends, and Target itself (which defines
# them).  Everything else asks autotune.backends.backend_for(target).
KIND_SWITCHES_ALLOWED = ("autotune.backends", "tensor_ir.target")
KINDS = {"llvm", "cuda", "opencl"}


def kind_switches(modules: dict[str, Path]) -> list[str]:
    """Comparisons of a ``.kind`` with a target kind's name (``target.kind == "cuda"``,
    ``t.kind in ("opencl", "cuda")``) and uses of ``.is_gpu``, in the autotune package
    outside the modules allowed to tell kinds apart."""
    out = []
    for module, path in modules.items():
        if not module.startswith("autotune") or module.startswith(KIND_SWITCHES_ALLOWED):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and node.attr == "is_gpu":
                out.append(f"{where}: {ast.unparse(node)}")
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if not any(isinstance(n, ast.Attribute) and n.attr == "kind" for n in sides):
                continue
            names = {c.value for n in sides for c in ast.walk(n)
                     if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            if names & KINDS:
                out.append(f"{where}: {ast.unparse(node)}")
    return out


def test_only_the_backends_tell_target_kinds_apart():
    assert kind_switches(source_files()) == []


def test_public_functions_take_at_most_twelve_parameters():
    signatures = api_signatures(source_files())
    # Sanity: the checker reads the entry points it guards (one that reads nothing passes).
    assert signatures["autotune.tuning.tune.tune"] <= MAX_PARAMETERS
    assert {"autotune.tuning.tune_model.tune_model", "autotune.tuning.tune.tuning_loop",
            "search.loop.TuningLoop.__init__", "records.database.Database.__init__"} \
        <= set(signatures)
    assert wide_signatures(source_files()) == {}


AUTOTUNE_TOP_LEVEL = {"autotune", "autotune.api", "autotune.cli"}
AUTOTUNE_FOLDERS = {"runtime", "measure", "backends", "graph", "frontends", "tuning", "accel"}


def loose_modules(modules: dict[str, Path]) -> list[str]:
    """Modules at autotune's top level beyond its API, and folders outside its layers."""
    out = []
    for module in modules:
        parts = module.split(".")
        if parts[0] != "autotune" or module in AUTOTUNE_TOP_LEVEL:
            continue
        if len(parts) == 2 and not modules[module].name == "__init__.py":
            out.append(f"{module}: a module at autotune's top level")
        elif parts[1] not in AUTOTUNE_FOLDERS:
            out.append(f"{module}: in a folder that is not one of autotune's layers")
    return sorted(set(out))


def test_autotune_keeps_its_modules_in_layer_folders():
    modules = source_files()
    assert {"autotune.runtime.executor", "autotune.tuning.tune_model"} <= set(modules)
    assert loose_modules(modules) == []


DEVICE_PROBES = {"get_platforms", "get_devices", "get_version", "get_driver_version",
                 "compute_capability", "total_memory", "Device"}


def device_probes(modules: dict[str, Path]) -> list[str]:
    """Calls of pycuda's and pyopencl's device queries outside ``tensor_ir.devices``."""
    out = []
    for module, path in modules.items():
        if module == "tensor_ir.devices":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in DEVICE_PROBES):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_only_tensor_ir_devices_probes_devices():
    assert device_probes(source_files()) == []


def test_checker_catches_planted_violations(tmp_path, monkeypatch):
    """The seven rules fire on a small tree that breaks each of them."""
    root = tmp_path
    for package in STACK:
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")
    (root / "tensor_ir" / "a.py").write_text("from autotune import api\nfrom .b import _x\n")
    (root / "tensor_ir" / "b.py").write_text(
        "def f(loop):\n    from . import a\n    return loop._step()\n_x = 1\n")
    (root / "tensor_ir" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import D\n")
    (root / "tensor_ir" / "d.py").write_text("from . import c\nclass D:\n    pass\n")
    (root / "autotune" / "api.py").write_text(
        "def f(target, group):\n    if target.kind == 'cuda' or target.is_gpu:\n"
        "        return group.kind == 'view'\n"
        "def g(cl):\n    return cl.get_platforms()\n")
    # Rule 5: an exported function and an exported class's method over 12 parameters; a
    # private helper and an unexported function of the same width are not the API's.
    (root / "autotune" / "__init__.py").write_text(
        "from .wide import Wide, wide\n__all__ = ['wide', 'Wide']\n")
    params = ", ".join(f"p{i}" for i in range(12))
    (root / "autotune" / "wide.py").write_text(
        f"def wide({params}, *, extra):\n    pass\n"
        f"def narrow({params}, q):\n    pass\n"
        f"class Wide:\n    def __init__(self, {params}):\n        pass\n"
        f"    def run(self, {params}, *rest):\n        pass\n"
        f"    def _helper(self, {params}, a, b):\n        pass\n"
        f"    @staticmethod\n    def make({params}):\n        pass\n")
    (root / "autotune" / "backends").mkdir()
    (root / "autotune" / "backends" / "__init__.py").write_text(
        "def f(target):\n    return target.kind in ('opencl', 'cuda')\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", root)
    modules = source_files()
    assert len(upward_imports(modules)) == 1
    assert cycles(modules) == [["tensor_ir.a", "tensor_ir.b"], ["tensor_ir.c", "tensor_ir.d"]]
    assert len(private_uses(modules)) == 2
    assert [p.split(": ", 1)[1] for p in kind_switches(modules)] == [
        "target.kind == 'cuda'", "target.is_gpu"]
    assert wide_signatures(modules, extra=()) == {"autotune.wide.wide": 13,
                                                  "autotune.wide.Wide.run": 13}
    assert api_signatures(modules, extra=())["autotune.wide.Wide.make"] == 12
    # Rule 6: wide.py sits at autotune's top level; backends is one of its folders.
    assert loose_modules(modules) == ["autotune.wide: a module at autotune's top level"]
    assert [p.split(": ", 1)[1] for p in device_probes(modules)] == ["cl.get_platforms()"]


if __name__ == "__main__":
    modules = source_files()
    problems = upward_imports(modules)
    print(f"upward imports: {len(problems)}")
    print("\n".join("  " + p for p in problems))
    found = cycles(modules)
    print(f"import cycles: {len(found)}")
    print("\n".join("  " + " <-> ".join(c) for c in found))
    problems = private_uses(modules)
    print(f"private names used across modules: {len(problems)}")
    print("\n".join("  " + p for p in problems))
    problems = kind_switches(modules)
    print(f"target kinds told apart outside the backends: {len(problems)}")
    print("\n".join("  " + p for p in problems))
    wide = wide_signatures(modules)
    print(f"public functions over {MAX_PARAMETERS} parameters: {len(wide)}")
    print("\n".join(f"  {name}: {count}" for name, count in wide.items()))
    problems = loose_modules(modules)
    print(f"autotune modules outside its layer folders: {len(problems)}")
    print("\n".join("  " + p for p in problems))
    problems = device_probes(modules)
    print(f"device probes outside tensor_ir.devices: {len(problems)}")
    print("\n".join("  " + p for p in problems))
