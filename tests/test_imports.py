"""pelib's import graph: no cycles, no import up a floor, and no function-local import of a pelib module
without a comment saying why.

The graph is read from the sources (ast), so an import hidden inside a function counts like one at
the top: a cycle held together by a local import is still a cycle.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

PELIB = Path(__file__).resolve().parents[1] / "src" / "pelib"


def _module(path: Path) -> str:
    rel = path.relative_to(PELIB.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# The floors of the house, bottom to top (DESIGN: paths and device at the ground, views at the top): a
# module imports from its own floor or below. A module not named here is on the library floor; one that
# runs stages (imports pelib.stage) is named on the floor above it.
FLOORS = {
    "ground": ("pelib.paths", "pelib.clock", "pelib.evidence", "pelib.cache", "pelib.isa.elf", "pelib.isa.sass",
               "pelib.isa.descriptors", "pelib.reference", "pelib.isa.limits", "pelib.notebook", "pelib.device"),
    "library": (),
    "stage": ("pelib.stage",),
    "runs": ("pelib.sim.host", "pelib.sim.runs", "pelib.sim.catalog", "pelib.sim.proof", "pelib.measure",
             "pelib.views.readme", "pelib.models.pipeline",
             "pelib.predict"),   # the timing model replays a simulated run of the stage (pelib.sim.host)
    "views": ("pelib.views", "pelib.exercises"),   # exercises: the chapters' graded edits, drawn by views.sim
}


# an import the graph cannot see: importlib or __import__ of pelib (a literal name, or a variable holding one)
DYNAMIC = re.compile(r"""(?:import_module|__import__)\(\s*(?:f?["'](?:pelib\b|\.)|[a-z_]+\))""")


def floor(mod: str) -> int:
    """The floor of a module: the deepest FLOORS entry that names it or a package above it."""
    names = list(FLOORS)
    for i, name in reversed(list(enumerate(names))):
        if any(mod == m or mod.startswith(m + ".") for m in FLOORS[name]):
            return i
    return names.index("library")


def upward(edges) -> list[str]:
    """'a -> b (floor x -> y)' for every import of a module on a higher floor."""
    names = list(FLOORS)
    return [f"{a} -> {b} ({names[floor(a)]} -> {names[floor(b)]})" for a, ts in sorted(edges.items())
            for b in sorted(ts) if floor(b) > floor(a)]


def _targets(node, mod: str, is_pkg: bool, modules: set[str]) -> list[str]:
    """The pelib modules an import statement names (a package's submodule when it names one)."""
    out = []
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.name.startswith("pelib"):
                out.append(a.name)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = mod.split(".") if is_pkg else mod.split(".")[:-1]
            base = base[:len(base) - node.level + 1]
            pkg = ".".join(base + ([node.module] if node.module else []))
        else:
            pkg = node.module or ""
        if not pkg.startswith("pelib"):
            return out
        for a in node.names:
            sub = f"{pkg}.{a.name}"
            out.append(sub if sub in modules else pkg)
    return [t for t in out if t in modules]


def graph():
    """{module: {imported module: [(line, local?)]}} and the local imports without a 'why' comment."""
    files = sorted(PELIB.rglob("*.py"))
    modules = {_module(p) for p in files}
    edges: dict[str, dict[str, list]] = {m: {} for m in modules}
    bare_local = []
    for p in files:
        mod = _module(p)
        src = p.read_text()
        lines = src.splitlines()
        tree = ast.parse(src)
        funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        local_ids = {id(n) for f in funcs for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for t in _targets(node, mod, p.name == "__init__.py", modules):
                if t == mod:
                    continue
                local = id(node) in local_ids
                edges[mod].setdefault(t, []).append((node.lineno, local))
                if local and "#" not in lines[node.lineno - 1] and "#" not in lines[node.lineno - 2]:
                    bare_local.append(f"{p.relative_to(PELIB.parent)}:{node.lineno} imports {t}")
    return edges, bare_local


def cycles(edges) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def figures() -> dict:
    edges, bare = graph()
    n_local = len({(m, line) for m, ts in edges.items() for uses in ts.values() for line, loc in uses if loc})
    return {"modules": len(edges), "edges": sum(len(m) for m in edges.values()), "cycles": cycles(edges),
            "upward imports": upward(edges), "local imports": n_local, "local imports without a why": bare}


def test_no_import_cycles():
    cyc = cycles(graph()[0])
    assert cyc == [], f"pelib has import cycles: {cyc}"


def test_the_cycle_check_can_fail():
    edges = {"a": {"b": []}, "b": {"c": []}, "c": {"a": []}, "d": {"a": []}}
    assert cycles(edges) == [["a", "b", "c"]]


def test_no_import_runs_up_a_floor():
    up = upward(graph()[0])
    assert up == [], ("imports that run up the floors of tests/test_imports.py FLOORS (move the shared part down, "
                      "or name the module on its floor):\n  " + "\n  ".join(up))


def test_the_floor_check_can_fail():
    assert DYNAMIC.search('importlib.import_module("pelib.sim")') and DYNAMIC.search("import_module(name)")
    assert not DYNAMIC.search('__import__("torch")')
    assert upward({"pelib.device": {"pelib.views.html": []}, "pelib.views.sim": {"pelib.stage": []}}) == [
        "pelib.device -> pelib.views.html (ground -> views)"]
    assert floor("pelib.kinds.fp8") == floor("pelib.timing") == list(FLOORS).index("library")


def test_no_importlib_imports_of_pelib():
    """Every import of a pelib module is an import statement the graph sees (no importlib, no __import__)."""
    hits = [f"{p.relative_to(PELIB.parent)}:{n}" for p in sorted(PELIB.rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if DYNAMIC.search(line)]
    assert hits == [], hits


def test_function_local_pelib_imports_say_why():
    _, bare = graph()
    assert bare == [], ("function-local imports of pelib modules without a comment saying why "
                        "(move them to the top of the module):\n  " + "\n  ".join(bare))


def test_family_adapters_stay_small():
    """What only one family needs lives in pelib/kinds/<family>.py; together they stay within 800 lines
    (the generic path is pelib.stage and kinds/base.py), so a family cannot grow its own host path again."""
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PELIB / "kinds").glob("*.py")
             if p.name not in ("__init__.py", "base.py")}
    assert set(sizes) == {"fp8.py", "nvfp4.py", "sm90.py"}, sizes
    assert sum(sizes.values()) <= 800, sizes


def test_the_front_door_stays_small():
    """At most 25 modules at pelib's top level (the front door); every other module lives in the package of its
    job, and every package says in its docstring what it holds."""
    top = sorted(p.stem for p in PELIB.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 25, f"{len(top)} top-level modules of pelib (at most 25): move one into its room: {top}"
    for pkg in sorted(p.parent for p in PELIB.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text()))
        assert doc and len(doc) > 20, f"pelib/{pkg.name}/__init__.py says nothing of what the package holds"


def test_a_long_module_says_why():
    """A module over 700 lines says why in its docstring ("Over 700 lines: ..."), or it is split."""
    long = [p for p in sorted(PELIB.rglob("*.py")) if len(p.read_text().splitlines()) > 700]
    bare = [str(p.relative_to(PELIB)) for p in long
            if "Over 700 lines:" not in (ast.get_docstring(ast.parse(p.read_text())) or "")]
    assert not bare, f"modules over 700 lines whose docstring gives no reason: {bare}"


if __name__ == "__main__":  # python tests/test_imports.py: the figures the README quotes
    import json
    print(json.dumps(figures(), indent=1))
