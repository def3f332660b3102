"""Tables and figures rebuilt from stored run directories; no model is loaded here."""
