"""Moving a store: export one scope or everything as JSON Lines, import it elsewhere, back it up.

The export is one header line (format, scope, whether vectors are included, row counts per model)
and then one Django-serialised row per line, every status included (candidates, superseded,
expired, rejected), with evidence, attention, audit and DREAM's records. Primary keys travel with
the rows, so ids quoted in audit rows, `depends_on` and evidence stay true after the move.

A scope's export is that scope's rows plus every row they point at (a fact's profile in the global
scope, a turn another scope's memory cites), and the audit rows about them. Derived DREAM rows
(clusters, keywords, entity graph, runs) are whole-store only: `manage.py dream --layer script`
rebuilds them for an imported scope.

Import writes in one transaction and refuses, before writing anything, rows whose ids the target
already holds: it is for a fresh database, or one that never shared ids with the source. Scopes
are matched by (kind, key), so the global scope every database starts with is reused, and a scope
whose id is taken gets a new one (every reference follows it).
"""

import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, time
from pathlib import Path
from typing import IO

from django.apps import apps
from django.conf import settings
from django.core import serializers
from django.core.exceptions import ValidationError
from django.core.management.color import no_style
from django.core.serializers.base import DeserializationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DataError, IntegrityError, connection, models, transaction
from django.db.models import F
from django.utils import timezone

from memory.models import Actor, AuditAction, AuditEvent, Memory, MemoryStatus, MemoryType, Scope
from memory.search.service import embedder_dimension
from memory.services.audit import audit_record
from memory.services.consolidation import dependency_memory_id
from memory.services.embedding import VECTOR_ITEM_BYTES, embedder_get, turn_words_embed
from memory.services.errors import Conflict, InvalidInput
from memory.services.facts import CLOCK_SKEW
from memory.services.maintenance import interval_repair_audit

FORMAT = "tideline-export"
VERSION = 1
QUERY_CHUNK = 2000
# Rows between two progress reports of an export or import.
PROGRESS_ROWS = 100

# Import order: every row after the rows its triggers read (a memory before its narrative row).
# Foreign keys are checked at commit on both databases, so cycles (supersedes) need no order.
EXPORTED_MODELS = [
    "memory.scope",
    "memory.profile",
    "memory.session",
    "memory.contextturn",
    "memory.memory",
    "memory.narrative",
    "memory.fact",
    "memory.selfconcept",
    "memory.narrativetag",
    "memory.evidence",
    "memory.inboxitem",
    "memory.snapshot",
    "memory.thread",
    "memory.attentionevent",
    "memory.auditevent",
    "memory.apikey",
    "dream.topiccluster",
    "dream.topicclustermember",
    "dream.narrativekeywords",
    "dream.embeddingcluster",
    "dream.embeddingclustermember",
    "dream.embeddingclusteradjacency",
    "dream.entitynode",
    "dream.entityedge",
    "dream.dreamrun",
]
NOT_EXPORTED = {
    "dream.dreamlease": "the lock of a DREAM run in progress, meaningless elsewhere",
    "memory.wordvector": "derived from the turns' words: the import embeds the imported turns' words",
}
# Rows a scope owns directly; the rest of a scope's export follows from these.
SCOPED_MODELS = [
    "memory.profile",
    "memory.session",
    "memory.contextturn",
    "memory.memory",
    "memory.inboxitem",
    "memory.snapshot",
    "memory.thread",
]
MEMORY_CHILDREN = ["memory.narrative", "memory.fact", "memory.selfconcept"]
# Rows that hang off a memory: (model, field pointing at it).
ATTACHED = [
    ("memory.narrativetag", "narrative_id"),
    ("memory.evidence", "memory_id"),
    ("memory.attentionevent", "memory_id"),
]
# Keys are bound to many scopes and DREAM's derived rows to the whole corpus.
WHOLE_STORE_ONLY = [
    "memory.apikey",
    "dream.topiccluster",
    "dream.topicclustermember",
    "dream.narrativekeywords",
    "dream.embeddingcluster",
    "dream.embeddingclustermember",
    "dream.embeddingclusteradjacency",
    "dream.entitynode",
    "dream.entityedge",
    "dream.dreamrun",
]
EMBEDDING_FIELDS = {"embedding", "embedding_model", "embedding_status"}
# `progress(label, rows done, rows in all)`, as the management commands' progress bars take it.
Progress = Callable[[str, int, int], None]


