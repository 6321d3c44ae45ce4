"""`manage.py reindex [--check]`: find and repair drift between stored rows and the search index."""

from django.db import connection

from memory.management.progress import ProgressCommand
from memory.search.maintenance import search_index_check
from memory.search.postgres import native_active


class Command(ProgressCommand):
    help = (
        "Detect drift between memories/turns and the search index (SQLite's FTS5 tables, "
        "PostgreSQL's stored documents), and repair it."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--check", action="store_true", help="only report drift; change nothing"
        )

    def handle(self, *args, check: bool, **options) -> None:
        if connection.vendor != "sqlite" and not native_active():
            self.stdout.write(
                f"{connection.vendor} with the per-process search index: no stored documents to "
                "check; search terms are computed in each process from the stored text."
            )
            return
        drifts = search_index_check(repair=not check, progress=self.progress_steps(unit="kinds"))
        for drift in drifts:
            state = "clean" if drift.clean else ("drift found" if check else "repaired")
            if drift.statistics_off is None:
                trigram = "ok" if drift.trigram_ok else "damaged" if check else "rebuilt"
                index = f"trigram index {trigram}"
            else:
                recounted = ", recounted" if drift.statistics_off and not check else ""
                index = f"BM25 statistics {drift.statistics_off} off{recounted}"
            self.stdout.write(
                f"{drift.kind:<7} {state}: {len(drift.missing)} missing, "
                f"{len(drift.orphaned)} orphaned, {len(drift.stale)} stale, {index}"
            )
        if check and not all(drift.clean for drift in drifts):
            self.stdout.write("run `manage.py reindex` to repair")
