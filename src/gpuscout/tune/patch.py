"""`tune --patch FILE`: the winning changes as a unified diff of the user's own files, located in
the source where the baseline's run saw the calls (record.watch.CallSite: the line that called
`compile` and `fit`, the `def` of a PyDataset's `__init__` or a generator's function), never
applied to the user's files. tune runs a copy with the diff applied (an overlay: the patched
files copied, everything else of the script's folder linked) to check it buys what the injected
change bought.

Edits are made on the text at the positions `ast` gives (tune/source_edits.py: a keyword set or
replaced in a call, an argument wrapped, a definition inserted after the imports), so the rest of
the file is left byte for byte; the result must parse, or the change counts as not located.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from gpuscout.analysis.repeats import definition
from gpuscout.record.watch import CallSite, WatchRecord
from gpuscout.tune.change import Change
from gpuscout.tune.patch_batch import data_parallel_edits, original, rate_edits, site
from gpuscout.tune.source_edits import (
    Edit,
    NotLocated,
    after_block,
    apply,
    at,
    before_statement,
    call_at,
    drop_keywords,
    ensure_import,
    insert_after_imports,
    name_of,
    offsets,
    order,
    own_name,
    replace_arrays,
    set_keywords,
    wrap_input,
)


@dataclass
class Patch:
    texts: dict[Path, tuple[str, str]] = field(default_factory=dict)  # file -> (before, after)
    located: list[str] = field(default_factory=list)  # changes written into the diff
    unlocated: dict[str, str] = field(default_factory=dict)  # change -> why it is not in the diff

    def diff(self, root: Path) -> str:
        out = []
        for path, (before, after) in sorted(self.texts.items()):
            name = os.path.relpath(path, root)
            out += difflib.unified_diff(
                before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{name}", f"b/{name}"
            )
        return "".join(out)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make(changes: list[Change], baseline: WatchRecord, root: Path) -> Patch:
    """The diff of `changes` against the files under `root` (the script's folder). Every edit is
    located in the original text (the lines the baseline's run saw), then all are applied at once."""
    patch = Patch()
    sites = baseline.main.sites if baseline.main else {}
    edits: dict[Path, list[Edit]] = {}
    originals: dict[Path, str] = {}
    for change in changes:
        try:
            found = _edits(change, sites, baseline, root, originals)
            for path, edit in found:
                apply(originals[path], [*edits.get(path, []), *edit])  # each change must leave it parsing
            for path, edit in found:
                edits.setdefault(path, []).extend(edit)
        except NotLocated as exc:
            patch.unlocated[change.name] = str(exc)
            continue
        patch.located.append(change.name)
    for path, found in edits.items():
        patch.texts[path] = (originals[path], apply(originals[path], found))
    return patch


def _edits(
    change: Change, sites: dict, baseline: WatchRecord, root: Path, originals: dict[Path, str]
) -> list[tuple[Path, list[Edit]]]:
    settings = change.settings
    knob = change.knob
    if knob in ("jit_compile", "steps_per_execution"):
        path, line = site(sites, "compile", root, "compiled the model")
        text = original(path, originals)
        if knob == "steps_per_execution":
            values = {knob: str(int(settings["steps_per_execution"]))}
        else:  # XLA, and (a model left in debugging settings) no eager step
            values = {
                **({"run_eagerly": "False"} if settings.get("run_eagerly") is False else {}),
                **({"jit_compile": "True"} if settings.get("jit_compile") else {}),
            }
        edits = set_keywords(text, call_at(text, line, "compile"), values)
        if settings.get("run_eagerly") is False:
            edits += _eager_assignments(text)
        return [(path, edits)]
    if knob == "mixed_precision":
        path, _ = site(sites, "compile", root, "compiled the model")
        text = original(path, originals)
        line = f"keras.mixed_precision.set_global_policy({settings[knob]!r})  # before the model is built"
        own = [
            n
            for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.Call) and name_of(n.func) in ("set_global_policy", "set_dtype_policy")
        ]
        if own:  # after the script's own policy, which would set float32 again, and after the block
            # it is in: a policy the script sets only under a condition (`if debug:`) is not tune's
            return [(path, after_block(text, max(own, key=lambda n: n.lineno), line))]
        return [(path, insert_after_imports(text, line, need_keras=True))]
    if knob == "workers" and settings.get("parallel_calls"):
        return _parallel_call_edits(baseline, root, originals)
    if knob == "cache" and settings.get("cache_at"):
        file, _, line = settings["cache_at"].rpartition(":")
        path, line = site({"map": CallSite(file=file, line=int(line))}, "map", root, "mapped its dataset")
        text = original(path, originals)
        call = call_at(text, line, "map")
        end = at(text, offsets(text), call.end_lineno, call.end_col_offset)
        return [(path, [(end, end, ".cache()", next(order))])]
    if knob == "workers":
        path, line = site(sites, "input", root, "defined its PyDataset")
        text = original(path, originals)
        workers = int(settings["workers"])
        return [
            (
                path,
                set_keywords(
                    text,
                    _super_init(text, line),
                    {
                        "workers": str(workers),
                        "use_multiprocessing": str(bool(settings.get("processes"))),
                        "max_queue_size": str(2 * workers),
                    },
                ),
            )
        ]
    if knob == "batch_size":
        path, line = site(sites, "fit", root, "called fit")
        text = original(path, originals)
        return [
            (path, set_keywords(text, call_at(text, line, "fit"), {"batch_size": str(int(settings[knob]))})),
            *rate_edits(settings, sites, root, originals),
        ]
    if knob in ("cache", "prefetch"):
        path, line = site(sites, "fit", root, "called fit")
        text = original(path, originals)
        input_type = baseline.main.input_type
        if knob == "cache":
            helper = "CachedBatches" if input_type == "PyDataset" else "replayed"
            wrap = (
                "CachedBatches({})"
                if helper == "CachedBatches"
                else "replayed({}, period=" + str(int(settings["period"])) + ")"
            )
        else:
            helper = "tuned_pipeline" if input_type == "tf.data" else "read_ahead"
            wrap = helper + "({})"
        named, code = own_name(text, helper, definition(helper))
        return [
            (
                path,
                wrap_input(text, call_at(text, line, "fit"), wrap.replace(helper, named, 1))
                + insert_after_imports(text, code, need_keras=helper == "CachedBatches", name=named),
            )
        ]
    if knob == "data_parallel":
        return data_parallel_edits(settings, sites, baseline, root, originals)
    if knob == "augment_in_model":
        return _augment_edits(sites, baseline, root, originals)
    if knob == "device_batches":
        return _device_batches_edits(sites, baseline, root, originals)
    raise NotLocated(f"{change.name} is not written by a patch yet: write the lines printed")


def _augment_edits(
    sites: dict, baseline: WatchRecord, root: Path, originals: dict[Path, str]
) -> list[tuple[Path, list[Edit]]]:
    """The PyDataset's call of its augmentation replaced by the image it is given, and the model
    put behind the layers that do the augmentation, before the script compiles it (compile then
    applies to the model that wraps it; the script's later uses of the name train and save that)."""
    work = baseline.main.sample_work
    function = work.function
    short = function.name.split(".")[-1]
    path, line = site({"call": CallSite(file=work.file, line=function.call_line or 0)}, "call", root, f"called {short}")
    text = original(path, originals)
    call = call_at(text, line, short)
    given = next((k.value for k in call.keywords if k.arg == function.argument), None)
    if given is None:
        index = _parameter_index(original(Path(function.file).resolve(), originals), function)
        if index is None or index >= len(call.args) or any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
            raise NotLocated(f"which argument of {short}(...) on line {line} is its {function.argument} cannot be read")
        given = call.args[index]
    starts = offsets(text)
    call_edit = (
        at(text, starts, call.lineno, call.col_offset),
        at(text, starts, call.end_lineno, call.end_col_offset),
        ast.get_source_segment(text, given),
        next(order),
    )
    model_path, compile_line = site(sites, "compile", root, "compiled the model")
    model_text = original(model_path, originals)
    compile_call = call_at(model_text, compile_line, "compile")
    if not (isinstance(compile_call.func, ast.Attribute) and isinstance(compile_call.func.value, ast.Name)):
        raise NotLocated("compile is not called on a model by name: the model cannot be wrapped before it")
    name = compile_call.func.value.id
    insert_after_imports(model_text, "", need_keras=True)  # raises where keras is not imported by that name
    layers = ", ".join(layer.code() for layer in function.layers)
    code = (
        f"{name} = keras.Sequential([keras.Input(shape={tuple(function.input_shape)}), {layers}, {name}])"
        f"  # {short}'s work, on the device"
    )
    out = {path: [call_edit]}
    out.setdefault(model_path, []).extend(before_statement(model_text, compile_call, code))
    for layer in {layer.name for layer in function.layers if layer.own}:  # gpuscout's layer: its definition
        out[model_path] += insert_after_imports(model_text, definition(layer), need_keras=True, name=layer)
    return list(out.items())


def _device_batches_edits(
    sites: dict, baseline: WatchRecord, root: Path, originals: dict[Path, str]
) -> list[tuple[Path, list[Edit]]]:
    """fit(x, y, batch_size=B, shuffle=S, ...) as fit(device_slices(x, y, B, shuffle=S),
    steps_per_epoch=math.ceil(len(x) / B), ...): what tune ran (child/tune_overrides.py
    device_batches), the batches and their shuffle fit's own."""
    path, line = site(sites, "fit", root, "called fit")
    text = original(path, originals)
    call = call_at(text, line, "fit")
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords:
        raise NotLocated("fit is given **kwargs: its x, y and batch_size cannot be read from the source")
    for weighed in ("sample_weight", "class_weight", "validation_split"):
        if weighed in keywords:
            raise NotLocated(f"fit is given {weighed}, which device slices do not carry")
    batch = ast.get_source_segment(text, keywords["batch_size"]) if "batch_size" in keywords else "32"
    shuffle = keywords.get("shuffle")
    given = "" if shuffle is None else f", shuffle={ast.get_source_segment(text, shuffle)}"
    named, code = own_name(text, "device_slices", definition("device_slices"))
    x = call.args[0] if call.args else keywords.get("x")
    edits = replace_arrays(text, call, f"{named}({{x}}, {{y}}, {batch}{given})")
    edits += drop_keywords(text, call, {"batch_size", "shuffle"})
    added = {}
    if "steps_per_epoch" not in keywords:
        added["steps_per_epoch"] = f"math.ceil(len({ast.get_source_segment(text, x)}) / {batch})"
        edits += ensure_import(text, "math")
    if "validation_data" in keywords and "validation_batch_size" not in keywords:
        added["validation_batch_size"] = batch  # fit validated at batch_size, which the slices take over
    if added:
        edits += set_keywords(text, call, added)
    edits += insert_after_imports(text, code, need_keras=False, name=named)
    return [(path, edits)]


def _parameter_index(text: str, function) -> int | None:
    """The position of the function's image argument among those a call passes (a method's self,
    and a classmethod's cls, are not passed)."""
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name == function.name.split(".")[-1]
            and min([node.lineno, *(d.lineno for d in node.decorator_list)]) <= function.line <= node.lineno
        ):
            names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
            static = any(name_of(d) == "staticmethod" for d in node.decorator_list)
            if function.owner and not static:
                names = names[1:]
            return names.index(function.argument) if function.argument in names else None
    return None