class FullPrecisionEncoder(DjangoJSONEncoder):
    """Django's encoder cuts times to milliseconds; a move must keep them exactly."""

    def default(self, o):
        if isinstance(o, datetime | date | time):
            return o.isoformat()
        return super().default(o)


@dataclass
class TransferReport:
    counts: dict[str, int]
    scope_label: str = ""
    embeddings: bool = True
    remapped_scopes: dict[int, int] = field(default_factory=dict)


def _model(label: str) -> type[models.Model]:
    return apps.get_model(label)


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), QUERY_CHUNK):
        yield ids[start : start + QUERY_CHUNK]


def _values(label: str, ids: set[int], column: str) -> set[int]:
    found: set[int] = set()
    for chunk in _chunks(sorted(ids)):
        found.update(
            value
            for value in _model(label)
            .objects.filter(pk__in=chunk)
            .values_list(column, flat=True)
            .order_by()
            if value is not None
        )
    return found


def _attached(label: str, column: str, ids: set[int]) -> set[int]:
    found: set[int] = set()
    for chunk in _chunks(sorted(ids)):
        found.update(
            _model(label).objects.filter(**{f"{column}__in": chunk}).values_list("pk", flat=True)
        )
    return found


def _scope_selection(scope: Scope) -> dict[str, set[int]]:
    """The scope's own rows, then everything they point at and everything attached to a selected
    memory, until nothing new turns up."""
    selected: dict[str, set[int]] = {label: set() for label in EXPORTED_MODELS}
    selected["memory.scope"].add(scope.pk)
    for label in SCOPED_MODELS:
        selected[label] |= set(
            _model(label).objects.filter(scope_id=scope.pk).values_list("pk", flat=True)
        )
    seen: dict[str, set[int]] = {label: set() for label in EXPORTED_MODELS}
    while any(selected[label] - seen[label] for label in EXPORTED_MODELS):
        for label in EXPORTED_MODELS:
            fresh = selected[label] - seen[label]
            if not fresh:
                continue
            seen[label] |= fresh
            if label == "memory.memory":
                for child in MEMORY_CHILDREN:
                    selected[child] |= _attached(child, "pk", fresh)
                for attached, column in ATTACHED:
                    selected[attached] |= _attached(attached, column, fresh)
            for relation in _model(label)._meta.local_concrete_fields:
                if relation.is_relation and relation.related_model is not None:
                    target = relation.related_model._meta.label_lower
                    if target in selected:
                        selected[target] |= _values(label, fresh, relation.attname)
    audit_ids: set[int] = set()
    for label, ids in selected.items():
        names = {_model(label)._meta.model_name}
        if label in MEMORY_CHILDREN:
            names.add("memory")
        for chunk in _chunks(sorted(ids)):
            audit_ids.update(
                AuditEvent.objects.filter(target_type__in=names, target_id__in=chunk).values_list(
                    "pk", flat=True
                )
            )
    selected["memory.auditevent"] = audit_ids
    for label in WHOLE_STORE_ONLY:
        selected[label] = set()
    return selected


def _queryset(label: str, ids: set[int] | None) -> Iterator[models.Model]:
    manager = _model(label)._base_manager
    # Workspaces before the projects that live in them, so an import can remap them in order.
    order = (F("workspace").asc(nulls_first=True), "pk") if label == "memory.scope" else ("pk",)
    if ids is None:
        yield from manager.order_by(*order).iterator(chunk_size=QUERY_CHUNK)
        return
    for chunk in _chunks(sorted(ids)):
        yield from manager.filter(pk__in=chunk).order_by(*order)


