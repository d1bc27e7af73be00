"""Sweep files written for the tests, and the trials a store holds for them."""

from __future__ import annotations

import json
import sqlite3
import textwrap


def write(tmp_path, text, name="sweep.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def trials(store):
    with sqlite3.connect(store) as db:
        return [
            (k, st, json.loads(r) if r else None)
            for k, st, r in db.execute("select trial_key, status, result_json from trials order by trial_index")
        ]
