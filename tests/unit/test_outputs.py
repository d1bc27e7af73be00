"""The one door's rules one by one (core/outputs/); tests/integration/test_outputs.py drives
every output of the CLI through them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuscout.core import outputs
from gpuscout.core.errors import UsageError
from gpuscout.core.outputs.named import _descriptor as descriptor
from gpuscout.report.exporters.as_csv import RUN_COLUMNS as CSV_COLUMNS


def test_the_csv_mark_is_how_an_export_starts():
    assert ",".join(CSV_COLUMNS).startswith(outputs.CSV_MARK)


def test_a_whole_write_fits_a_name_of_the_longest_length_and_leaves_no_temporary(tmp_path):
    path = tmp_path / ("x" * 255)  # NAME_MAX: its temporary name is cut to fit beside it
    outputs.replace_whole(path, "first")
    outputs.replace_whole(path, "second")
    assert path.read_text() == "second" and os.listdir(tmp_path) == [path.name]


def test_a_whole_write_replaces_a_link_in_its_place_never_its_target(tmp_path):
    target, link = tmp_path / "target", tmp_path / "link"
    target.write_text("kept")
    link.symlink_to(target)
    outputs.replace_whole(link, "new")
    assert target.read_text() == "kept" and not link.is_symlink() and link.read_text() == "new"


def test_inside_a_folder_of_its_own_nothing_is_followed_or_taken_from_the_user(tmp_path):
    folder, store = tmp_path / "own", tmp_path / "results.sqlite"
    folder.mkdir()
    store.write_bytes(outputs.SQLITE_HEADER)
    (folder / "to-store.json").symlink_to(store)
    (folder / "hard.json").hardlink_to(store)
    (folder / "mine.json").write_text('{"mine": 1}')
    (folder / "ours.json").write_text('{\n  "gpuscout_version": "0.1.0"}')
    for name, fragment in (
        ("to-store.json", "is the results store itself"),
        ("hard.json", "is the results store"),
        ("mine.json", "gpuscout did not write it"),
    ):
        with pytest.raises(UsageError, match=fragment):
            outputs.replace_inside(folder, name, "{}", store, "a file", ("json",))
    outputs.replace_inside(folder, "ours.json", '{"gpuscout_version": "x"}', store, "a file", ("json",))
    outputs.replace_inside(folder, "mine.json", '{"gpuscout_version": "x"}', store, "a file", ("json",), force=True)
    assert store.read_bytes() == outputs.SQLITE_HEADER
    with pytest.raises(UsageError, match="exists already"):
        outputs.create_inside(folder, "ours.json", "a log")
    with pytest.raises(OSError):
        outputs.append_inside(folder / "to-store.json", "x")  # a link is never written through
    with pytest.raises(OSError):
        outputs.append_inside(folder / "hard.json", "x")  # nor a file with a second name


def test_a_folder_replaced_whole_must_be_gpuscouts(tmp_path):
    ours, old, mine = tmp_path / "ours", tmp_path / "old", tmp_path / "mine"
    (ours / "anything").mkdir(parents=True)
    (ours / outputs.FOLDER_MARK).write_text("")
    (old / "trial-0001").mkdir(parents=True)  # written before the mark was kept: only the writer's folders
    (mine / "trial-0001").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    (tmp_path / "link").symlink_to(ours)
    assert outputs.check_marked_folder(ours, "logs") and outputs.check_marked_folder(old, "logs")
    assert outputs.check_marked_folder(tmp_path / "absent", "logs")
    with pytest.raises(UsageError, match="a folder gpuscout did not write"):
        outputs.check_marked_folder(mine, "logs")
    with pytest.raises(UsageError, match="is a symbolic link, not a folder gpuscout wrote"):
        outputs.check_marked_folder(tmp_path / "link", "logs")


def test_another_processs_descriptor_is_a_path_and_ours_is_a_stream(tmp_path):
    assert descriptor(Path(f"/proc/{os.getpid()}/fd/1")) == 1
    assert descriptor(Path("/proc/self/fd/7")) == 7 and descriptor(Path("-")) == 1
    assert descriptor(Path(f"/proc/{os.getpid() + 1}/fd/2")) is None


def test_an_outputs_folder_is_made_only_where_its_nearest_existing_parent_is_a_folder(tmp_path):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a link to nothing, not a folder"):
        outputs.check_output(tmp_path / "dangling" / "deeper" / "r.json", None, False, "-o")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        outputs.check_output(tmp_path / "file" / "r.json", None, False, "-o")
    assert not (tmp_path / "nowhere").exists()
    made = outputs.check_output(tmp_path / "new" / "deeper" / "r.json", None, False, "-o")
    outputs.write(made, "{}")
    assert (tmp_path / "new" / "deeper" / "r.json").read_text() == "{}"
