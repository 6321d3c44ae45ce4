"""`manage.py maintain [--dry-run]`: expire what depends on something gone, outlived its TTL, or
decayed without activation. `--dry-run` prints exactly what would change and writes nothing."""

from django.core.management.base import BaseCommand

from memory.services.maintenance import lifecycle_maintain


class Command(BaseCommand):
    help = "Lifecycle maintenance: depends_on gone → expired (scope-gone), TTL, activation decay."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="print what would change; write nothing"
        )

    def handle(self, *args, dry_run: bool, **options) -> None:
        report = lifecycle_maintain(dry_run=dry_run)
        verb = "would expire" if dry_run else "expired"
        for item in report.planned:
            self.stdout.write(f"{verb}: {item.line()}")
        counts = ", ".join(f"{name}: {count}" for name, count in sorted(report.counts().items()))
        total = len(report.planned) if dry_run else report.expired
        self.stdout.write(
            f"{verb} {total} memor{'y' if total == 1 else 'ies'}"
            + (f" ({counts})" if counts else "")
            + f"; {report.checked} distinct dependencies checked in {report.elapsed_ms:.1f} ms"
            + (" — dry run, nothing written" if dry_run else "")
        )
