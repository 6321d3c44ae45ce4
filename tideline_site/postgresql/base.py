"""Django's PostgreSQL backend, plus the write path of the database-native search index: a write
to memories or turns queues their ids (triggers), and this connection applies what its own
transaction queued just before committing it (memory/search/postgres.py, native_apply_own), so
the term bags and per-scope statistics change in the same transaction as the rows and no search
inherits a backlog."""

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Set when a statement of the open transaction wrote memories or turns.
        self.search_queued = False
        self.execute_wrappers.append(_write_watch)

    def commit(self) -> None:
        if self.search_queued:
            from memory.search.postgres import native_apply_own

            self.search_queued = False
            try:
                native_apply_own(self)
            except BaseException:
                self.rollback()
                raise
        super().commit()

    def rollback(self) -> None:
        self.search_queued = False
        super().rollback()


def _write_watch(execute, sql, params, many, context):
    # Imported when called: connections are created while the models are still importing.
    from memory.search.postgres import native_write_watch

    return native_write_watch(execute, sql, params, many, context)
