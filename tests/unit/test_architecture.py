"""The package's shape, checked from its source (docs/architecture.md): no import cycle, no
private name taken from another module, and the measuring child's code behind its boundary."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def modules(src: Path) -> dict[str, Path]:
    return {".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__"): p
            for p in (src / "gpuscout").rglob("*.py")}


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, list[str], bool]]:
    """(imported module, names taken from it, at module level?) for each gpuscout import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            if base.split(".")[0] != "gpuscout":
                continue
            for alias in node.names:  # `from package import module` names a module, not a name in it
                module = f"{base}.{alias.name}"
                found.append((module, [], id(node) in top_level) if module in known
                             else (base, [alias.name], id(node) in top_level))
        elif isinstance(node, ast.Import):
            found += [(a.name, [], id(node) in top_level) for a in node.names if a.name.startswith("gpuscout")]
    return found


def graph(known: dict[str, Path]) -> dict[str, set[str]]:
    edges = {}
    for name, path in known.items():
        deps = {target for target, _, _ in imports(name, path, known) if target in known and target != name}
        if path.name == "__init__.py":  # a package importing its own modules is not a cycle through them
            deps = {d for d in deps if not d.startswith(name + ".")}
        edges[name] = deps
    return edges


def cycles(edges: dict[str, set[str]]) -> list[str]:
    state, stack, found = {}, [], []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for dep in sorted(edges[node]):
            if state.get(dep) == "open":
                found.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def private_imports(known: dict[str, Path]) -> list[str]:
    return [f"{name} takes {target}.{n}" for name, path in known.items()
            for target, names, _ in imports(name, path, known) for n in names
            if n.startswith("_") and not n.endswith("__") and target != name]


# Where the training runs in gpuscout's own process: a notebook's kernel watched in-process uses
# the child's instrumentation there (and is the parent of its own record)
IN_PROCESS = ("gpuscout.watch.live",)


def child_crossings(known: dict[str, Path]) -> list[str]:
    """gpuscout.child runs in the measuring child. Outside it, only a workload's model-building
    function may import it (it runs in the child too), and never at module level; and the
    in-process watch, whose process is the one that trains."""
    return [f"{name} imports {target}" for name, path in known.items()
            if not name.startswith("gpuscout.child") and name not in IN_PROCESS
            for target, _, top_level in imports(name, path, known)
            if target.startswith("gpuscout.child") and (top_level or not name.startswith("gpuscout.workloads."))]


def test_no_import_cycle_anywhere_in_the_package():
    assert not cycles(graph(modules(SRC)))


def test_no_module_takes_another_modules_private_names():
    assert not private_imports(modules(SRC))


def test_only_the_child_package_imports_the_child_package():
    assert not child_crossings(modules(SRC))


def test_the_checks_see_a_cycle_a_private_name_and_a_crossing(tmp_path):
    pkg = tmp_path / "gpuscout"
    (pkg / "child").mkdir(parents=True)
    for name in ("__init__.py", "child/__init__.py", "child/worker.py"):
        (pkg / name).write_text("")
    (pkg / "a.py").write_text("from gpuscout import b\nfrom gpuscout.child import worker\n")
    (pkg / "b.py").write_text("def f():\n    from gpuscout.a import _secret\n")
    known = modules(tmp_path)
    assert cycles(graph(known)) == ["gpuscout.a -> gpuscout.b -> gpuscout.a"]
    assert private_imports(known) == ["gpuscout.b takes gpuscout.a._secret"]
    assert child_crossings(known) == ["gpuscout.a imports gpuscout.child.worker"]


def test_the_top_of_the_package_holds_only_packages():
    """Each verb a package, the shared code in core/: a module loose at the top is a verb or a
    shared module put in the wrong place (docs/architecture.md)."""
    loose = sorted(p.name for p in (SRC / "gpuscout").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == []


def test_help_leads_with_the_users_own_script():
    """`gpuscout --help` lists the verbs in a user's workflow: watch first, then tune (issue 29)."""
    from typer.testing import CliRunner

    from gpuscout.cli import app

    text = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "100"}).output
    commands = text[text.index("Commands"):]
    order = [commands.index(f"│ {verb} ") for verb in ("watch", "tune", "doctor", "recommend", "sweep", "bench")]
    assert order == sorted(order)
    assert text.index("gpuscout watch -- python train.py") < text.index("gpuscout bench resnet50")
    assert "Trustworthy training benchmarks" not in text
