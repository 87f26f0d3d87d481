"""The one exception type the model loaders raise for bad checkpoints."""

from __future__ import annotations

import os


class ModelLoadError(ValueError):
    """A checkpoint could not be loaded. The message names the file and the reason."""

    def __init__(self, file: str | os.PathLike, reason: str | None = None) -> None:
        self.file = os.fspath(file)
        self.reason = reason
        super().__init__(self.file if reason is None else f"{self.file}: {reason}")
