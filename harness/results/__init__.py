"""The results side: run folders -> tables (tables.py) -> comparison (compare.py, quality.py) ->
report.md/html (report.py) and figures (plots.py, style.py). Reads run folders only; imports
neither torch nor the network side."""
