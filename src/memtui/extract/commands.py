"""CLI subcommands for extraction (filled in by the extraction work)."""


def register(sub) -> None:
    """Add the extraction subcommands to the `memtui` parser."""
