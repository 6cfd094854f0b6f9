"""`Closing`: the base of objects that hold a resource until ``close`` (the tuning log's database
connections, the HTTP client's connections) and close it on leaving a ``with`` block."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self


class Closing(ABC):
    """Holds a resource until `close`; ``with`` returns the object itself and closes it on leaving,
    whether the block ends or raises."""

    @abstractmethod
    def close(self) -> None:
        """Release the resource. The object may not be used afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
