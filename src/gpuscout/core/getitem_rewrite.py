"""A PyDataset's `__getitem__` rewritten from its source to hand its images as read: the return
gives `self.<images>[<indices>]` in place of the images it made, and every statement whose result
then reaches nothing is left out (tune's augment_inline, issue 77). The same rewrite runs in the
watched script (child/inline_augment.py compiles it into the dataset's class) and in the parent
(tune/changes/augment_inline.py writes it as the patch), on the file's original text: what was
measured is what is handed over. Standard library only (the child imports it in the user's
interpreter).
"""

from __future__ import annotations

import ast
import copy as copy_module
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Rewrite:
    """The edits that make `__getitem__` return its images as read: statements left out (their
    file lines, inclusive) and the returned images' source span replaced by `text`."""

    removed: tuple[tuple[int, int], ...]
    replaced: tuple[int, int, int, int]  # line, column, end line, end column (ast's, 1-based lines)
    text: str

    def applied(self, lines: list[str], first: int) -> str:
        """The function's source (`lines` of the file from line `first`, 1-based) with the edits made."""
        out: list[str | None] = list(lines)
        line, col, end_line, end_col = self.replaced
        head, tail = lines[line - first], lines[end_line - first]
        out[line - first] = _utf8_cut(head, col)[0] + self.text + _utf8_cut(tail, end_col)[1]
        for n in range(line + 1, end_line + 1):
            out[n - first] = None
        for start, end in self.removed:
            for n in range(start, end + 1):
                out[n - first] = None
        return "".join(text for text in out if text is not None)


def _utf8_cut(text: str, col: int) -> tuple[str, str]:
    """`text` split at ast's column, which counts UTF-8 bytes."""
    raw = text.encode()
    return raw[:col].decode(), raw[col:].decode()


def names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _target_names(target: ast.expr) -> set[str]:
    """The local names an assignment target binds or changes (out[k] = ... changes out)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(t) for t in target.elts))
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    if isinstance(target, (ast.Subscript, ast.Attribute)):
        base = target.value
        while isinstance(base, (ast.Subscript, ast.Attribute)):
            base = base.value
        return {base.id} if isinstance(base, ast.Name) else {"<effect>"}
    return {"<effect>"}


def _effects(statement: ast.stmt, self_name: str) -> set[str] | None:
    """The local names a simple statement binds or changes, or None where it does more (changes
    the dataset, calls a function for what it does, returns): such a statement is always kept."""
    if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        bound = set().union(*(_target_names(t) for t in targets))
    elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        # a method of a local (out.append(x), rng.shuffle(a)): it changes that local and the locals
        # it is given; a bare function's call (print, the script's own) is kept
        call = statement.value
        if not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)):
            return None
        bound = {call.func.value.id} | set().union(*(names(a) for a in [*call.args, *call.keywords]))
    else:  # a docstring, a pass, a return or yield, a raise: kept
        return None
    return None if self_name in bound or "<effect>" in bound else bound


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of `body`, those inside its for loops and ifs too (a while, with or try is
    one statement, kept whole)."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.For, ast.While)) and not statement.orelse:
            yield from _statements(statement.body)
        elif isinstance(statement, ast.If):
            yield from _statements(statement.body)
            yield from _statements(statement.orelse)


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _rebinds(statement: ast.stmt) -> set[str]:
    """The names a kept statement binds anew (x = ...), which no earlier value of reaches past it."""
    if isinstance(statement, ast.Assign):
        return {
            n.id
            for t in statement.targets
            for n in ast.walk(t)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value is not None:
        return {statement.target.id}
    return set()


def _backward(body: list[ast.stmt], live: set[str], self_name: str, dead: set[int]) -> set[str]:
    """The names live before `body` given those live after it (read later), each statement that
    binds or changes only names no later statement reads added to `dead` (by id): the classic
    backward liveness, a loop's body run to a fixed point (what its start reads is live at its end,
    for the next turn); a loop or an if whose statements are all dead is dead itself."""
    live = set(live)
    for statement in reversed(body):
        if isinstance(statement, (ast.For, ast.While)) and not statement.orelse:
            head = set(live)
            while True:
                inner: set[int] = set()
                before = _backward(statement.body, head, self_name, inner)
                if live | before == head:
                    break
                head = live | before
            target = _target_names(statement.target) if isinstance(statement, ast.For) else set()
            if all(id(s) in inner for s in statement.body) and not (target & live):
                dead.update(inner | {id(statement)})
            else:
                dead.update(inner)
                live = head | _loads(statement.iter if isinstance(statement, ast.For) else statement.test)
        elif isinstance(statement, ast.If):
            inner = set()
            branches = _backward(statement.body, live, self_name, inner) | _backward(
                statement.orelse, live, self_name, inner
            )
            if all(id(s) in inner for s in [*statement.body, *statement.orelse]):
                dead.update(inner | {id(statement)})
            else:
                dead.update(inner)
                live = branches | _loads(statement.test)
        else:
            bound = _effects(statement, self_name)
            if bound is not None and not (bound & live):
                dead.add(id(statement))
            else:
                live = (live - _rebinds(statement)) | _loads(statement)
    return live


def _prune(body: list[ast.stmt], live: set[str], self_name: str) -> list[ast.stmt]:
    """The statements of `body` (at any depth) whose results reach nothing read after it."""
    dead: set[int] = set()
    _backward(body, live, self_name, dead)
    return [s for s in _statements(body) if id(s) in dead]


def _whole_lines(statement: ast.stmt, lines: list[str], first: int) -> bool:
    """Whether the statement has its lines to itself (no `a = 1; b = 2`)."""
    start, end = statement.lineno - first, (statement.end_lineno or statement.lineno) - first
    before = lines[start].encode()[: statement.col_offset].decode()
    after = lines[end].encode()[statement.end_col_offset or 0 :].decode().strip()
    return not before.strip() and (not after or after.startswith("#"))


def handed(function: ast.FunctionDef) -> ast.Return | ast.Yield | str:
    """The one place `function` hands its batch: a `__getitem__`'s return on its last line, or a
    generator's one `yield` (in its loop); or why it cannot be told."""
    nested = {
        id(n)
        for d in ast.walk(function)
        if d is not function and isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef)
        for n in ast.walk(d)
    }
    own = [n for n in ast.walk(function) if id(n) not in nested]
    yields = [n for n in own if isinstance(n, (ast.Yield, ast.YieldFrom))]
    if yields:
        statements = [n for n in own if isinstance(n, ast.Expr) and n.value in yields]
        if len(yields) != 1 or not isinstance(yields[0], ast.Yield) or len(statements) != 1 or yields[0].value is None:
            return "the generator yields in more than one place: which yield hands the images cannot be told"
        return yields[0]
    returns = [n for n in own if isinstance(n, ast.Return)]
    if len(returns) != 1 or function.body[-1] is not returns[0] or returns[0].value is None:
        return "__getitem__ returns from more than its last line: which return hands the images cannot be told"
    return returns[0]


