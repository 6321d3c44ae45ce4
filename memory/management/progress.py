"""Progress bars for long management commands: drawn on a terminal, silent in pipes, cron and
tests, and with -v0."""

from collections.abc import Callable

from django.core.management.base import BaseCommand
from tqdm import tqdm


class ProgressCommand(BaseCommand):
    """A command whose long steps show a progress bar on stderr."""

    verbosity = 1

    def execute(self, *args, **options):
        self.verbosity = int(options.get("verbosity", 1))
        return super().execute(*args, **options)

    @property
    def progress_shown(self) -> bool:
        stream = getattr(self.stderr, "_out", self.stderr)
        return self.verbosity >= 1 and bool(getattr(stream, "isatty", lambda: False)())

    def progress(self, *, total: int | None, desc: str, unit: str = "it") -> tqdm:
        """A bar to `update(n)` and `close()`; a no-op one when progress is not shown."""
        return tqdm(
            total=total,
            desc=desc,
            unit=unit,
            file=getattr(self.stderr, "_out", self.stderr),
            disable=not self.progress_shown,
            dynamic_ncols=True,
            leave=True,
        )

    def progress_steps(self, *, unit: str = "rows") -> Callable[[str, int, int], None]:
        """A `progress(label, done, total)` callback, as services take it: one bar per label."""
        bars: dict[str, tqdm] = {}

        def step(label: str, done: int, total: int) -> None:
            bar = bars.get(label)
            if bar is None:
                bar = bars[label] = self.progress(total=total, desc=label, unit=unit)
            bar.total = total
            bar.update(done - bar.n)
            if done >= total:
                bar.close()

        return step
