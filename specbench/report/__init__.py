"""Tables and figures rebuilt from stored run directories; no model is loaded here."""


class ReportError(Exception):
    """A bad input to the reports, as one line (the CLI prints it and exits 2)."""


def warn(line: str) -> None:
    """A report's warning: one line on stderr, the tables still written."""
    import sys

    print(f"specbench-report: warning: {line}", file=sys.stderr)
