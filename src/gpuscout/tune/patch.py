"""`tune --patch FILE`: the winning changes as a unified diff of the user's own files, located in
the source where the baseline's run saw the calls (record.watch.CallSite: the line that called
`compile` and `fit`, the `def` of a PyDataset's `__init__` or a generator's function), never
applied to the user's files. tune runs a copy with the diff applied (an overlay: the patched
files copied, everything else of the script's folder linked) to check it buys what the injected
change bought.

Each change's edits are its kind's (tune/changes/: `ChangeKind.edits`), made on the text at the
positions `ast` gives (tune/source_edits.py: a keyword set or replaced in a call, an argument
wrapped, a definition inserted after the imports), so the rest of the file is left byte for byte;
the result must parse, or the change counts as not located.
"""

from __future__ import annotations

import difflib
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from gpuscout.record.watch import WatchRecord
from gpuscout.tune.change import Change
from gpuscout.tune.changes import Where, kind
from gpuscout.tune.source_edits import Edit, NotLocated, apply


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
            found = kind(change.knob).edits(change, Where(sites, baseline, root, originals))
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
