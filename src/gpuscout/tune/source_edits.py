"""Edits of a Python file's text at the positions `ast` gives: a keyword set or replaced in a call,
an argument wrapped, a statement inserted before or after the one holding a call (or after the
block around it), a definition after the imports; applied from the end backwards so the rest of
the file stays byte for byte, and the result must parse. The primitives of tune's patch
(tune/patch.py says which change is written where)."""

from __future__ import annotations

import ast
import re


class NotLocated(Exception):
    pass


# an edit of the original text: (start, end, new text, order among edits at one place)
Edit = tuple[int, int, str, int]
order = iter(range(10**9))


def before_statement(text: str, call: ast.Call, code: str) -> list[Edit]:
    """`code` as a statement of its own before the one that holds `call`, at its indentation."""
    statement = holding_statement(text, call)
    where = offsets(text)[statement.lineno - 1]
    return [(where, where, f"{' ' * statement.col_offset}{code}\n", next(order))]


def holding_statement(text: str, call: ast.Call) -> ast.stmt:
    """The simple statement that holds `call` (not the block around it)."""
    holders = [
        n
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.stmt)
        and not isinstance(
            n,
            (
                ast.FunctionDef,
                ast.AsyncFunctionDef,
                ast.ClassDef,
                ast.If,
                ast.For,
                ast.While,
                ast.With,
                ast.Try,
                ast.AsyncFor,
                ast.AsyncWith,
            ),
        )
        and n.lineno <= call.lineno
        and (n.end_lineno or n.lineno) >= (call.end_lineno or call.lineno)
    ]
    if not holders:
        raise NotLocated(f"the compile call on line {call.lineno} is not a statement of its own")
    return max(holders, key=lambda n: n.lineno)


def after_statement(text: str, call: ast.Call, code: str) -> list[Edit]:
    """`code` as a statement of its own after the one that holds `call`, at its indentation."""
    statement = holding_statement(text, call)
    starts = offsets(text)
    where = starts[statement.end_lineno]
    indent = " " * statement.col_offset
    glue = "" if text[:where].endswith("\n") else "\n"
    return [(where, where, f"{glue}{indent}{code}\n", next(order))]


def after_block(text: str, call: ast.Call, code: str) -> list[Edit]:
    """`code` after the statement that holds `call`, or after the if, for, while, with or try
    around it, up to the body of the function or module it is in, at that statement's indentation:
    a line after a conditional call runs whether or not the condition held (H100: the policy
    written inside the script's `if BY_HAND:` never ran, and the patched copy trained in float32)."""
    tree = ast.parse(text)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    statement = holding_statement(text, call)
    statement = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.stmt)
        and n.lineno == statement.lineno
        and n.col_offset == statement.col_offset
        and type(n) is type(statement)
    )
    while not isinstance(parents.get(statement), (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)):
        statement = parents[statement]
    where = offsets(text)[statement.end_lineno]
    glue = "" if text[:where].endswith("\n") else "\n"
    return [(where, where, f"{glue}{' ' * statement.col_offset}{code}\n", next(order))]


def call_at(text: str, line: int, method: str) -> ast.Call:
    """The call of `.method(...)` (or `method(...)`) that spans `line`."""
    found = [
        n
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Call) and name_of(n.func) == method and n.lineno <= line <= (n.end_lineno or n.lineno)
    ]
    if not found:
        raise NotLocated(f"no {method}(...) call on line {line}")
    return max(found, key=lambda n: n.lineno)  # the innermost


def name_of(func) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def offsets(text: str) -> list[int]:
    starts, total = [], 0
    for line in text.splitlines(keepends=True):
        starts.append(total)
        total += len(line)
    return starts + [total]


def at(text: str, starts: list[int], line: int | None, col: int | None) -> int:
    """A character offset from ast's line (1-based) and column (UTF-8 bytes); NotLocated where ast
    gave none (a node made, not parsed)."""
    if line is None or col is None:
        raise NotLocated("a call's position in the source was not given")
    row = text[starts[line - 1] : starts[line]] if line < len(starts) else text[starts[line - 1] :]
    return starts[line - 1] + len(row.encode()[:col].decode(errors="ignore"))


