"""Which commands a warm interpreter can serve and what it imports for them, read from the
script's source and never run (executor/warm.py starts the interpreters): `python SCRIPT ...`
only, and the frameworks the script imports at its top before any statement that could change
what those imports do, with the environment it sets as literals before them."""

from __future__ import annotations

import ast
import os
import re
import shutil
from pathlib import Path

from gpuscout.core.frameworks import FRAMEWORKS

PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


def python_script(argv: list[str], env: dict[str, str]) -> tuple[str, str] | None:
    """(the interpreter, the script) of `python SCRIPT ARGS...`; None for any other command."""
    if len(argv) < 2 or argv[1].startswith("-") or not os.path.isfile(argv[1]):
        return None
    python = shutil.which(argv[0], path=env.get("PATH"))
    if python is None or not PYTHON.fullmatch(os.path.basename(argv[0])):
        return None
    return python, argv[1]


Setting = tuple[str, str, bool]  # (variable, value, only if unset): os.environ[K] = V, or setdefault


def preloads(script: str) -> tuple[list[str], list[Setting]]:
    """The frameworks `script` imports before it runs anything that could change those imports,
    and the environment it sets as literals before them (`os.environ["KERAS_BACKEND"] = "jax"`),
    both in order. The scan stops at the first other statement, or at a literal setting that
    follows a framework's import (that import saw the environment without it)."""
    try:
        tree = ast.parse(Path(script).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return [], []
    modules: list[str] = []
    settings: list[Setting] = []
    for statement in tree.body:
        imports = _imports(statement)
        if imports is not None:
            modules += [m for m in imports if m in FRAMEWORKS and m not in modules]
            continue
        setting = _literal_setting(statement)
        if setting is not None:
            if modules:  # those imports saw the environment without it
                break
            settings.append(setting)
            continue
        definition = isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        if definition and not statement.decorator_list:  # a decorator runs code
            continue
        if isinstance(statement, ast.Expr | ast.Assign | ast.AnnAssign) and isinstance(statement.value, ast.Constant):
            continue  # a docstring, SEED = 0
        break
    if "keras" in modules and "tensorflow" not in modules:
        # Keras imports TensorFlow itself wherever it is installed, whatever the backend: to seed it
        # (keras.utils.set_random_seed), to read tf.data input; 0.9 s of each trial on 2 cores. The
        # zygote leaves it out where it is not installed.
        modules.append("tensorflow")
    return modules, settings


def with_settings(env: dict[str, str], settings: list[Setting]) -> dict[str, str]:
    """`env` as the script's literal settings leave it."""
    env = dict(env)
    for key, value, only_if_unset in settings:
        if not (only_if_unset and key in env):
            env[key] = value
    return env


def _imports(statement: ast.stmt) -> list[str] | None:
    """The top-level packages an import statement (or a `try:` of imports only) names."""
    if isinstance(statement, ast.Import):
        return [alias.name.split(".")[0] for alias in statement.names]
    if isinstance(statement, ast.ImportFrom):
        return [statement.module.split(".")[0]] if statement.level == 0 and statement.module else []
    if isinstance(statement, ast.Try) and not statement.orelse and not statement.finalbody:
        inner = [_imports(s) for s in statement.body]
        return None if any(i is None for i in inner) else [m for i in inner for m in i]
    return None


def _literal_setting(statement: ast.stmt) -> Setting | None:
    """(key, value, only if unset) of `os.environ[K] = V` or `os.environ.setdefault(K, V)` with
    string literals."""

    def is_environ(node: ast.expr) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)

    def text(node: ast.expr) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        if isinstance(target, ast.Subscript) and is_environ(target.value):
            key, value = text(target.slice), text(statement.value)
            return (key, value, False) if key is not None and value is not None else None
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        call = statement.value
        if isinstance(call.func, ast.Attribute) and call.func.attr == "setdefault" and is_environ(call.func.value):
            if len(call.args) == 2 and not call.keywords:
                key, value = text(call.args[0]), text(call.args[1])
                return (key, value, True) if key is not None and value is not None else None
    return None
