"""`gpuscout compare`, `report` and `results import` on checked-in results (golden files), and the
HTML report in a real headless browser."""

import hashlib
import json
import re
import shutil
import sqlite3
import subprocess

import jsonschema
import pytest

from gpuscout.store import Store
from tests.cli_checks import BROWSER_FLAGS, browser, opened_in_browser
from tests.conftest import FIXTURES, run_cli

RESULTS = FIXTURES / "results"
GOLDEN = RESULTS / "golden.json"


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "results.sqlite"
    proc = run_cli("results", "import", str(GOLDEN), "--store", str(path))
    assert proc.returncode == 0 and "imported 6 new run(s)" in proc.stderr, proc.stderr
    return path


def count(path):
    with sqlite3.connect(path) as db:
        return db.execute("select count(*) from runs").fetchone()[0]


def test_compare_tables_match_the_golden_files(store):
    md = run_cli("compare", "--by", "gpu", "--markdown", "--store", str(store))
    assert md.returncode == 0 and md.stdout == (RESULTS / "compare_by_gpu.md").read_text()
    csv = run_cli("compare", "--by", "precision", "--csv", "--store", str(store))
    assert csv.returncode == 0 and csv.stdout == (RESULTS / "compare_by_precision.csv").read_text()


def test_two_single_runs_are_not_judged_by_their_windows_and_print_json(store):
    """One run a side (issue 75): the ratio, no interval and no verdict, and what would give one."""
    proc = run_cli("compare", "bertrun00001", "bertrun00002", "--json", "--store", str(store))
    (c,) = json.loads(proc.stdout)["comparisons"]
    assert c["by"] == "run" and c["basis"] == "windows" and c["groups"][1]["verdict"] == "cannot tell"
    assert c["groups"][1]["ratio"] == pytest.approx(400300 / 400200) and c["groups"][1]["ratio_low"] is None
    table = run_cli("compare", "bertrun00001", "bertrun00002", "--store", str(store))
    text = " ".join(table.stdout.split())
    assert "cannot tell" in text and "measure each side 2 or more times to test it" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (("compare", "nosuchrun"), "no run 'nosuchrun'"),
        (
            ("compare", "--workload", "gpt2_small"),
            "no stored run matches workload gpt2_small: the store has bert_base, resnet50",
        ),
        (
            ("compare", "--gpu-name", "T4"),
            "no stored run matches gpu T4: the store has NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3",
        ),
        (("report", "--telemetry-run", "a100bf16b256"), "has no telemetry samples"),
    ],
)
def test_bad_selections_exit_2_and_say_what_exists(store, args, message):
    proc = run_cli(*args, "--store", str(store))
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_nothing_to_compare_is_an_answer_not_an_error(store):
    """Runs that do not differ in --by alone give an empty comparison, said (exit 0, issue 62)."""
    proc = run_cli("compare", "--by", "data", "--json", "--store", str(store))
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"comparisons": []}
    assert "note: nothing to compare by data" in proc.stderr
    # a new store holds nothing to compare yet: said, exit 0; a CI gate on it is misconfigured (exit 2)
    fresh = store.parent / "fresh.sqlite"
    Store(fresh).close()
    empty = run_cli("compare", "--json", "--store", str(fresh))
    assert empty.returncode == 0 and json.loads(empty.stdout) == {"comparisons": []}
    assert "holds no runs yet: run `gpuscout bench` or `gpuscout watch" in empty.stderr
    gate = run_cli("compare", "--fail-slower", "5", "--store", str(fresh))
    assert gate.returncode == 2 and "holds no runs" in gate.stderr


