"""Flame graphs in the HTML report: each run's default set (flamegraph.write_default_set, the
graphs `fsprof run` and `fsprof report` write) embedded as inferno drew it, interactive.

Each SVG goes into its own <iframe> as a data: URL, so that inferno's script (zoom, search,
which look elements up by id) runs in a document of its own: several graphs on one page cannot
clash. Without inferno there is no SVG: the report says so and lists the folded stacks."""

import base64
import re
import shutil
import tempfile
from html import escape
from pathlib import Path

from .. import flamegraph as fg

# The frames may run scripts and ask for the search term (prompt), nothing else.
# Run after inferno's own script, before its onload init: (1) inferno records the zoom in the URL
# (history.replaceState), which a data: document may not rewrite: every click would throw; zoom and
# search work without it. (2) Its "fluid" width reads the frame's width at load, 0 for a frame not
# laid out yet (a closed <details>), and sets a negative width: the graph keeps its drawn width
# (and the labels inferno drew; a zoom redraws them).
_ADJUST = (
    '<script type="text/ecmascript"><![CDATA[ (function () {'
    " var replace = history.replaceState.bind(history);"
    " history.replaceState = function () { try { replace.apply(null, arguments); } catch (e) {} };"
    " })(); fluiddrawing = false; ]]></script>"
)
_ROOT_SVG = re.compile(rb"<svg\b[^>]*>")
_HEIGHT = re.compile(rb'\bheight="(\d+)"')


def embeddable(svg_bytes):
    """The SVG with _ADJUST as the last child of its root element."""
    end = svg_bytes.rfind(b"</svg>")
    if end < 0 or not _ROOT_SVG.search(svg_bytes):
        return svg_bytes
    return svg_bytes[:end] + _ADJUST.encode() + svg_bytes[end:]


def iframe(svg_bytes, name, title, deferred=False):
    """The graph in a frame of its own; a deferred one gets its source when SCRIPT says so."""
    root = _ROOT_SVG.search(svg_bytes)
    height = int(_HEIGHT.search(root.group(0)).group(1)) if root and _HEIGHT.search(root.group(0)) else 400
    data = base64.b64encode(embeddable(svg_bytes)).decode()
    return (
        f'<iframe class="flamegraph" sandbox="allow-scripts allow-modals" title="{escape(title)}"'
        f' data-file="{escape(name)}" height="{height + 4}" {"data-src" if deferred else "src"}='
        f'"data:image/svg+xml;base64,{data}"></iframe>'
    )


# The page's one script. Per-phase graphs start when their section is opened: a run with many
# phases has hundreds of graphs, and starting them all made a bonnie spec's report take a minute
# to open (and "loading=lazy" does not defer frames in a closed <details>).
SCRIPT = """
document.querySelectorAll("details.deferred-graphs").forEach(function (section) {
  section.addEventListener("toggle", function () {
    if (!section.open) return;
    section.querySelectorAll("iframe[data-src]").forEach(function (frame) {
      frame.src = frame.dataset.src;
      frame.removeAttribute("data-src");
    });
  });
});
"""


def _written(run_dir, result):
    """(directory holding the graphs, paths written, note): the run's own flamegraphs/, else
    (a run directory we may not write) a temporary one, said in the note."""
    try:
        return Path(run_dir) / fg.OUT_DIR, fg.write_default_set(run_dir, result), ""
    except OSError as e:
        tmp = Path(tempfile.mkdtemp(prefix="fsprof-html-"))
        note = f"{run_dir} is not writable ({e.strerror}): graphs drawn in a temporary directory, folded files not kept"
        try:
            return tmp, fg.write_default_set(tmp, result), note
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def _graph_names(result):
    """[(fs label, kind, phase, file name)] of every graph write_default_set may write, in order;
    the differentials have kind "off-cpu-diff" and the label "X-vs-BASE"."""
    out = []
    for fs in result["filesystems"]:
        for kind in fg.KINDS:
            for phase in [fg.ALL_PHASES, *fs["phases"]]:
                out.append((fs["label"], kind, phase, fg.svg_name(fs["label"], kind, phase)))
    base = result["filesystems"][0]["label"] if result["filesystems"] else ""
    for fs in result["filesystems"][1:]:
        label = f"{fs['label']}-vs-{base}"
        out.append((label, "off-cpu-diff", fg.ALL_PHASES, fg.svg_name(label, "off-cpu-diff", fg.ALL_PHASES)))
    return out


