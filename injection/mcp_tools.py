"""Tideline's MCP tools: each one operation of `injection.operations`, its parameters generated
from that operation's input model — the same model the REST route parses — so both shells take the
same fields with the same limits, and an unknown argument is an error naming it. Tool descriptions
are the operations' own docstrings, static.

Importing this module imports every operation and the services behind them (~0.15 s with the tool
schemas), so the server (`injection.mcp_server`) builds the tools after the handshake.
"""

import inspect
from collections.abc import Callable
from typing import Annotated, Any

from django.db import close_old_connections
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from injection import operations as ops
from injection.mcp_server import PRINCIPAL_KEY
from injection.operations import fields
from memory.selectors.visibility import LOCAL_AGENT, Principal
from memory.services.audit import request_id_given
from memory.services.errors import TidelineError

MCP_RUNTIME = "mcp"
# As REST reads it (injection.api), so a client's one id follows its call through both shells.
REQUEST_ID_HEADER = "x-request-id"


class _NoInput(fields.Strict):
    pass


READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
IDEMPOTENT_WRITE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
DESTRUCTIVE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)


class ToolSpec:
    """One MCP tool: its name, the operation it calls and the model its arguments are."""

    def __init__(
        self,
        name: str,
        operation: Callable[..., Any],
        model: type[BaseModel] | None,
        annotations: ToolAnnotations,
        *,
        listing: str = "",
        **extra: Any,
    ) -> None:
        self.name = name
        self.operation = operation
        self.model = model
        self.annotations = annotations
        # MCP structured results are objects: a list comes back under this key.
        self.listing = listing
        self.extra = extra


TOOLS = [
    ToolSpec("memory_write", ops.narrative_create, fields.NarrativeIn, WRITE),
    ToolSpec("memory_write_profile", ops.fact_create, fields.FactIn, IDEMPOTENT_WRITE),
    ToolSpec("memory_recall", ops.memory_recall, fields.RecallIn, READ, source="mcp_recall"),
    ToolSpec("memory_list", ops.memories_list, fields.ListIn, READ, listing="memories"),
    ToolSpec(
        "memory_search",
        ops.memories_search,
        fields.SearchIn,
        READ,
        source="mcp_search",
        listing="results",
    ),
    ToolSpec("memory_update", ops.memory_edit, fields.MemoryEditIn, WRITE),
    ToolSpec("memory_expire", ops.memory_expire, fields.MemoryExpireIn, DESTRUCTIVE),
    ToolSpec("memory_surface", ops.memories_surface, fields.SurfaceIn, READ),
    ToolSpec("memory_session_start", ops.session_begin, fields.SessionStartIn, IDEMPOTENT_WRITE),
    ToolSpec("context_record", ops.turn_record, fields.TurnRecordIn, IDEMPOTENT_WRITE),
    ToolSpec("context_sync", ops.turns_record, fields.TurnsIn, IDEMPOTENT_WRITE),
    ToolSpec(
        "context_record_transcript", ops.transcript_record, fields.TranscriptIn, IDEMPOTENT_WRITE
    ),
    ToolSpec("context_search", ops.turns_search, fields.TurnSearchIn, READ, listing="results"),
    ToolSpec(
        "context_search_sessions",
        ops.sessions_search,
        fields.SessionSearchIn,
        READ,
        listing="sessions",
    ),
    ToolSpec("context_timeline", ops.timeline_read, fields.TimelineIn, READ, listing="turns"),
    ToolSpec(
        "memory_read_profiles", ops.profiles_list, fields.ProfilesIn, READ, listing="profiles"
    ),
    ToolSpec("memory_write_self_concept", ops.self_concept_set, fields.SelfConceptIn, WRITE),
    ToolSpec("memory_read_self_concept", ops.self_concept_read, None, READ),
    ToolSpec("memory_write_snapshot", ops.snapshot_create, fields.SnapshotIn, WRITE),
    ToolSpec(
        "memory_read_snapshot", ops.snapshots_list, fields.SnapshotQuery, READ, listing="snapshots"
    ),
    ToolSpec("memory_write_thread", ops.thread_create, fields.ThreadIn, WRITE),
    ToolSpec("memory_update_thread", ops.thread_update, fields.ThreadUpdateIn, IDEMPOTENT_WRITE),
    ToolSpec("memory_read_threads", ops.threads_list, fields.ThreadQuery, READ, listing="threads"),
    ToolSpec("memory_graph", ops.graph_read, fields.WhereIn, READ),
    ToolSpec("memory_attention_heatmap", ops.heatmap_read, fields.AttentionIn, READ),
    ToolSpec("memory_soft_clusters", ops.clusters_read, fields.WhereIn, READ),
    ToolSpec("memory_stats", ops.stats_read, fields.WhereIn, READ),
]


def _principal_of(ctx: Context) -> Principal:
    request = ctx.request_context.request
    if request is None:
        return LOCAL_AGENT
    principal = request.scope.get(PRINCIPAL_KEY)
    if principal is None:
        raise ToolError("a valid API key is required")
    return principal


def _request_id_of(ctx: Context) -> str:
    """The request id over HTTP, from the caller's X-Request-Id as REST takes it; over stdio there
    is no header, and the operation gives the call a fresh one."""
    request = ctx.request_context.request
    if request is None:
        return ""
    return request_id_given(request.headers.get(REQUEST_ID_HEADER, ""))


def _signature(model: type[BaseModel]) -> inspect.Signature:
    """The tool function's signature, parameter for parameter from the model's fields, so the
    published input schema carries every field's type, limits and description."""
    parameters = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    for name, info in model.model_fields.items():
        annotation = Annotated[
            (info.annotation, *info.metadata, Field(description=info.description))
        ]
        default = (
            inspect.Parameter.empty
            if info.is_required()
            else info.get_default(call_default_factory=True)
        )
        parameters.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default
            )
        )
    return inspect.Signature(parameters, return_annotation=dict[str, Any])


def _tool(spec: ToolSpec, *, default_cwd: str) -> Tool:
    model = spec.model or _NoInput

    def call(ctx: Context, **arguments: Any) -> Any:
        close_old_connections()
        try:
            data = model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolError(str(exc)) from exc
        if isinstance(data, fields.WhereIn) and not (data.scope_id or data.cwd or data.git_remote):
            data = data.model_copy(update={"cwd": default_cwd})
        caller = ops.Caller(
            principal=_principal_of(ctx), request_id=_request_id_of(ctx), runtime=MCP_RUNTIME
        )
        try:
            if spec.model is None:
                result = spec.operation(caller=caller, **spec.extra)
            else:
                result = spec.operation(caller=caller, data=data, **spec.extra)
        except TidelineError as exc:
            raise ToolError(str(exc)) from exc
        return {spec.listing: result} if spec.listing else result

    call.__name__ = spec.name
    call.__signature__ = _signature(model)
    call.__annotations__ = {"ctx": Context, "return": dict[str, Any]}
    tool = Tool.from_function(
        call,
        name=spec.name,
        description=inspect.getdoc(spec.operation),
        annotations=spec.annotations,
        structured_output=True,
    )
    # Unknown arguments are an error naming them, as on REST, not silently dropped.
    base = tool.fn_metadata.arg_model
    tool.fn_metadata.arg_model = type(
        base.__name__, (base,), {"model_config": ConfigDict(**base.model_config, extra="forbid")}
    )
    tool.parameters = tool.fn_metadata.arg_model.model_json_schema(by_alias=True)
    return tool


def tools_build(*, default_cwd: str) -> list[Tool]:
    return [_tool(spec, default_cwd=default_cwd) for spec in TOOLS]
