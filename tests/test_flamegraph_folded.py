"""Which folded files inferno-flamegraph can draw (pure): it fails with "No stack counts found" on
one whose widths, the last column, are all zero, which a differential can be whatever its base
side holds; fsprof then keeps the folded file and draws no SVG."""

from profiler.views.flamegraph import _has_counts


def test_only_the_last_column_decides(tmp_path):
    folded = tmp_path / "g.folded"
    cases = {
        "a;b 3\n": True,
        "a;b 0\n": False,
        "a;b 5 0\nc;d 2 0\n": False,  # a differential whose run side is all zero
        "a;b 0 7\n": True,
        "a;b 0.5\n": True,
        "": False,
    }
    for text, drawable in cases.items():
        folded.write_text(text)
        assert _has_counts(folded) is drawable, text