def _field_names(label: str, *, embeddings: bool) -> list[str] | None:
    model = _model(label)
    names = [f.name for f in model._meta.local_fields if f.serialize] + [
        f.name for f in model._meta.local_many_to_many
    ]
    if embeddings or not EMBEDDING_FIELDS & set(names):
        return None
    return [name for name in names if name not in EMBEDDING_FIELDS]


@contextmanager
def _read_snapshot() -> Iterator[None]:
    """Every query inside sees one state of the database. On SQLite a deferred read transaction
    (Django's IMMEDIATE mode would take the write lock and stall every writer for the export).
    Inside a caller's transaction that transaction already is the snapshot."""
    if connection.in_atomic_block:
        yield
        return
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("BEGIN DEFERRED")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("ROLLBACK")
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def _reported(
    rows: Iterator[models.Model], *, done: int, total: int, progress: Progress | None
) -> Iterator[models.Model]:
    """The rows, reporting every PROGRESS_ROWS of them as "exporting" (`done` before the first)."""
    for row in rows:
        yield row
        done += 1
        if progress and done % PROGRESS_ROWS == 0:
            progress("exporting", done, total)


def store_export(
    *,
    out: IO[str],
    scope: Scope | None = None,
    embeddings: bool = True,
    progress: Progress | None = None,
) -> TransferReport:
    """Write the whole store, or one scope, to `out` as JSON Lines. Without `embeddings` vectors
    are left out and the imported rows wait as `pending` for the embedding sweep. One read
    snapshot, so rows written meanwhile are either wholly in or wholly out. `progress` follows
    the rows written."""
    with _read_snapshot():
        selection = _scope_selection(scope) if scope is not None else None
        counts = {
            label: (
                len(selection[label])
                if selection is not None
                else _model(label)._base_manager.count()
            )
            for label in EXPORTED_MODELS
        }
        header = {
            "format": FORMAT,
            "version": VERSION,
            "exported_at": timezone.now().isoformat(),
            "database": connection.vendor,
            "scope": {"kind": scope.kind, "key": scope.key, "label": scope.label}
            if scope
            else None,
            "embeddings": embeddings,
            "counts": counts,
        }
        out.write(json.dumps(header, ensure_ascii=False) + "\n")
        total, written = sum(counts.values()), 0
        for label in EXPORTED_MODELS:
            if not counts[label]:
                continue
            serializers.serialize(
                "jsonl",
                _reported(
                    _queryset(label, selection[label] if selection is not None else None),
                    done=written,
                    total=total,
                    progress=progress,
                ),
                stream=out,
                fields=_field_names(label, embeddings=embeddings),
                cls=FullPrecisionEncoder,
            )
            # The snapshot holds still, so the model's rows are exactly the ones counted.
            written += counts[label]
            if progress:
                progress("exporting", written, total)
    return TransferReport(
        counts=counts, scope_label=scope.label if scope else "", embeddings=embeddings
    )


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's lines with their numbers, each decoded on its own so that a byte that is not
    UTF-8 is reported on its line."""
    with path.open("rb") as raw:
        for number, line in enumerate(raw, start=1):
            try:
                yield number, line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidInput(f"{path}:{number} is not UTF-8 text ({exc.reason})") from exc


def _scan(path: Path) -> tuple[dict, dict[str, set[int]], list[dict]]:
    """The header, the ids per model, and the scope rows, without holding the file in memory."""
    ids: dict[str, set[int]] = {}
    scopes: list[dict] = []
    lines = _lines(path)
    _, first = next(lines, (1, ""))
    try:
        header = json.loads(first or "{}")
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path}:1 is not a Tideline export header") from exc
    if (
        not isinstance(header, dict)
        or header.get("format") != FORMAT
        or header.get("version") != VERSION
    ):
        raise InvalidInput(f"{path}:1 is not the header of a version-{VERSION} Tideline export")
    if not isinstance(header.get("counts"), dict) or not isinstance(
        header.get("scope") or {}, dict
    ):
        raise InvalidInput(f"{path}:1 is a header without its row counts or scope")
    for number, line in lines:
        try:
            row = json.loads(line)
            label, pk, fields = row["model"], int(row["pk"]), row["fields"]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"{path}:{number} is not an exported row: {exc}") from exc
        if label not in EXPORTED_MODELS:
            raise InvalidInput(f"{path}:{number} holds an unknown model {label!r}")
        if not isinstance(fields, dict):
            raise InvalidInput(f"{path}:{number} is not an exported row: its fields are no object")
        if not 0 < pk < 2**63:
            raise InvalidInput(f"{path}:{number} holds an id out of range ({pk})")
        if pk in ids.setdefault(label, set()):
            raise InvalidInput(f"{path}:{number} repeats {label} #{pk}")
        ids[label].add(pk)
        if label == "memory.scope":
            if not isinstance(fields.get("kind"), str) or not isinstance(fields.get("key"), str):
                raise InvalidInput(f"{path}:{number} is a scope without its kind and key")
            scopes.append({"pk": pk, **fields})
    for label, expected in header["counts"].items():
        if not isinstance(expected, int) or isinstance(expected, bool):
            raise InvalidInput(
                f"{path}:1 gives {label} a row count of {expected!r}, not a whole number"
            )
        if len(ids.get(label, ())) != expected:
            raise InvalidInput(
                f"{path} is incomplete: {label} has {len(ids.get(label, ()))} rows,"
                f" the header says {expected}"
            )
    return header, ids, scopes


def _scope_plan(scopes: list[dict]) -> tuple[dict[int, int], set[int]]:
    """Where each exported scope lands: (old id → existing id for scopes the target already
    has, ids to insert under a fresh id because theirs is taken)."""
    existing = {(kind, key): pk for pk, kind, key in Scope.objects.values_list("pk", "kind", "key")}
    taken = set(existing.values())
    mapping: dict[int, int] = {}
    renumber: set[int] = set()
    for row in scopes:
        same = existing.get((row["kind"], row["key"]))
        if same is not None:
            mapping[row["pk"]] = same
        elif row["pk"] in taken:
            renumber.add(row["pk"])
    return mapping, renumber


def _collisions(ids: dict[str, set[int]]) -> dict[str, int]:
    clashes = {}
    for label, wanted in ids.items():
        if label == "memory.scope":
            continue
        found = sum(
            _model(label)._base_manager.filter(pk__in=chunk).count()
            for chunk in _chunks(sorted(wanted))
        )
        if found:
            clashes[label] = found
    return clashes


def _scope_columns(model: type[models.Model]) -> list[str]:
    return [
        relation.attname
        for relation in model._meta.local_concrete_fields
        if relation.is_relation and relation.related_model is Scope
    ]


def _dangling_refuse(*, path: Path, stored: dict[str, dict[int, int]]) -> None:
    """Refuse, naming its line, an imported row that points at a row neither the file nor this
    store holds. Both databases check foreign keys only at commit, where the error names no
    row."""
    for label, lines in stored.items():
        model = _model(label)
        links = [
            (model, "pk", relation.attname, relation.related_model, relation.target_field.attname)
            for relation in model._meta.local_concrete_fields
            if relation.is_relation and relation.related_model is not None
        ] + [
            (
                many.remote_field.through,
                f"{many.m2m_field_name()}_id",
                f"{many.m2m_reverse_field_name()}_id",
                many.related_model,
                "pk",
            )
            for many in model._meta.local_many_to_many
        ]
        for table, source, column, target, target_column in links:
            for chunk in _chunks(sorted(lines)):
                # Without its ordering: a model ordered by a foreign key's fields (a turn by its
                # session's start) joins that row in, and the join drops the dangling row.
                dangling = (
                    table._base_manager.order_by()
                    .filter(**{f"{source}__in": chunk})
                    .exclude(**{f"{column}__isnull": True})
                    .exclude(**{f"{column}__in": target._base_manager.values(target_column)})
                    .values_list(source, flat=True)
                    .first()
                )
                if dangling is not None:
                    raise InvalidInput(
                        f"{path}:{lines[dangling]} points at a {target._meta.label_lower} row"
                        " that is neither in the file nor in this store"
                    )


def _invalid(instance: models.Model) -> str | None:
    """Why a deserialised row holds a value its model refuses, if it does. The database stores a
    status no lifecycle knows, a confidence of 5 or a dependency that is no list as readily as
    good ones, and such a memory then drops out of every read or can no longer be edited."""
    for column in instance._meta.local_concrete_fields:
        if column.is_relation:
            continue
        value = getattr(instance, column.attname)
        if column.default in (list, dict) and not (
            isinstance(value, column.default) or (value is None and column.null)
        ):
            return f"{column.name} must be a JSON {'list' if column.default is list else 'object'}"
        if value in column.empty_values:
            continue
        if column.choices and value not in {choice for choice, _ in column.flatchoices}:
            return f"{column.name} {value!r} is not one of {[c for c, _ in column.flatchoices]}"
        try:
            column.run_validators(value)
        except ValidationError as exc:
            return f"{column.name} {value!r}: {' '.join(exc.messages)}"
    if type(instance) is Memory:
        for item in instance.depends_on:
            if not isinstance(item, str) or not (
                dependency_memory_id(item) is not None
                or (
                    item.startswith("path:")
                    and Path(item.removeprefix("path:")).is_absolute()
                    and "\x00" not in item
                )
            ):
                return f"depends_on entry {item!r} is not 'path:/absolute/path' or 'memory:<id>'"
        # A write refuses it (fact_validate): the fact would hold its key while every read of
        # the present passed it by.
        if (
            instance.memory_type == MemoryType.FACT
            and instance.status in (MemoryStatus.ACTIVE, MemoryStatus.CANDIDATE)
            and _dated_ahead(instance.valid_from)
        ):
            return (
                f"valid_from {instance.valid_from.isoformat()} is in the future: a current fact"
                " records what is or was true"
            )
    return None


def _dated_ahead(moment: datetime | None) -> bool:
    """Whether `moment` is later than a writer's clock may run ahead of this one (a naive moment
    is in the current time zone, as Django stores it)."""
    if moment is None:
        return False
    now = timezone.now()
    return moment > (timezone.make_naive(now) if timezone.is_naive(moment) else now) + CLOCK_SKEW


def _vector_invalid(instance: models.Model, dims: dict[str, int]) -> str | None:
    """Why a row's vector cannot be searched, if it cannot: search reads it as float32s of its
    model's dimension, and one stored otherwise failed every search after it. `dims` holds each
    embedding model's dimension as known (the configured embedder's, else the first vector of
    that model in the file) and learns it from this row."""
    blob = getattr(instance, "embedding", None)
    if not blob:
        return None
    size = len(bytes(blob))
    if size % VECTOR_ITEM_BYTES:
        return f"embedding is {size} bytes, not a whole number of {VECTOR_ITEM_BYTES}-byte floats"
    model, dim = instance.embedding_model, size // VECTOR_ITEM_BYTES
    expected = dims.setdefault(model, dim)
    if dim != expected:
        return f"embedding has {dim} dimensions where {model!r} vectors have {expected}"
    return None


def _dims_known() -> dict[str, int]:
    """The configured embedder's dimension by its model id, when it is known."""
    embedder = embedder_get()
    dim = embedder_dimension(embedder)
    return {embedder.model_id: dim} if embedder is not None and dim else {}


