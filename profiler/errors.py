"""The one exception type users see: its message is a single sentence, printed without a traceback."""


class FsprofError(Exception):
    """A failure explained in one sentence; the CLI prints it and exits non-zero."""

    def __init__(self, sentence: str, exit_code: int = 1) -> None:
        super().__init__(sentence)
        self.exit_code = exit_code