def set_keywords(text: str, call: ast.Call, values: dict[str, str]) -> list[Edit]:
    """`call` with each keyword set to its value: replaced where given, added before `)` where not."""
    starts = offsets(text)
    edits = []
    missing = dict(values)
    for keyword in call.keywords:
        if keyword.arg in missing:
            v = keyword.value
            edits.append(
                (
                    at(text, starts, v.lineno, v.col_offset),
                    at(text, starts, v.end_lineno, v.end_col_offset),
                    missing.pop(keyword.arg),
                    next(order),
                )
            )
    forwarded = [k.value for k in call.keywords if k.arg is None]
    if missing and forwarded:
        # `super().__init__(**kwargs)`, as Keras' guides write a PyDataset (issue 86): each keyword set
        # in the mapping the call forwards, over whatever the caller put there, so that a caller who
        # passes it too is not a "multiple values" TypeError
        mapping = forwarded[-1]
        source = ast.get_source_segment(text, mapping) or ""
        if not isinstance(mapping, ast.Name | ast.Attribute | ast.Call | ast.Subscript):
            source = f"({source})"
        merged = ", ".join(f"{k!r}: {v}" for k, v in missing.items())
        start, stop = _span(text, starts, mapping)
        edits.append((start, stop, f"{{**{source}, {merged}}}", next(order)))
    elif missing:
        end = at(text, starts, call.end_lineno, call.end_col_offset) - 1  # the `)`
        before = text[:end].rstrip()
        added = ", ".join(f"{k}={v}" for k, v in missing.items())
        empty = not call.args and not call.keywords
        glue = "" if empty else (" " if before.endswith(",") else ", ")
        edits.append((len(before), len(before), glue + added, next(order)))
    return edits


def wrap_input(text: str, call: ast.Call, wrap: str) -> list[Edit]:
    """fit's first argument (or x=) wrapped: `wrap` with {} for it."""
    node = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "x"), None)
    if node is None:
        raise NotLocated("fit is given no input to wrap")
    starts = offsets(text)
    start = at(text, starts, node.lineno, node.col_offset)
    end = at(text, starts, node.end_lineno, node.end_col_offset)
    before, after = wrap.split("{}")
    # a later wrap goes outside an earlier one: its opening first, its closing last
    return [(start, start, before, -next(order)), (end, end, after, next(order))]


def _span(text: str, starts: list[int], node: ast.AST) -> tuple[int, int]:
    return at(text, starts, node.lineno, node.col_offset), at(text, starts, node.end_lineno, node.end_col_offset)


def drop_keywords(text: str, call: ast.Call, names: set[str]) -> list[Edit]:
    """`call` without its keywords in `names`, each with the comma before it (or, the first of the
    call's arguments, the one after it)."""
    starts = offsets(text)
    items = sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))
    edits = []
    for i, item in enumerate(items):
        if not isinstance(item, ast.keyword) or item.arg not in names:
            continue
        start, end = _span(text, starts, item)
        if i:  # from the end of the one before: its comma and what follows
            start = _span(text, starts, items[i - 1])[1]
        elif i + 1 < len(items):  # the first: up to the next one
            end = _span(text, starts, items[i + 1])[0]
        edits.append((start, end, "", next(order)))
    return edits


def replace_arrays(text: str, call: ast.Call, code: str) -> list[Edit]:
    """fit's x and y (its first two arguments, or x= and y=) replaced by `code`, given as its x;
    `code` holds {x} and {y} for their source."""
    starts = offsets(text)
    keywords = {k.arg: k for k in call.keywords}
    x = call.args[0] if call.args else keywords["x"].value if "x" in keywords else None
    y = call.args[1] if len(call.args) > 1 else keywords["y"].value if "y" in keywords else None
    if x is None or y is None or any(isinstance(a, ast.Starred) for a in call.args[:2]):
        raise NotLocated("fit's x and y are not written as its arguments")
    made = code.format(x=ast.get_source_segment(text, x), y=ast.get_source_segment(text, y))
    if len(call.args) > 1:  # fit(x, y, ...): both replaced by one
        return [(_span(text, starts, x)[0], _span(text, starts, y)[1], made, next(order))]
    start, end = _span(text, starts, x)
    edits = [(start, end, made, next(order))]
    if "y" in keywords:
        edits += drop_keywords(text, call, {"y"})
    return edits


