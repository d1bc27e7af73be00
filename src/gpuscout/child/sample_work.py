"""Where a PyDataset's `__getitem__` spends its time: its lines, and the script's own function it
calls once per sample (an `augment(image)`), with that function told as Keras layers where it
only flips, crops, shifts and rescales (child/augment_match.py). What tune's
`augment_in_model` moves onto the device, or, where it cannot, the exact lines it names.

A few `__getitem__` calls (PROFILED_CALLS, after the first) run under `sys.settrace` in whichever
worker thread makes them, one at a time: line events in `__getitem__`'s own frame only, and a
call and return of each function of the script's files it calls (directly or from a
comprehension). Everything else runs untraced. The function is then called again TRIES times on
an input it was given, at the fit's end, after the timed steps. Only the standard library and
numpy are imported.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import sysconfig
import threading
import time
from collections import defaultdict

from gpuscout.child.watch_state import report_failure

PROFILED_CALLS = 3
# A function called from __getitem__ that takes at least this share of its time is its work
SAMPLE_WORK_SHARE = 0.3
COMPREHENSIONS = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>")


@functools.cache
def _not_the_scripts() -> tuple[str, ...]:
    """The folders of installed packages and of Python itself, and gpuscout's own."""
    paths = sysconfig.get_paths()
    folders = {paths.get(k) for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    folders.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return tuple(os.path.abspath(f) + os.sep for f in folders if f)


@functools.lru_cache(maxsize=4096)
def is_scripts(filename: str) -> bool:
    return not filename.startswith("<") and not os.path.abspath(filename).startswith(_not_the_scripts())


class SampleWork:
    """Profiles `dataset`'s `__getitem__` for PROFILED_CALLS calls once installed."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset
        self.owner = type(dataset)
        self.original = self.owner.__dict__.get("__getitem__") or self.owner.__getitem__
        self.code = getattr(self.original, "__code__", None)
        self.lock = threading.Lock()
        self.calls = 0  # __getitem__ calls seen
        self.profiled = 0
        self.getitem_s = 0.0
        self.line_s: dict[int, float] = defaultdict(float)
        self.function_s: dict = defaultdict(float)  # code -> seconds, inclusive
        self.function_calls: dict = defaultdict(int)
        self.call_lines: dict = {}  # code -> the __getitem__ line that called it
        self.captured: dict = {}  # code -> (the function's arguments by name) of its first call
        self.installed = False

    @classmethod
    def watching(cls, dataset) -> SampleWork | None:
        """`dataset`'s calls profiled from now on, or None where they cannot be."""
        work = cls(dataset)
        return None if work.install() else work

    def finish(self, tell: bool) -> dict | None:
        """After the timed steps: the class's own __getitem__ back, and the facts (`tell`: the hot
        function called again to tell it as layers); a failure here is gpuscout's, reported once."""
        self.uninstall()
        try:
            return self.facts(tell=tell)
        except Exception as exc:
            report_failure("reading where the PyDataset spends its time", exc)
            return None

    def install(self) -> str | None:
        """The class's __getitem__ wrapped, or why not."""
        if self.code is None or not is_scripts(self.code.co_filename):
            return "the PyDataset's __getitem__ is not the script's own"
        if sys.gettrace() is not None:
            return "another tracer (a debugger, coverage) is on"
        work = self

        def __getitem__(dataset, index):
            if dataset is not work.dataset or work.profiled >= PROFILED_CALLS or sys.gettrace() is not None:
                return work.original(dataset, index)
            work.calls += 1
            if work.calls == 1 or not work.lock.acquire(blocking=False):  # the first: imports, caches
                return work.original(dataset, index)
            try:
                return work.traced(dataset, index)
            finally:
                work.profiled += 1
                work.lock.release()

        self.owner.__getitem__ = __getitem__
        self.installed = True
        return None

    def uninstall(self) -> None:
        if self.installed:
            if "__getitem__" in self.owner.__dict__ and self.owner.__dict__["__getitem__"] is not self.original:
                self.owner.__getitem__ = self.original
            self.installed = False

    def traced(self, dataset, index):
        state = {"frame": None, "line": None, "at": 0.0}
        starts: dict = {}

        def on_line(frame, event, arg):
            now = time.perf_counter()
            if state["line"] is not None:
                self.line_s[state["line"]] += now - state["at"]
            state["line"], state["at"] = (None if event == "return" else frame.f_lineno), now
            return on_line

        def on_return(frame, event, arg):
            if event == "return" and frame in starts:
                code = frame.f_code
                self.function_s[code] += time.perf_counter() - starts.pop(frame)
            return on_return

        def on_call(frame, event, arg):
            code = frame.f_code
            if state["frame"] is None and code is self.code:
                state["frame"] = frame
                return on_line
            parent = frame.f_back
            if parent is not None and parent.f_code.co_name in COMPREHENSIONS:
                parent = parent.f_back
            if parent is None or parent is not state["frame"] or code.co_name in COMPREHENSIONS:
                return None
            if not is_scripts(code.co_filename):
                return None
            frame.f_trace_lines = False
            self.function_calls[code] += 1
            self.call_lines.setdefault(code, state["line"])
            if code not in self.captured:
                self.captured[code] = _arguments(frame)
            starts[frame] = time.perf_counter()
            return on_return

        start = time.perf_counter()
        sys.settrace(on_call)
        try:
            return self.original(dataset, index)
        finally:
            sys.settrace(None)
            if state["line"] is not None:
                self.line_s[state["line"]] += time.perf_counter() - state["at"]
            self.getitem_s += time.perf_counter() - start

    def facts(self, tell: bool = True) -> dict | None:
        """What the profiled calls found, with the hot function told as layers where it can be
        (`tell`: calling it again; a plain watch does not)."""
        if not self.profiled or self.getitem_s <= 0:
            return None
        per_call = self.getitem_s / self.profiled
        lines = sorted(((line, s / self.getitem_s) for line, s in self.line_s.items()), key=lambda t: -t[1])
        out = {
            "file": self.code.co_filename,
            "getitem_s": round(per_call, 6),
            "profiled": self.profiled,
            "lines": [{"line": line, "share": round(share, 4)} for line, share in lines[:5] if share >= 0.05],
        }
        if not self.function_s:
            return self._inline(out, tell)
        code, seconds = max(self.function_s.items(), key=lambda t: t[1])
        share = seconds / self.getitem_s
        function = {
            "name": code.co_qualname if hasattr(code, "co_qualname") else code.co_name,
            "file": code.co_filename,
            "line": code.co_firstlineno,
            "call_line": self.call_lines.get(code),
            "share": round(share, 4),
            "calls_per_batch": round(self.function_calls[code] / self.profiled, 2),
        }
        out["function"] = function
        if share >= SAMPLE_WORK_SHARE and tell:
            function.update(self.moveable(code))
            return out
        return self._inline(out, tell)

    def _inline(self, out: dict, tell: bool) -> dict:
        """Where no function of the script's takes the time: its own lines told as layers
        (child/inline_augment.py), when `tell` (tune's probe; a plain watch does not call again)."""
        if tell:
            from gpuscout.child.inline_augment import tell as tell_inline

            try:
                out["inline"] = tell_inline(self.dataset, self.original)
            except Exception as exc:  # the script's __getitem__ called again: said, never raised
                out["inline"] = {"why_not": f"calling __getitem__ again raised {type(exc).__name__}: {exc}"[:300]}
        return out

    def moveable(self, code) -> dict:
        """The function found where the script refers to it, its image argument, and the layers
        that do what it does; or why it cannot be moved."""
        import numpy as np

        from gpuscout.child.augment_match import as_record, identify

        found = find_function(self.owner, code)
        if isinstance(found, str):
            return {"why_not": found}
        function, owner = found
        arguments = self.captured.get(code) or {}
        # an image (height, width, up to 4 channels), or a batch of them (augment_batch(images))
        image = next(
            (
                name
                for name, value in arguments.items()
                if isinstance(value, np.ndarray) and value.ndim in (3, 4) and value.shape[-1] <= 4
            ),
            None,
        )
        if image is None:
            return {"why_not": "it is given no image (an array of height, width and up to 4 channels)", "owner": owner}

        def call_again():
            given = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in arguments.items()}
            return _call(function, code, given)

        try:
            layers, explained = identify(call_again, arguments[image])
        except Exception as exc:  # the script's function, called again: never our failure
            return {"why_not": f"calling it again raised {type(exc).__name__}: {exc}"[:300], "owner": owner}
        out = {
            "argument": image,
            "owner": owner,
            "input_shape": list(arguments[image].shape[-3:]),
            "input_dtype": str(arguments[image].dtype),
            "explained": explained,
        }
        return {**out, **as_record(layers)}


