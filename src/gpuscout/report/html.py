"""One self-contained HTML file: inline SVG plots, inline CSS and script, nothing fetched."""

from __future__ import annotations

from html import escape

from gpuscout.core.outputs import HTML_MARK
from gpuscout.core.provenance import utc_now
from gpuscout.core.versions import __version__
from gpuscout.report import plots
from gpuscout.report.sections import Document, Shown, TableData, laid_out, not_shown

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:1em 2em;color:#222}
h1{margin-bottom:0}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
.subtitle{color:#555;margin-top:.2em}.note{color:#555}
nav a{margin-right:1em}figure{margin:1em 0}figure svg{max-width:100%;height:auto}
figcaption{color:#555;font-size:.9em}
table{border-collapse:collapse;font-size:.8em;margin:.5em 0;max-width:100%}
th,td{border:1px solid #ddd;padding:.2em .35em;text-align:left;overflow-wrap:anywhere}
th{background:#f4f4f4;cursor:pointer;user-select:none}
th.sorted-asc::after{content:" ▲"}th.sorted-desc::after{content:" ▼"}
input.filter{margin:.5em 0;padding:.3em;width:20em}
details pre{background:#f8f8f8;padding:.5em;overflow:auto;font-size:.8em}
#js-errors{color:#b00}
"""

# Sorting and filtering, and a self-check the browser test reads: every plot's SVG has a size.
SCRIPT = """
window.addEventListener('error', function (e) {
  document.getElementById('js-errors').textContent += 'error: ' + e.message + '\\n';
});
function cellValue(row, i) {
  var t = row.cells[i].textContent.trim().replace(/,/g, '').replace(/%$/, '');
  var n = parseFloat(t);
  return isNaN(n) || !/^[-0-9.]/.test(t) ? t.toLowerCase() : n;
}
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, i) {
    th.addEventListener('click', function () {
      var asc = !th.classList.contains('sorted-asc');
      table.querySelectorAll('th').forEach(function (h) { h.classList.remove('sorted-asc', 'sorted-desc'); });
      th.classList.add(asc ? 'sorted-asc' : 'sorted-desc');
      var body = table.tBodies[0];
      Array.from(body.rows).sort(function (a, b) {
        var x = cellValue(a, i), y = cellValue(b, i);
        return (x > y ? 1 : x < y ? -1 : 0) * (asc ? 1 : -1);
      }).forEach(function (r) { body.appendChild(r); });
    });
  });
});
document.querySelectorAll('input.filter').forEach(function (input) {
  input.addEventListener('input', function () {
    var table = document.getElementById(input.dataset.table), q = input.value.toLowerCase();
    Array.from(table.tBodies[0].rows).forEach(function (r) {
      r.style.display = r.textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
    });
  });
});
function overlaps(a, b) {
  var w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
  var h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
  return w > 1 && h > 1;
}
window.addEventListener('load', function () {
  var svgs = document.querySelectorAll('figure.plot svg'), drawn = 0, overlapping = [], repeated = [];
  svgs.forEach(function (s) {
    var b = s.getBoundingClientRect();
    if (b.width > 50 && b.height > 50 && s.querySelector('path, use, rect')) drawn++;
    // every label of a plot readable: no two texts on top of each other, no tick label twice
    var texts = Array.from(s.querySelectorAll('text')).filter(function (t) { return t.textContent.trim(); });
    var boxes = texts.map(function (t) { return t.getBoundingClientRect(); });
    for (var i = 0; i < boxes.length; i++) for (var j = i + 1; j < boxes.length; j++)
      if (overlaps(boxes[i], boxes[j])) overlapping.push(texts[i].textContent + ' / ' + texts[j].textContent);
    ['xtick', 'ytick'].forEach(function (axis) {
      var seen = {};
      s.querySelectorAll('g[id^="' + axis + '"] text').forEach(function (t) {
        var k = t.textContent.trim();
        if (k && seen[k]) repeated.push(k); seen[k] = true;
      });
    });
  });
  document.body.dataset.plotsExpected = svgs.length;
  document.body.dataset.plotsRendered = drawn;
  document.body.dataset.labelOverlaps = overlapping.length;
  document.body.dataset.repeatedTicks = repeated.length;
  document.body.dataset.horizontalScroll = document.documentElement.scrollWidth > window.innerWidth ? 1 : 0;
  document.getElementById('layout').textContent = overlapping.concat(repeated).join('\\n');
});
"""


def _table(t: TableData, filters: bool = True) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in t.rows)
    box = f'<input class="filter" data-table="{t.id}" placeholder="filter {escape(t.id)}…">' if filters else ""
    return f'{box}<table class="sortable" id="{t.id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


# The same document inside a notebook's output (gpuscout.show): its styles kept to its own <div>,
# no page script (a notebook runs no script of an output it does not trust)
FRAGMENT_CSS = """
.gpuscout-report{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#222}
.gpuscout-report h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.2em;font-size:1.2em}
.gpuscout-report .subtitle,.gpuscout-report .note,.gpuscout-report figcaption{color:#555}
.gpuscout-report figure{margin:1em 0}.gpuscout-report figure svg{max-width:100%;height:auto}
.gpuscout-report table{border-collapse:collapse;font-size:.8em;margin:.5em 0;max-width:100%}
.gpuscout-report th,.gpuscout-report td{border:1px solid #ddd;padding:.2em .35em;text-align:left}
.gpuscout-report th{background:#f4f4f4}
.gpuscout-report details pre{background:#f8f8f8;padding:.5em;overflow:auto;font-size:.8em}
"""


def render(doc: Document) -> str:
    shown, empty = laid_out(doc, plots.svg)
    nav = " ".join(f'<a href="#{s.section.id}">{escape(s.section.title)}</a>' for s in shown)
    parts = [
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{HTML_MARK}<title>{escape(doc.title)}</title>'
        f"<style>{CSS}</style></head><body><h1>{escape(doc.title)}</h1>"
        f'<p class="subtitle">{escape(doc.subtitle)} · generated {utc_now()} by gpuscout {__version__}</p>'
        f'<pre id="js-errors"></pre><pre id="layout" hidden></pre><nav>{nav}</nav>'
    ]
    if empty:
        items = "".join(f"<li>{escape(line)}</li>" for line in not_shown(empty))
        parts.append(
            f'<details id="not-shown"><summary>Nothing in this store for {len(empty)} section(s)</summary>'
            f"<ul>{items}</ul></details>"
        )
    parts += _sections(shown, filters=True)
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    return "".join(parts)


def fragment(doc: Document) -> str:
    """The document's sections with something to show, for a notebook cell's output."""
    sections = "".join(_sections(laid_out(doc, plots.svg)[0], filters=False))
    return (
        f'<div class="gpuscout-report"><style>{FRAGMENT_CSS}</style><h3>{escape(doc.title)}</h3>'
        f'<p class="subtitle">{escape(doc.subtitle)}</p>{sections}</div>'
    )


def _sections(shown: list[Shown], filters: bool) -> list[str]:
    """Each section as HTML."""
    parts = []
    for s in shown:
        section = s.section
        parts.append(f'<section id="{section.id}"><h2>{escape(section.title)}</h2>')
        parts.extend(f'<p class="note">{escape(t)}</p>' for t in s.text)
        parts.extend(_table(t, filters) for t in section.summary)
        parts.extend(
            f'<figure class="plot">{svg}<figcaption>{escape(caption)}</figcaption></figure>'
            for caption, svg in s.figures
        )
        parts.extend(_table(t, filters) for t in section.tables)
        parts.extend(
            f"<details><summary>{escape(summary)}</summary><pre>{escape(text)}</pre></details>"
            for summary, text in section.details
        )
        parts.append("</section>")
    return parts