def rewrite(function: ast.FunctionDef, images: str, lines: list[str], first: int = 1) -> Rewrite | str:
    """The edits that make `function` (a `__getitem__`, or a generator) hand `images` (source
    text, such as "self.x[idx]") in place of the images it returns or yields, and leave out what
    then reaches nothing; or why it cannot be rewritten. `lines` are the file's, the function's
    from line `first`. A statement that changes `self` (the first parameter, where it is so named
    or the function is a method) is always kept."""
    if not function.args.args:
        return "it takes no arguments"
    self_name = (
        function.args.args[0].arg
        if function.args.args[0].arg in ("self", "cls") or function.name == "__getitem__"
        else ""
    )
    where = handed(function)
    if isinstance(where, str):
        return where
    value = where.value
    assert value is not None  # handed() refuses a bare return or yield
    batch = isinstance(value, ast.Tuple) and len(value.elts) >= 2
    element = value.elts[0] if isinstance(value, ast.Tuple) and batch else value
    if isinstance(element, ast.Starred):
        return "it hands the images unpacked (*...)"
    # liveness on a copy whose batch holds `images` in place of the images made: what only made them
    # then reaches nothing (the copy keeps every node's lines, which are the file's)
    copy = copy_module.deepcopy(function)
    spot = next(
        n
        for n in ast.walk(copy)
        if isinstance(n, type(where)) and (n.lineno, n.col_offset) == (where.lineno, where.col_offset)
    )
    replacement = ast.parse(images, mode="eval").body
    if isinstance(spot.value, ast.Tuple) and batch:
        spot.value.elts[0] = replacement
    else:
        spot.value = replacement
    left_out = _prune(copy.body, set(), self_name)
    gone = {id(s) for s in left_out}
    for block in _statements(copy.body):
        for inner in (
            (block.body, block.orelse)
            if isinstance(block, (ast.For, ast.While, ast.If)) and id(block) not in gone
            else ()
        ):
            if inner and all(id(s) in gone for s in inner):
                return f"the block on line {block.lineno} would be left with nothing"
    # a statement inside one left out goes with it: only the outermost are edited
    inside = {id(n) for s in left_out for n in ast.walk(s) if n is not s}
    left_out = [s for s in left_out if id(s) not in inside]
    for statement in left_out:
        if not _whole_lines(statement, lines, first):
            return f"line {statement.lineno} holds more than one statement"
    return Rewrite(
        removed=tuple(sorted((s.lineno, s.end_lineno or s.lineno) for s in left_out)),
        replaced=(
            element.lineno,
            element.col_offset,
            element.end_lineno or element.lineno,
            element.end_col_offset or 0,
        ),
        text=images,
    )


def function_at(tree: ast.Module, line: int) -> ast.FunctionDef | None:
    """The function defined at `line` (its def, or one of its decorators), anywhere in the file."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.FunctionDef)
            and min([node.lineno, *(d.lineno for d in node.decorator_list)]) <= line <= node.lineno
        ):
            return node
    return None
