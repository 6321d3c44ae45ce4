"""`manage.py llm set --base-url URL --model M` and `manage.py llm test`.

The API key is read from a no-echo prompt, or from stdin with `--api-key-stdin` — never from a
command-line argument, where it would land in shell history and the process list. It is stored in
a 0600 file and never printed.
"""

import getpass
import sys

from django.core.management.base import BaseCommand, CommandError

from memory.services.errors import InvalidInput
from memory.services.llm import (
    LLMConfigInvalid,
    LLMUnavailable,
    llm_complete_json,
    llm_config_read,
    llm_config_save,
)


class Command(BaseCommand):
    help = "Configure (set) or check (test) the optional OpenAI-compatible LLM."

    def add_arguments(self, parser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        set_parser = actions.add_parser("set", help="save the endpoint, model and key")
        set_parser.add_argument("--base-url", required=True)
        set_parser.add_argument("--model", required=True)
        key = set_parser.add_mutually_exclusive_group()
        key.add_argument("--api-key-stdin", action="store_true", help="read the key from stdin")
        key.add_argument(
            "--no-api-key", action="store_true", help="the endpoint needs no key (local Ollama)"
        )
        actions.add_parser("test", help="send one small request to the configured LLM")

    def handle(self, *args, action: str, **options) -> None:
        if action == "set":
            self._set(options)
        else:
            self._test()

    def _set(self, options: dict) -> None:
        if options["no_api_key"]:
            api_key = ""
        elif options["api_key_stdin"]:
            api_key = sys.stdin.readline().strip()
            if not api_key:
                raise CommandError("no API key on stdin (use --no-api-key for a keyless endpoint)")
        else:
            if not sys.stdin.isatty():
                raise CommandError(
                    "no terminal to prompt for the key: pipe it with --api-key-stdin"
                )
            api_key = getpass.getpass("API key (not echoed): ").strip()
        try:
            config = llm_config_save(
                base_url=options["base_url"], model=options["model"], api_key=api_key
            )
        except InvalidInput as exc:
            raise CommandError(str(exc)) from exc
        public = config.public()
        self.stdout.write(
            f"LLM set: {public['model']} at {public['base_url']} (key {'stored, 0600' if public['api_key_set'] else 'none'})"
        )

    def _test(self) -> None:
        try:
            config = llm_config_read()
        except LLMConfigInvalid as exc:
            raise CommandError(str(exc)) from exc
        if config is None:
            raise CommandError(
                "no LLM is configured; run `manage.py llm set --base-url URL --model M` first"
            )
        try:
            reply = llm_complete_json(
                system='Answer only the JSON object {"ok": true}.', user="ping", config=config
            )
        except LLMUnavailable as exc:
            raise CommandError(f"the LLM at {config.base_url} did not answer: {exc}") from exc
        if reply.data.get("ok") is not True:
            raise CommandError(f"the LLM at {config.base_url} answered, but not the expected JSON")
        self.stdout.write(
            f"LLM ok: {config.model} at {config.base_url} ({reply.total_tokens} tokens)"
        )
