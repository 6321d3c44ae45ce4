"""`manage.py reembed [--all]`: back-fill embeddings that are missing, failed or from another model."""

from django.core.management.base import CommandError

from memory.management.progress import ProgressCommand
from memory.services.embedding import embedder_get, embeddings_backfill


class Command(ProgressCommand):
    help = (
        "Embed every memory and turn that needs it (never embedded, failed, embedded by a "
        "different model than the configured one, or holding a vector of another size); --all "
        "re-embeds everything."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--all", action="store_true", help="re-embed every row")
        parser.add_argument("--batch", type=int, default=500, help="rows per progress step")

    def handle(self, *args, all: bool, batch: int, **options) -> None:
        if batch < 1:
            raise CommandError("--batch must be positive")
        try:
            embedder = embedder_get()
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if embedder is None:
            self.stdout.write(
                "TIDELINE_EMBEDDER is none: nothing to embed (search is keyword-only)"
            )
            return
        self.stdout.write(f"embedding with {embedder.model_id}")

        counts = embeddings_backfill(force=all, batch=batch, progress=self.progress_steps())
        self.stdout.write(
            f"embedded {counts['memories']} memories, {counts['turns']} turns and "
            f"{counts['words']} new words (rows that failed stay marked for the next run)"
        )
