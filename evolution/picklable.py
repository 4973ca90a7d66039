"""The base of the product's error classes: a message plus keyword attributes that survive pickling.

Errors travel from Spark executors to the driver, so they must pickle with
their attributes. Python's default rebuilds an exception by calling its class
with ``args``, which fails or loses attributes for every constructor that takes
keywords or composes its own message. Here unpickling calls no constructor: it
restores ``args`` and the instance's attributes as they were.

It lives in evolution/, the lowest layer (router/ -> registry/ -> evolution/),
so every package can derive its own base class from it (EvolutionError,
RegistryError, RouterError, SourceError, DevStackError).
"""
from __future__ import annotations

import copyreg
from typing import Any

__all__ = ["PicklableError"]


class PicklableError(Exception):
    """`message`, plus each keyword as an attribute and all of them in ``attrs``."""

    def __init__(self, message: str, **attrs: Any) -> None:
        super().__init__(message)
        self.message = message
        self.attrs = attrs
        for key, value in attrs.items():
            setattr(self, key, value)

    def __reduce__(self):
        # cls.__new__(cls, *args), then the instance's attributes: no constructor runs again
        return (copyreg.__newobj__, (type(self), *self.args), self.__dict__)
