"""What every operation shares: who calls (a principal and a request id), where it works (a scope
id, or a cwd / git remote), and the audit context that stamps each decision with both."""

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from django.db import transaction

from injection.operations.fields import WhereIn
from memory.models import Scope
from memory.selectors.visibility import Principal, scope_ids_held, scope_ids_readable
from memory.services.attribution import GLOBAL, WORKSPACE, Attribution
from memory.services.audit import audit_context, request_id_new
from memory.services.errors import Forbidden, InvalidInput, NotFound
from memory.services.scopes import (
    scope_get,
    scope_global,
    scope_resolve,
    scope_resolve_for_write,
    scope_workspace,
)

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Caller:
    principal: Principal
    request_id: str = ""
    # The runtime a new session is opened under when the caller names none (MCP: "mcp").
    runtime: str = "generic"


def operation(fn: Callable[P, R]) -> Callable[P, R]:
    """Run the operation inside the caller's audit context: every audit row it writes carries the
    principal's actor and key id and one request id."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        caller = kwargs["caller"]
        assert isinstance(caller, Caller)
        with audit_context(
            actor=caller.principal.actor,
            key_id=caller.principal.key_id,
            request_id=caller.request_id or request_id_new(),
        ):
            return fn(*args, **kwargs)

    return wrapper


def _scope_of(principal: Principal, where: WhereIn, *, create: bool) -> Scope:
    if where.scope_id is not None:
        try:
            return scope_get(scope_id=where.scope_id)
        except NotFound:
            # A key restricted to some scopes hears the same refusal for a scope that does not
            # exist as for one it may not use: otherwise it could count the store's scopes.
            if principal.scope_ids is not None:
                raise _refusal() from None
            raise
    if where.cwd or where.git_remote:
        if create:
            return scope_resolve_for_write(cwd=where.cwd, git_remote=where.git_remote)
        return scope_resolve(
            cwd=where.cwd or None, git_remote=where.git_remote or None, create=False
        )
    if principal.scope_ids is not None and len(principal.scope_ids) == 1:
        return scope_get(scope_id=next(iter(principal.scope_ids)))
    if principal.scope_ids is None or principal.include_global:
        return scope_global()
    raise InvalidInput("name the scope (scope_id or cwd): this key holds several", field="scope")


def _refusal() -> Forbidden:
    # The scope is not named: its label is another project's name (or this machine's).
    return Forbidden("this key may not use the scope it named or is in", field="scope")


def _refuse_unless_allowed(principal: Principal, scope: Scope) -> None:
    if not principal.allows(scope):
        raise _refusal()


def scope_for_read(*, caller: Caller, where: WhereIn) -> Scope:
    """The scope a read acts in; asking never creates a scope."""
    scope = _scope_of(caller.principal, where, create=False)
    _refuse_unless_allowed(caller.principal, scope)
    return scope


def require_write(*, caller: Caller) -> None:
    if not caller.principal.can_write:
        raise Forbidden("this key is read-only")


def scope_for_write(*, caller: Caller, where: WhereIn) -> Scope:
    """The scope a write acts in, created on first use. Resolving and authorising share one
    transaction, so a refused request leaves no scope row behind."""
    require_write(caller=caller)
    with transaction.atomic():
        scope = _scope_of(caller.principal, where, create=True)
        _refuse_unless_allowed(caller.principal, scope)
    return scope


def scope_for_memory(
    *, caller: Caller, where: WhereIn, attribution: Attribution
) -> tuple[Scope, str]:
    """The scope a new memory lands in, and why: the one the caller names, else the one its
    kind belongs to (the user's profile → global, this machine → workspace, the work → the
    project it was said in), as far as the caller's key reaches."""
    place = scope_for_write(caller=caller, where=where)
    if where.scope_id is not None:
        return place, "the scope the caller named"
    if attribution.hint == GLOBAL:
        target = scope_global()
    elif attribution.hint == WORKSPACE:
        target = scope_workspace()
    else:
        return place, attribution.why
    if target.pk == place.pk:
        return place, attribution.why
    if not caller.principal.allows(target):
        return place, f"{attribution.why}, but this key does not hold the {target.kind} scope"
    return target, attribution.why


def readable_ids(*, caller: Caller, where: WhereIn) -> list[int]:
    """What a caller in that place reads: the project, its workspace, global (as held)."""
    return scope_ids_readable(
        principal=caller.principal, scope=scope_for_read(caller=caller, where=where)
    )


def readable_or_held_ids(*, caller: Caller, where: WhereIn) -> list[int]:
    """A request that names no place reads everything its key holds."""
    if where.scope_id is None and not where.cwd and not where.git_remote:
        return scope_ids_held(principal=caller.principal)
    return readable_ids(caller=caller, where=where)


def require_global(*, caller: Caller) -> Scope:
    scope = scope_global()
    if not caller.principal.allows(scope):
        raise Forbidden("the self-concept is global; this key does not hold the global scope")
    return scope