def _eager_assignments(text: str) -> list[Edit]:
    """`model.run_eagerly = True` (a debugging line) made False."""
    starts = offsets(text)
    return [
        (
            at(text, starts, n.value.lineno, n.value.col_offset),
            at(text, starts, n.value.end_lineno, n.value.end_col_offset),
            "False",
            next(order),
        )
        for n in ast.walk(ast.parse(text))
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "run_eagerly" for t in n.targets)
    ]


def _parallel_call_edits(
    baseline: WatchRecord, root: Path, originals: dict[Path, str]
) -> list[tuple[Path, list[Edit]]]:
    """num_parallel_calls=tf.data.AUTOTUNE in each map and interleave the script left sequential,
    where the baseline's run saw it called (record.watch.PipelineOp), with TensorFlow by the name
    the file imports it as."""
    out: dict[Path, list[Edit]] = {}
    for op in baseline.main.pipeline:
        if op.op not in ("map", "interleave") or op.parallel is not False:
            continue
        path, line = site({"op": CallSite(file=op.file, line=op.line)}, "op", root, f"called {op.op}")
        text = original(path, originals)
        value = f"{_tensorflow_name(text)}.data.AUTOTUNE"
        out.setdefault(path, []).extend(set_keywords(text, call_at(text, line, op.op), {"num_parallel_calls": value}))
    if not out:
        raise NotLocated("no sequential map or interleave of the script's own was seen")
    return list(out.items())


