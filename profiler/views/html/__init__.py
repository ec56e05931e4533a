"""The self-contained HTML report: input.py groups runs, charts.py and flame.py draw, report.py
writes the page (docs/report-html.md)."""
