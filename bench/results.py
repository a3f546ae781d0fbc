"""Reading the results file the bench scripts write: one JSON object a line."""
import json
import sys


def load(path):
    """Returns the objects of the file at path. A line that is not JSON (a
    benchmark that printed something else) is skipped with a warning rather
    than failing the whole table."""
    rows = []
    for line in open(path):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            print(f"skipped a line that is not JSON: {line.strip()}", file=sys.stderr)
    return rows
