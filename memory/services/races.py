"""Losing a race cleanly. The database holds the invariants (one current row per key, one live
successor per edit chain, one turn per runtime turn id); a writer that trips one of them lost a
race it could not see coming, so its transaction is rolled back and run again on fresh reads, a
few times at most, and then it is told so (Conflict) instead of failing with a 500."""

from collections.abc import Callable
from typing import TypeVar

from django.db import IntegrityError, models, transaction

from memory.services.errors import Conflict

T = TypeVar("T")
RACE_ATTEMPTS = 3


def constraint_violated(exc: IntegrityError, *, model: type[models.Model], name: str) -> bool:
    """Whether `exc` is the unique constraint `name` of `model` refusing a row. PostgreSQL names
    the constraint; SQLite names its columns."""
    diagnostics = getattr(exc.__cause__, "diag", None)
    if diagnostics is not None and getattr(diagnostics, "constraint_name", None):
        return diagnostics.constraint_name == name
    constraint = next(c for c in model._meta.constraints if c.name == name)
    table = model._meta.db_table
    columns = ", ".join(f"{table}.{model._meta.get_field(f).column}" for f in constraint.fields)
    return str(exc) == f"UNIQUE constraint failed: {columns}"


def atomic_retrying(
    operation: Callable[[], T],
    *,
    model: type[models.Model],
    constraints: tuple[str, ...],
    lost: str,
    attempts: int = RACE_ATTEMPTS,
) -> T:
    """Run `operation` in its own transaction (a savepoint inside an outer one); when one of
    `constraints` refuses its rows, roll it back and run it again. After `attempts` lost races the
    caller gets Conflict(`lost`)."""
    attempt = 1
    while True:
        try:
            with transaction.atomic():
                return operation()
        except IntegrityError as exc:
            if not any(constraint_violated(exc, model=model, name=name) for name in constraints):
                raise
            if attempt >= attempts:
                raise Conflict(lost) from exc
            attempt += 1