def _stable_keys_derive(*, path: Path, stored: dict[str, dict[int, int]]) -> None:
    """Give every imported memory the key its own rows make. The key names the scope and the
    profile by id, and a scope that lands under a new id would otherwise keep its old one:
    another fact of the same key would then be current beside it. A row is saved raw, so
    Memory.save never derives it; the parent row is stored keyless and keyed here, once its
    kind's row is in, refused on its line when its key already has a current row."""
    lines = stored.get("memory.memory", {})
    for label in MEMORY_CHILDREN:
        ids = set(stored.get(label, ())) | set(lines)
        for chunk in _chunks(sorted(ids)):
            for memory in _model(label)._base_manager.filter(pk__in=chunk):
                key = memory.compose_stable_key()
                if key == memory.stable_key:
                    continue
                try:
                    Memory._base_manager.filter(pk=memory.pk).update(stable_key=key)
                except IntegrityError as exc:
                    line = lines.get(memory.pk) or stored[label][memory.pk]
                    raise InvalidInput(
                        f"{path}:{line} cannot be stored here: its key {key!r} has a current"
                        " memory in this store"
                    ) from exc


def store_import(
    *, path: Path, actor: str = Actor.OWNER, progress: Progress | None = None
) -> TransferReport:
    """Load an export into this database in one transaction (see the module docstring for what
    is refused). Sequences are moved past the imported ids; one audit row records the import.
    `progress` follows the rows read, then the words embedded."""
    header, ids, scopes = _scan(path)
    total = sum(len(rows) for rows in ids.values())
    dims = _dims_known()
    with transaction.atomic():
        mapping, renumber = _scope_plan(scopes)
        clashes = _collisions(ids)
        if clashes:
            listed = ", ".join(f"{label} ×{count}" for label, count in sorted(clashes.items()))
            raise Conflict(
                f"this database already holds rows with the exported ids ({listed});"
                " import into a fresh database"
            )
        counts: dict[str, int] = {}
        stored: dict[str, dict[int, int]] = {}
        # An audit row keeps its key id only when that key travels in the same file (a whole
        # store): a scope's export carries no keys, and the id would name whichever key this
        # store gave it. The ids are kept in the import's own audit row instead.
        keys_moved = ids.get("memory.apikey", set())
        unlinked: dict[str, list[int]] = {}
        inverted: dict[int, datetime] = {}
        lines = _lines(path)
        next(lines)
        for number, line in lines:
            # Every row before this one is in (line 1 is the header).
            if progress and (number - 2) % PROGRESS_ROWS == 0:
                progress("importing", number - 2, total)
            try:
                (row,) = serializers.deserialize("jsonl", [line])
            except DeserializationError as exc:
                raise InvalidInput(
                    f"{path}:{number} is not a row this store can read: {exc.__cause__ or exc}"
                ) from exc
            instance = row.object
            label = instance._meta.label_lower
            invalid = _invalid(instance) or _vector_invalid(instance, dims)
            if invalid:
                raise InvalidInput(f"{path}:{number} is not a valid {label} row: {invalid}")
            if label == "memory.memory":
                instance.stable_key = None
                if instance.valid_to is not None and instance.valid_to < instance.valid_from:
                    # An export of an older release may hold a row a backdated write left ending
                    # before it began, which the database refuses: it lands ending where it
                    # begins, audited once it is in.
                    inverted[instance.pk] = instance.valid_to
                    instance.valid_to = instance.valid_from
            if label == "memory.scope":
                old = instance.pk
                if old in mapping:
                    continue
                if old in renumber:
                    instance.pk = None
            for column in _scope_columns(type(instance)):
                value = getattr(instance, column)
                setattr(instance, column, mapping.get(value, value))
            if "scopes" in (row.m2m_data or {}):
                row.m2m_data["scopes"] = [
                    mapping.get(int(pk), int(pk)) for pk in row.m2m_data["scopes"]
                ]
            if label == "memory.auditevent" and instance.key_id not in (None, *keys_moved):
                unlinked.setdefault(str(instance.key_id), []).append(instance.pk)
                instance.key_id = None
            try:
                row.save(force_insert=True)
            except (IntegrityError, DataError, OverflowError, UnicodeEncodeError) as exc:
                raise InvalidInput(f"{path}:{number} cannot be stored here: {exc}") from exc
            if label == "memory.scope" and old in renumber:
                mapping[old] = instance.pk
            counts[label] = counts.get(label, 0) + 1
            stored.setdefault(label, {})[instance.pk] = number
        if progress:
            progress("importing", total, total)
        _dangling_refuse(path=path, stored=stored)
        _stable_keys_derive(path=path, stored=stored)
        for memory in Memory._base_manager.filter(pk__in=list(inverted)):
            interval_repair_audit(memory=memory, ended=inverted[memory.pk], actor=actor)
        statements = connection.ops.sequence_reset_sql(
            no_style(), [_model(label) for label in EXPORTED_MODELS]
        )
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        scope = header.get("scope") or {}
        audit_record(
            actor=actor,
            action=AuditAction.INSERT,
            target_type="store",
            reason=(
                f"imported {sum(counts.values())} rows from {path.name}"
                f" ({scope.get('label') or 'whole store'}, exported {header.get('exported_at')}"
                f" from {header.get('database')})"
            )[:500],
            after={
                "counts": counts,
                "remapped_scopes": {str(k): v for k, v in mapping.items()},
                "audit_rows_by_source_key": unlinked,
            },
        )
    if header.get("embeddings"):
        # Turns imported with their vectors queue no embedding task, and that task is what embeds
        # a turn's words (for query expansion): they are embedded here, after the commit.
        turn_words_embed(turn_ids=sorted(ids.get("memory.contextturn", ())), progress=progress)
    return TransferReport(
        counts=counts,
        scope_label=scope.get("label", ""),
        embeddings=bool(header.get("embeddings")),
        remapped_scopes=mapping,
    )