def ensure_import(text: str, module: str) -> list[Edit]:
    """`import module` after the file's imports, where it does not import it by that name."""
    tree = ast.parse(text)
    if any(
        isinstance(n, ast.Import) and any(a.name == module and a.asname is None for a in n.names) for n in tree.body
    ):
        return []
    return insert_after_imports(text, f"import {module}", need_keras=False)


def _defined(tree: ast.Module, name: str) -> ast.AST | None:
    return next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name), None)


def _is(node: ast.AST, code: str) -> bool:
    """Whether a definition in the file is `code`'s own (the same tree, formatting aside)."""
    return ast.dump(node) == ast.dump(ast.parse(code).body[0])


def own_name(text: str, name: str, code: str) -> tuple[str, str]:
    """The name gpuscout's definition `code` of `name` goes by in `text`, and the code to write: its
    own, unless the file defines something else by that name (a user's own `read_ahead`, whose
    signature is not ours), then gpuscout_<name>."""
    there = _defined(ast.parse(text), name)
    if there is None or _is(there, code):
        return name, code
    renamed = f"gpuscout_{name}"
    return renamed, re.sub(rf"\b(def|class) {name}\b", rf"\1 {renamed}", code, count=1)


def _last_import(tree: ast.Module, need_keras: bool) -> ast.stmt | None:
    """The last import of the file's head, the statements before its first definition (a def or a
    class): what follows it is the script's own code, so a definition written there leaves no
    import after it (ruff's E402), and keras, where it is needed, is imported above it."""
    first_def = min(
        (n.lineno for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))),
        default=10**9,
    )
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    head = [n for n in imports if n.lineno < first_def] or imports
    keras = [
        n for n in imports if any(a.asname in (None, "keras") and a.name.split(".")[-1] == "keras" for a in n.names)
    ]
    if need_keras:
        if not keras:
            raise NotLocated("the file does not import keras by that name at its top")
        return max([keras[0], *(n for n in head if n.lineno > keras[0].lineno)], key=lambda n: n.lineno)
    return head[-1] if head else None


def insert_after_imports(text: str, code: str, need_keras: bool, name: str | None = None) -> list[Edit]:
    """`code` after the last import of the file's head (_last_import; where keras is needed, after
    its import too); our definition already there (a file patched before) is not written twice,
    and one of the user's by the same name is an error (own_name gives ours another)."""
    tree = ast.parse(text)
    there = _defined(tree, name) if name else None
    if there is not None:
        if _is(there, code):
            return []
        raise NotLocated(f"the script defines its own {name}, which gpuscout's {name} would replace")
    anchor = _last_import(tree, need_keras)
    starts = offsets(text)
    where = starts[anchor.end_lineno] if anchor is not None else 0
    if anchor is not None and where == starts[-1] and not text.endswith("\n"):
        code = "\n" + code
    if "\n" not in code:
        return [(where, where, f"{code}\n", next(order))]
    blank = len(text[where:]) - len(text[where:].lstrip("\n"))  # blank lines already after the anchor
    return [(where, where, f"\n\n{code}\n" + "\n" * max(0, 2 - blank), next(order))]


def apply(text: str, edits: list[Edit]) -> str:
    """The edits applied from the end backwards; at one place, in the order they were made."""
    for start, end, new, _ in sorted(edits, key=lambda e: (e[0], e[1], e[3]), reverse=True):
        text = text[:start] + new + text[end:]
    try:
        ast.parse(text)
    except SyntaxError as exc:
        raise NotLocated(f"the edit would not parse ({exc.msg}, line {exc.lineno})") from None
    return text