def _title(kind, phase):
    what = fg.TITLES.get(kind, "Differential off-CPU time, ns per op (red: costs more than the baseline)")
    return f"{what}; phase {phase}"


def section(run_dir, result, names):
    """HTML of one run's flame graphs; names maps a filesystem label to its name on the page."""
    where, written, note = _written(run_dir, result)
    try:
        return _section(where, written, note, result, names)
    finally:
        if note:  # the temporary directory: everything needed is in the page now
            shutil.rmtree(where, ignore_errors=True)


def _section(where, written, note, result, names):
    svgs = {p.name: p for p in map(Path, written) if p.suffix == ".svg"}
    folded = sorted(p for p in map(Path, written) if p.suffix == ".folded")
    out = [f'<p class="note">{escape(note)}</p>'] if note else []
    if not svgs:
        out.append(_without_inferno(where, folded, note))
        return "".join(out)
    per_label, known = {}, set()
    for label, kind, phase, name in _graph_names(result):
        if name in svgs:
            per_label.setdefault(label, []).append((kind, phase, name))
            known.add(name)
    for name in sorted(set(svgs) - known):  # a kind this page does not know yet: shown all the same
        per_label.setdefault("other graphs", []).append((None, fg.ALL_PHASES, name))
    for label, graphs in per_label.items():
        out.append(f"<h4>{escape(names.get(label, label))}</h4>")
        main = [g for g in graphs if g[1] == fg.ALL_PHASES]
        per_phase = [g for g in graphs if g[1] != fg.ALL_PHASES]
        for kind, phase, name in main:
            out.append(_figure(svgs[name], kind, phase))
        if per_phase:
            out.append(f'<details class="deferred-graphs"><summary>per phase ({len(per_phase)} graphs)</summary>')
            out.extend(_figure(svgs[name], kind, phase, deferred=True) for kind, phase, name in per_phase)
            out.append("</details>")
    return "".join(out)


def _figure(path, kind, phase, deferred=False):
    title = _title(kind, phase) if kind else path.name
    return (
        f'<figure class="flame"><figcaption>{escape(title)} <span class="file">({escape(path.name)})</span>'
        f"</figcaption>{iframe(path.read_bytes(), path.name, title, deferred)}</figure>"
    )


def _without_inferno(where, folded, note):
    files = "".join(
        f"<li><code>{escape(str(where / p.name) if not note else p.name)}</code> ({p.stat().st_size:,} bytes)</li>"
        for p in folded
    )
    return (
        f'<p class="missing">{fg.FLAMEGRAPH} was not found (PATH, ~/.cargo/bin; <code>make setup</code> '
        f"installs inferno), so this report has no flame graph pictures. The folded stacks "
        f"(one line per stack, weight in µs) were written; render one with "
        f"<code>{fg.FLAMEGRAPH} FILE &gt; FILE.svg</code> or flamegraph.pl:</p>"
        f'<ul class="folded">{files or "<li>none: nothing was recorded</li>"}</ul>'
    )


CSS = """
figure.flame { margin: .5em 0 1.5em; }
figure.flame figcaption { font-weight: 600; margin-bottom: .2em; }
figure.flame .file { font-weight: normal; color: #666; font-size: 90%; }
iframe.flamegraph { width: 100%; border: 1px solid #ccc; background: #fff; }
p.missing { background: #fff4e5; border-left: 4px solid #f0a030; padding: .5em .8em; }
"""
