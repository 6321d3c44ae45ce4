"""Logging filters."""

import logging


class RefusalsWithoutTraceback(logging.Filter):
    """A 4xx Django logs (a 403 on the owner panel) keeps its one line without the traceback of
    the PermissionDenied behind it: a refusal is not a failure, and one traceback per refused
    request buries the real ones."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 500) < 500:
            record.exc_info = None
            record.exc_text = None
        return True
