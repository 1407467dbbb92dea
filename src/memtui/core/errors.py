"""The one exception type users see: its message is a single line saying what is wrong and how to fix it."""


class MemtuiError(Exception):
    """A user-facing error. The CLI prints ``memtui: <message>`` and exits with status 2; the app shows it."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.split()))
