"""`manage.py bench <name> …`: reproducible benchmarks that print their numbers.

Each benchmark lives beside the code it measures, as a module exposing `add_arguments(parser)` and
`run(command, options) -> None`; this command only dispatches, so every area owns its own bench.
`command.progress(total=…, desc=…)` gives a bench a progress bar (terminal only).
"""

from importlib import import_module

from django.core.management.base import CommandError

from memory.management.progress import ProgressCommand

BENCHMARKS = {
    "locomo": "memory.bench.locomo",
    "realmem": "memory.bench.realmem",
    "realmem-memories": "memory.bench.realmem_memories",
    "search": "memory.bench.search",
    "inject": "injection.bench",
    "dream": "dream.bench",
    "lifecycle": "memory.bench.lifecycle",
    "load": "memory.bench.load",
    "scale": "memory.bench.scale",
    "mcp": "injection.mcp_bench",
}


class Command(ProgressCommand):
    help = "Run a benchmark and print its figures: " + ", ".join(BENCHMARKS)

    def add_arguments(self, parser) -> None:
        subparsers = parser.add_subparsers(dest="benchmark", required=True)
        for name, module_path in BENCHMARKS.items():
            module = import_module(module_path)
            subparser = subparsers.add_parser(
                name, help=(module.__doc__ or "").strip().split("\n")[0]
            )
            module.add_arguments(subparser)

    def handle(self, *args, benchmark: str, **options) -> None:
        if benchmark not in BENCHMARKS:
            raise CommandError(
                f"unknown benchmark {benchmark!r}; choose from {', '.join(BENCHMARKS)}"
            )
        import_module(BENCHMARKS[benchmark]).run(self, options)
