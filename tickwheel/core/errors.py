"""The one error the time core raises for bad user input."""

from __future__ import annotations

from tickwheel.errors import InvalidInput


class ScheduleError(InvalidInput, ValueError):
    """A schedule (or an instant in one) is invalid; `field` names the offending input, e.g. "schedule.expr"."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, field=field)
        self.field: str = field

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"
