"""Tables and figures rebuilt from stored run directories; no model is loaded here."""


class ReportError(Exception):
    """A bad input to the reports, as one line (the CLI prints it and exits 2)."""