def test_import_is_all_or_nothing_and_checks_the_schema(tmp_path, store):
    doc = json.loads(GOLDEN.read_text())
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**doc, "schema_version": 99}))
    half_bad = tmp_path / "half.json"
    bad_run = {k: v for k, v in doc["runs"][0].items() if k != "status"} | {"id": "fresh1"}
    half_bad.write_text(json.dumps({**doc, "runs": [doc["runs"][1] | {"id": "fresh0"}, bad_run]}))
    changed = tmp_path / "changed.json"
    changed.write_text(
        json.dumps({**doc, "runs": [doc["runs"][0] | {"id": "fresh2"}, doc["runs"][1] | {"batch_size": 7}]})
    )
    not_ours = tmp_path / "other.json"
    not_ours.write_text('{"hello": 1}')
    for path, message in (
        (newer, "newer than this gpuscout's"),
        (half_bad, "run #2 (fresh1): status: Field required"),
        (changed, "already stored with different contents"),
        (not_ours, "not a gpuscout results file"),
        (tmp_path / "missing.json", "no such file"),
    ):
        proc = run_cli("results", "import", str(path), "--store", str(store))
        assert proc.returncode == 2 and message in proc.stderr, (path, proc.stderr)
        assert count(store) == 6  # nothing half-applied
    again = run_cli("results", "import", str(GOLDEN), "--store", str(store))
    assert again.returncode == 0 and "imported 0 new run(s)" in again.stderr and count(store) == 6


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_import_refuses_a_record_of_the_wrong_types_naming_it_and_changes_nothing(tmp_path, store):
    doc = json.loads(GOLDEN.read_text())
    good = doc["runs"][0] | {"id": "fresh0"}
    cases = [
        ({"batch_size": "big"}, "run #2 (fresh1): batch_size: Input should be a valid integer"),
        ({"throughput": good["throughput"] | {"median": "fast"}}, "run #2 (fresh1): throughput.median:"),
        ({"group_id": ["a", "b"]}, "run #2 (fresh1): group_id: Input should be a valid string"),
        ({"samples_per_s": -1.0}, "run #2 (fresh1): samples_per_s: Input should be greater than or equal to 0"),
        # NaN is read (an export keeps a diverged loss so), and refused where the record has no place for it
        ({"samples_per_s": float("nan")}, "run #2 (fresh1): samples_per_s: Input should be a finite number"),
        ({"id": ["a"]}, "run #2: id: Input should be a valid string"),
    ]
    before = digest(store)
    for change, message in cases:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**doc, "runs": [good, doc["runs"][1] | {"id": "fresh1"} | change]}))
        proc = run_cli("results", "import", str(bad), "--store", str(store))
        assert proc.returncode == 2 and message in proc.stderr, (change, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and digest(store) == before
    # whole documents that are wrong, as a hostile or broken exporter would write them
    documents = [
        ({**doc, "schema_version": "1"}, "schema_version must be a whole number, got '1'"),
        ({**doc, "runs": "all"}, "'runs' must be a list of records"),
        ({**doc, "runs": [good, None]}, "run #2 is not a record (a JSON object)"),
        ({**doc, "runs": [good | {"kind": "nonsense"}]}, "run #1 (fresh0): record: Input tag 'nonsense'"),
        ({**doc, "runs": [good, good]}, "holds the same run id twice"),
        (
            {**doc, "runs": [good | {"batch_size": 10**30}]},
            "(31 digits) is larger than any figure gpuscout keeps (a 64-bit integer)",
        ),
        ([1, 2], "is not a gpuscout results file"),
    ]
    for document, message in documents:
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(document))
        proc = run_cli("results", "import", str(bad), "--store", str(store))
        assert proc.returncode == 2 and message in proc.stderr, (message, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and digest(store) == before


def test_old_stores_migrate_all_or_nothing_and_old_exports_import(tmp_path):
    old = tmp_path / "old.sqlite"
    shutil.copy(RESULTS / "store_v1.sqlite", old)
    original = digest(old)
    refused = run_cli("results", "list", "--store", str(old))
    assert refused.returncode == 2 and "run `gpuscout results migrate --store" in refused.stderr
    assert digest(old) == original
    # a damaged record stops the migration before anything is written
    broken = tmp_path / "broken.sqlite"
    shutil.copy(old, broken)
    db = sqlite3.connect(broken)
    db.execute(
        "UPDATE runs SET record_json = replace(record_json, '\"batch_size\": 256', "
        "'\"batch_size\": \"big\"') WHERE id = '6734c24ff532'"
    )
    db.commit()
    db.close()
    broken_digest = digest(broken)
    proc = run_cli("results", "migrate", "--store", str(broken))
    assert proc.returncode == 2 and "run 6734c24ff532" in proc.stderr and "batch_size" in proc.stderr
    assert digest(broken) == broken_digest and not list(tmp_path.glob("broken.sqlite.schema1-backup*"))
    done = run_cli("results", "migrate", "--store", str(old))
    assert done.returncode == 0 and "migrated 20 run(s)" in done.stderr, done.stderr
    backup = tmp_path / "old.sqlite.schema1-backup"
    assert digest(backup) == original  # the original, byte for byte
    listed = run_cli("results", "list", "--json", "--store", str(old))
    runs = json.loads(listed.stdout)["runs"]
    assert listed.returncode == 0 and len(runs) == 20 and {r["schema_version"] for r in runs} == {2}
    assert "nothing to do" in run_cli("results", "migrate", "--store", str(old)).stderr
    db = sqlite3.connect(old)
    db.execute("PRAGMA user_version = 3")
    db.close()
    newer = run_cli("results", "migrate", "--store", str(old))
    assert newer.returncode == 2 and "schema 3, newer than this gpuscout's (2)" in newer.stderr
    fresh = tmp_path / "fresh.sqlite"
    imported = run_cli("results", "import", str(RESULTS / "export_v1.json"), "--store", str(fresh))
    assert imported.returncode == 0 and "imported 20 new run(s)" in imported.stderr


def test_the_schema_validates_every_export_and_a_damaged_record_is_reported_not_crashed_on(tmp_path, store):
    proc = run_cli("results", "schema")
    schema = json.loads(proc.stdout)
    exported = json.loads(run_cli("results", "export", "--store", str(store)).stdout)
    for run in exported["runs"]:
        jsonschema.validate(run, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(exported["runs"][0] | {"batch_size": "big"}, schema)
    with sqlite3.connect(store) as db:
        db.execute("UPDATE runs SET record_json = '{\"id\": 3}' WHERE id = 'bertrun00002'")
    listed = run_cli("results", "list", "--store", str(store))
    assert listed.returncode == 0 and "bertrun00001" in listed.stdout and "bertrun00002" not in listed.stdout
    assert "warning: run bertrun00002" in listed.stderr and "is damaged and was left out" in listed.stderr
    shown = run_cli("results", "show", "bertrun00002", "--store", str(store))
    assert shown.returncode == 2 and "run bertrun00002" in shown.stderr and "is damaged" in shown.stderr


def test_export_then_import_moves_runs_between_stores(store, tmp_path):
    exported = tmp_path / "out.json"
    assert run_cli("results", "export", "-o", str(exported), "--store", str(store)).returncode == 0
    other = tmp_path / "other.sqlite"
    assert run_cli("results", "import", str(exported), "--store", str(other)).returncode == 0
    assert count(other) == 6


def test_the_html_report_holds_every_section_and_is_self_contained(store, tmp_path):
    out = tmp_path / "r.html"
    proc = run_cli("report", "--out", str(out), "--store", str(store))
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    for section in ("machines", "throughput", "cost", "batch", "ablation", "telemetry", "runs", "provenance"):
        assert f'<section id="{section}">' in html
    # a section with nothing to show is named once under the title, not drawn as an empty heading
    # (issue 62): this store has no run at two GPU counts, no inference and no watched script
    assert '<section id="scaling">' not in html and '<section id="inference">' not in html
    assert "Nothing stored for this yet" not in html and '<section id="watched">' not in html
    not_shown = html.split('<details id="not-shown">')[1].split("</details>")[0]
    assert "2 section(s)" in not_shown and "Scaling over GPUs: Throughput against the number of GPUs" in not_shown
    assert "Inference latency" in not_shown and '<a href="#scaling">' not in html
    assert html.count('<figure class="plot"><svg') == 6  # 2 workloads + cost + batch + ablation + telemetry
    assert all(
        f"<summary>{run_id}" in html
        for run_id in ("h100bf16b256", "h100bf16b512", "h100fp32b256", "a100bf16b256", "bertrun00001", "bertrun00002")
    )
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="https?:', html)  # nothing fetched
    assert "throughput (images/s)" in html and "power (W)" in html  # labelled with units


def test_the_markdown_report_writes_its_plots_beside_it(store, tmp_path):
    out = tmp_path / "md" / "report.md"
    proc = run_cli("report", "--markdown", "--out", str(out), "--workload", "resnet50", "--store", str(store))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    pngs = sorted((tmp_path / "md" / "report_files").glob("*.png"))
    assert len(pngs) == 5 and all(p.stat().st_size > 5000 for p in pngs)
    assert all(f"report_files/{p.name}" in text for p in pngs) and "| a100bf16b256 |" in text


def test_the_report_renders_in_a_headless_browser_without_errors(store, tmp_path):
    out = tmp_path / "report.html"
    assert run_cli("report", "--out", str(out), "--store", str(store)).returncode == 0
    plots, _ = opened_in_browser(out, tmp_path / "profile")
    assert plots == 6
    shot = tmp_path / "report.png"
    subprocess.run(
        [browser(), *BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1300,4000",
         f"--screenshot={shot}", out.as_uri()],
        capture_output=True,
        timeout=120,
    )  # fmt: skip
    assert shot.exists() and shot.stat().st_size > 50_000  # a rendered page, not a blank one


def test_every_verbs_tables_in_a_log_keep_each_row_on_one_line_and_a_set_columns_is_honoured(store):
    """A pipe with no COLUMNS (what `gpuscout ... | tee log` gets from a shell, which does not export
    it): tables are laid out for a log, one line per row. `COLUMNS=80 gpuscout ... | less` asks for
    80 columns (issue 78): no line past 80, and every number of the log's rows still whole on one."""
    first = json.loads(run_cli("results", "list", "--json", "--store", str(store)).stdout)["runs"][0]["id"]
    for args in (
        ["catalog"],
        ["recommend", "--workload", "resnet50"],
        ["results", "list"],
        ["results", "show", first],
        ["compare", "--by", "gpu"],
        ["bench", "--list"],
        ["doctor"],
    ):
        where = ["--store", str(store)] if args[0] not in ("catalog", "doctor") else []
        log, narrow = (run_cli(*args, *where, env={"COLUMNS": columns}) for columns in ("", "80"))
        assert log.returncode == 0 and narrow.returncode == 0, (args, log.stderr[-2000:], narrow.stderr[-2000:])
        rows = [line for line in log.stdout.splitlines() if line.startswith("│")]
        continued = [line for line in rows if not line.split("│")[1].strip()]
        assert not continued, (args, continued[:3])
        wide = [line for line in narrow.stdout.splitlines() if len(line) > 80]
        assert not wide, (args, wide[:3])
        # each row is still there, every word of its first cell whole (wrapped between words, never
        # inside one: tests/unit/test_terminal.py holds every number so at any width)
        words = {word for line in rows for word in line.split("│")[1].split()}
        shown = set(re.split(r"[\s│┃:]+", narrow.stdout))
        assert words <= shown, (args, sorted(words - shown)[:5])