def _arguments(frame) -> dict:
    """A function's arguments as it was called (arrays copied: the function may change them)."""
    code = frame.f_code
    count = (
        code.co_argcount
        + code.co_kwonlyargcount
        + bool(code.co_flags & inspect.CO_VARARGS)
        + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    )
    values = {}
    for name in code.co_varnames[:count]:
        value = frame.f_locals.get(name)
        values[name] = value.copy() if hasattr(value, "copy") and hasattr(value, "shape") else value
    return values


def _call(function, code, given: dict):
    positional = code.co_varnames[: code.co_argcount]
    args = [given[n] for n in positional]
    rest = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    kwargs = {n: given[n] for n in rest}
    index = code.co_argcount + code.co_kwonlyargcount
    if code.co_flags & inspect.CO_VARARGS:
        args += list(given[code.co_varnames[index]])
        index += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        kwargs.update(given[code.co_varnames[index]])
    if inspect.ismethod(function):  # bound: its self is the first argument given
        function = function.__func__
    return function(*args, **kwargs)


def _functions(owner: type):
    """Where a PyDataset's code can reach a function: each (holder, name, stored value, function)
    among the methods of its class and bases (a staticmethod's or classmethod's function inside it),
    then the globals of its __getitem__'s module."""
    for klass in owner.__mro__:
        for name, value in list(vars(klass).items()):
            yield klass, name, value, getattr(value, "__func__", value)
    module = getattr(owner.__getitem__, "__globals__", {})
    for name, value in list(module.items()):
        yield module, name, value, value