def _backup_refusal(destination: Path, database: Path) -> str | None:
    """Why `destination` must not be replaced by a backup, if it must not: the store's own files
    (the database and its journals, the secret key, the LLM settings) or anything that is not a
    regular file. Replacing any of them loses the store, breaks every later command or swaps a
    device for a file."""
    own = {
        database.with_name(database.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")
    }
    own.add((Path(settings.DATA_DIR) / "secret_key").resolve())
    own.add(Path(settings.TIDELINE_LLM_CONFIG_FILE).expanduser().resolve())
    if destination in own:
        return "it is one of the live store's own files"
    if destination.is_dir():
        return "it is a directory; name the backup file to write"
    if destination.exists() and not destination.is_file():
        return "it is not a regular file"
    return None


def store_backup(*, destination: Path) -> int:
    """Copy the live SQLite database to `destination` with SQLite's online backup API: one
    consistent snapshot while writers carry on (never a file copy, which can tear a WAL database).
    Written beside the destination and renamed into place, owner-readable only; a failed backup
    leaves no copy behind, since the copy holds every secret in the store. Returns bytes."""
    if connection.vendor != "sqlite":
        raise InvalidInput("backup copies SQLite databases; use pg_dump for PostgreSQL")
    source_path = Path(connection.settings_dict["NAME"]).resolve()
    destination = destination.expanduser().resolve()
    refusal = _backup_refusal(destination, source_path)
    if refusal:
        raise InvalidInput(f"the backup must not overwrite {destination}: {refusal}")
    partial = destination.with_name(f".{destination.name}.partial")
    created = False
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        partial.unlink(missing_ok=True)
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        created = True
        source = sqlite3.connect(
            source_path, timeout=connection.settings_dict["OPTIONS"]["timeout"]
        )
        target = sqlite3.connect(partial)
        try:
            source.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")
        finally:
            target.close()
            source.close()
        os.replace(partial, destination)
    except (OSError, sqlite3.Error) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise InvalidInput(f"cannot write the backup to {destination}: {reason}") from exc
    finally:
        if created:
            partial.unlink(missing_ok=True)
    return destination.stat().st_size


def postgres_dump_command(*, destination: Path) -> str:
    """The pg_dump line that backs this PostgreSQL database up (the password, if any, comes from
    PGPASSWORD or ~/.pgpass, never from here)."""
    database = connection.settings_dict
    parts = ["pg_dump", "--format=custom", f"--file={destination}"]
    if database.get("HOST"):
        parts.append(f"--host={database['HOST']}")
    if database.get("PORT"):
        parts.append(f"--port={database['PORT']}")
    if database.get("USER"):
        parts.append(f"--username={database['USER']}")
    parts.append(database["NAME"])
    return " ".join(parts)
