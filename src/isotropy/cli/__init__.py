"""Command-line interface: ``isotropy stability | measure | demo`` (see ``isotropy --help``)."""