def find_function(owner: type, code):
    """The function object with `code`, and where the script holds it: a method of the dataset's
    class ("Class.name") or a global of `__getitem__`'s module (None); or why it is not found."""
    for holder, name, _, function in _functions(owner):
        if getattr(function, "__code__", None) is code:
            return function, (f"{holder.__name__}.{name}" if isinstance(holder, type) else None)
    return f"{code.co_name} is neither a method of the PyDataset nor a function of its module"


def passthrough(function, argument: str):
    """`function` replaced by one that returns its `argument` as given: the work left to the model."""
    signature = inspect.signature(function)

    def returns_input(*args, **kwargs):
        return signature.bind(*args, **kwargs).arguments[argument]

    returns_input.__name__ = function.__name__
    return returns_input


def move_into_model(dataset, settings: dict) -> str:
    """In a run that applies the change: the function found again by where it is defined (the
    probe's file and line) and replaced by `passthrough`; what was done, for the record."""
    target = (os.path.abspath(settings["file"]), int(settings["line"]))
    for holder, name, value, function in _functions(type(dataset)):
        code = getattr(function, "__code__", None)
        if code is None or (os.path.abspath(code.co_filename), code.co_firstlineno) != target:
            continue
        replaced = passthrough(function, settings["argument"])
        if isinstance(holder, type):
            setattr(holder, name, staticmethod(replaced) if isinstance(value, staticmethod) else replaced)
            return f"{holder.__name__}.{name}"
        holder[name] = replaced
        return name
    raise LookupError(f"no function defined at {settings['file']}:{settings['line']} reaches the PyDataset")
