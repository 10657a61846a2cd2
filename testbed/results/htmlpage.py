"""One self-contained HTML file for a run, a comparison or a sweep (`testbed report ... --html`,
issue 77): what a person opens, or sends to a colleague, instead of a terminal and loose PNGs.

One source: the page's tables are the terminal's own. `testbed report` prints to a Rich
console that records, and Rich exports that recording as HTML (the same tables, colours and
wording, in monospace), so nothing here formats a figure a second time. Around it a Jinja2
template puts what the terminal leaves to other files: the scenario (or sweep file) as run,
the run's warnings, and every plot inlined as a PNG data URI, so the file needs nothing beside
it. A small script marks on the page how many of its images drew (`data-images-drawn` on the
body), which the browser test reads (tests/integration/test_html.py)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from jinja2 import Environment, select_autoescape

TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ title }}</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
 h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
 pre.terminal { overflow-x: auto; padding: 1em; background: #fdfdfd; border: 1px solid #ddd;
   font-size: 12px; line-height: 1.3; }
 pre.source { overflow-x: auto; padding: 1em; background: #f6f6f6; font-size: 12px; }
 figure { margin: 1.5em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
 figcaption { font-size: 0.9em; color: #555; }
 li.warning { color: #8a5a00; }
</style>
</head>
<body data-images="{{ plots | length }}" data-images-drawn="pending">
<h1>{{ title }}</h1>
<p>{{ subtitle }}</p>
{% if warnings %}<h2>Warnings</h2>
<ul>{% for w in warnings %}<li class="warning">{{ w }}</li>{% endfor %}</ul>{% endif %}
<h2>Report</h2>
{{ terminal | safe }}
{% if plots %}<h2>Plots</h2>
{% for p in plots %}<figure><img alt="{{ p.name }}" src="data:image/png;base64,{{ p.data }}">
<figcaption>{{ p.name }}</figcaption></figure>
{% endfor %}{% endif %}
{% for name, text in sources %}<h2>{{ name }}</h2>
<pre class="source">{{ text }}</pre>
{% endfor %}
<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var drawn = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute("data-images-drawn", String(drawn));
});
</script>
</body>
</html>
"""

# Rich's export wraps the recording in this: a <pre> with inline styles, no page around it
TERMINAL = (
    '<pre class="terminal" style="color: {foreground}; background-color: {background}">'
    "<code>{code}</code></pre>"
)


def terminal_html(console: Any) -> str:
    """What a recording Rich console printed, as an HTML fragment with inline styles."""
    return str(console.export_html(inline_styles=True, code_format=TERMINAL, clear=False))


def write(
    path: Path,
    title: str,
    subtitle: str,
    terminal: str,
    plots: list[Path],
    sources: list[tuple[str, Path]],
    warnings: list[str],
) -> Path:
    """The page at `path`: `terminal` (terminal_html's), `plots` inlined, `sources` (a heading
    and a text file each: the scenario, the sweep file) shown as written."""
    env = Environment(autoescape=select_autoescape(default=True))
    page = env.from_string(TEMPLATE).render(
        title=title,
        subtitle=subtitle,
        terminal=terminal,
        warnings=warnings,
        plots=[
            {"name": p.name, "data": base64.b64encode(p.read_bytes()).decode("ascii")}
            for p in plots
            if p.is_file()
        ],
        sources=[(name, f.read_text(errors="replace")) for name, f in sources if f.is_file()],
    )
    path.write_text(page)
    return path
