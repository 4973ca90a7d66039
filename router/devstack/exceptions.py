"""Errors raised by the local dev stack (broker, registry emulator, catalogs).

They pickle with their attributes (evolution/picklable.py), like every error of the product.
"""

from __future__ import annotations

from evolution.picklable import PicklableError


class DevStackError(PicklableError):
    """Base class; ``transient`` tells callers whether retrying may help."""

    transient: bool = False

    def __init__(self, service: str, detail: str) -> None:
        super().__init__(f"{service}: {detail}", service=service, detail=detail)


class ServiceStartError(DevStackError):
    """A service process did not come up (port race, crash, slow machine)."""

    transient = True


class ServiceMissingError(DevStackError):
    """A required binary is not installed (e.g. PostgreSQL server)."""

    transient = False


class StackStateError(DevStackError):
    """The stack state file is missing, unreadable or describes another stack."""

    transient = False


class RegistryApiError(DevStackError):
    """A Schema Registry REST error: HTTP status plus Confluent ``error_code``."""

    transient = False

    def __init__(self, http_status: int, error_code: int, message: str) -> None:
        super().__init__("registry", message)
        self.http_status = http_status
        self.error_code = error_code

    def body(self) -> dict:
        return {"error_code": self.error_code, "message": self.detail}


class RegistryStoreError(RegistryApiError):
    """The registry could not persist its data file (50001); a retry may succeed."""

    transient = True
