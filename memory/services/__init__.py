"""Business logic. Services write (one transaction each), selectors read; every interface —
admin, REST, MCP, commands, Celery tasks — parses input, calls one of these, and formats output."""
