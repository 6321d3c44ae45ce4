"""Detect and repair drift between the stored rows and the persistent search index.

Triggers keep the FTS5 tables in step with every write, so drift means something outside Tideline
touched the tables, a restore skipped them, or the tokeniser changed between versions. The check
compares every memory and turn with its word-index row (missing, orphaned, or holding other terms
than the current tokeniser produces) and runs FTS5's integrity check on the trigram indexes.
Repairs rewrite exactly the drifted rows and log them to the change log, so every running
process's in-memory index picks them up on its next query.

On PostgreSQL in native mode the stored documents are checked the same way: each one's term bag
and own terms are recomputed and compared. The settings read when a turn's document is written
(its neighbours and date words) make documents stale too when they change.
"""

from dataclasses import dataclass, field

from django.db import connection, transaction

from memory.models import Actor, AuditAction
from memory.search import schema
from memory.search.text import text_tokens
from memory.services.audit import audit_record

CHUNK = 1000


@dataclass
class Drift:
    kind: str
    missing: list[int] = field(default_factory=list)
    orphaned: list[int] = field(default_factory=list)
    stale: list[int] = field(default_factory=list)
    trigram_ok: bool = True
    # PostgreSQL native only (None on SQLite, whose FTS5 tables keep no separate statistics):
    # document frequencies and scope totals that disagree with a recount.
    statistics_off: int | None = None

    @property
    def clean(self) -> bool:
        return (
            not (self.missing or self.orphaned or self.stale or self.statistics_off)
            and self.trigram_ok
        )


KINDS = {
    "memory": {
        "source": "memory_memory",
        "text": "search_text",
        "word": schema.MEMORY_WORD,
        "trigram": schema.MEMORY_TRIGRAM,
    },
    "turn": {
        "source": "memory_contextturn",
        "text": schema.TURN_TEXT.format(row="memory_contextturn"),
        "word": schema.TURN_WORD,
        "trigram": schema.TURN_TRIGRAM,
    },
}


def _check(kind: str) -> Drift:
    spec = KINDS[kind]
    drift = Drift(kind=kind)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, {spec['text']} FROM {spec['source']} ORDER BY id")
        source = dict(cursor.fetchall())
        cursor.execute(f"SELECT rowid, tokens FROM {spec['word']}")
        indexed = dict(cursor.fetchall())
        try:
            cursor.execute(
                f"INSERT INTO {spec['trigram']}({spec['trigram']}) VALUES ('integrity-check')"
            )
        except Exception:
            drift.trigram_ok = False
    drift.missing = sorted(set(source) - set(indexed))
    drift.orphaned = sorted(set(indexed) - set(source))
    drift.stale = sorted(
        pk
        for pk, text in source.items()
        if pk in indexed and indexed[pk] != text_tokens(text or "")
    )
    return drift


def _repair(drift: Drift) -> None:
    spec = KINDS[drift.kind]
    rewrite = drift.missing + drift.stale
    with connection.cursor() as cursor:
        for ids in (drift.orphaned, drift.stale):
            for start in range(0, len(ids), CHUNK):
                chunk = ids[start : start + CHUNK]
                marks = ",".join(["%s"] * len(chunk))
                cursor.execute(f"DELETE FROM {spec['word']} WHERE rowid IN ({marks})", chunk)
        for start in range(0, len(rewrite), CHUNK):
            chunk = rewrite[start : start + CHUNK]
            marks = ",".join(["%s"] * len(chunk))
            cursor.execute(
                f"INSERT INTO {spec['word']}(rowid, tokens) "
                f"SELECT id, {schema.TOKENS_FUNCTION}({spec['text']}) FROM {spec['source']} "
                f"WHERE id IN ({marks})",
                chunk,
            )
            cursor.executemany(
                f"INSERT INTO {schema.CHANGE_TABLE}(kind, row_id) VALUES (%s, %s)",
                [(drift.kind, pk) for pk in chunk],
            )
        if not drift.trigram_ok:
            cursor.execute(f"INSERT INTO {spec['trigram']}({spec['trigram']}) VALUES ('rebuild')")


def search_index_check(
    *, repair: bool = False, actor: str = Actor.SYSTEM, progress=None
) -> list[Drift]:
    """The drift of each kind of document; with `repair`, fixed and audited (SQLite: in one
    transaction; PostgreSQL: queued and audited in one, then applied as writes are). Empty on
    PostgreSQL with the per-process index, which stores no documents. `progress(label, done,
    total)` is told after each kind is checked and each is repaired."""
    from memory.search import postgres

    if postgres.native_active():
        return _native_check(repair=repair, actor=actor, progress=progress)
    if connection.vendor != "sqlite":
        # PostgreSQL with the per-process index: terms are computed when a process loads.
        return []
    with transaction.atomic():
        drifts = []
        for kind in KINDS:
            drifts.append(_check(kind))
            if progress:
                progress("checking", len(drifts), len(KINDS))
        if repair and not all(drift.clean for drift in drifts):
            for done, drift in enumerate(drifts, 1):
                if not drift.clean:
                    _repair(drift)
                if progress:
                    progress("repairing", done, len(drifts))
            _repair_audit(drifts, actor=actor)
    return drifts


def search_terms_redraw(apps, schema_editor) -> None:
    """A data migration's step for a release that changes how terms are drawn: stored documents
    hold the old terms until rewritten, so upgrading runs the repair `manage.py reindex` runs.
    Such a migration is non-atomic: the PostgreSQL-native repair applies its queue in short
    transactions of its own."""
    search_index_check(repair=True, actor=Actor.SYSTEM)


def _repair_audit(drifts: list[Drift], *, actor: str) -> None:
    audit_record(
        actor=actor,
        action=AuditAction.UPDATE,
        target_type="search_index",
        reason="search index drift repaired",
        after={
            drift.kind: {
                "missing": len(drift.missing),
                "orphaned": len(drift.orphaned),
                "stale": len(drift.stale),
                "trigram_rebuilt": not drift.trigram_ok,
                "statistics_recounted": drift.statistics_off or 0,
            }
            for drift in drifts
        },
    )


def _native_check(*, repair: bool, actor: str, progress) -> list[Drift]:
    """PostgreSQL's stored documents against what the current code and settings compute. A repair
    queues the drifted rows, applies the queue in short transactions as writes do, then recounts
    BM25's statistics from the documents, which a document changed outside the applies leaves off
    (and which are checked against that recount too)."""
    from memory.search import postgres

    drifts = []
    for kind in KINDS:
        missing, orphaned, stale = postgres.native_drift(kind)
        drifts.append(
            Drift(
                kind=kind,
                missing=missing,
                orphaned=orphaned,
                stale=stale,
                statistics_off=postgres.native_statistics_drift(kind),
            )
        )
        if progress:
            progress("checking", len(drifts), len(KINDS))
    if not repair or all(drift.clean for drift in drifts):
        return drifts
    with transaction.atomic():
        for drift in drifts:
            postgres.native_requeue(drift.kind, drift.missing + drift.orphaned + drift.stale)
        _repair_audit(drifts, actor=actor)
    for done, drift in enumerate(drifts, 1):
        postgres.native_sync(drift.kind)
        postgres.native_statistics_rebuild(drift.kind)
        if progress:
            progress("repairing", done, len(drifts))
    return drifts
