"""CLI subcommands for panels and estimation."""


def register(sub) -> None:
    """Add the panel and estimation subcommands to the `memtui` parser."""