def _tensorflow_name(text: str) -> str:
    """The name a file imports TensorFlow by (`import tensorflow as tf`: tf), wherever it does."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "tensorflow":
                    return alias.asname or "tensorflow"
    raise NotLocated("the file does not import tensorflow by name: tf.data.AUTOTUNE cannot be written")


def _super_init(text: str, def_line: int) -> ast.Call:
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.FunctionDef)
            and node.name == "__init__"
            and min([node.lineno, *(d.lineno for d in node.decorator_list)]) <= def_line <= node.lineno
        ):
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and name_of(call.func) == "__init__"
                    and isinstance(call.func, ast.Attribute)
                    and isinstance(call.func.value, ast.Call)
                    and name_of(call.func.value.func) == "super"
                ):
                    return call
            raise NotLocated(f"the PyDataset's __init__ (line {def_line}) calls no super().__init__(...)")
    raise NotLocated(f"no __init__ defined on line {def_line}")


def overlay(patch: Patch, root: Path, into: Path) -> None:
    """`into` as the script's folder with the patch applied: patched files written, every other
    entry a symlink to the original (data files, sibling modules), so paths relative to the
    script resolve as they did."""
    patched = {p.relative_to(root): after for p, (_, after) in patch.texts.items()}
    folders = {parent for rel in patched for parent in rel.parents if parent != Path(".")}

    def fill(rel: Path) -> None:
        (into / rel).mkdir(parents=True, exist_ok=True)
        for entry in sorted((root / rel).iterdir()):
            name = rel / entry.name
            if name in patched:
                (into / name).write_text(patched[name])
            elif name in folders:
                fill(name)
            else:
                (into / name).symlink_to(entry)

    fill(Path("."))
