"""`manage.py mcp`: Tideline's MCP server, over stdio (default) or streamable HTTP."""

import ipaddress
import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from injection.mcp_server import mcp_http_app, mcp_server_build


class Command(BaseCommand):
    # A stdio client waits for the handshake while this process starts: the system checks (which
    # import the URLconf and the whole REST API, ~0.35 s) are `./tideline up`'s and CI's job.
    requires_system_checks = []
    help = (
        "Serve Tideline's memory tools over MCP: stdio by default, or streamable HTTP "
        "(--http) with Host/Origin checks and a bearer API key."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--http", action="store_true", help="serve streamable HTTP")
        parser.add_argument("--host", default="127.0.0.1", help="HTTP address (loopback only)")
        parser.add_argument("--port", type=int, default=8765, help="HTTP port")
        parser.add_argument(
            "--cwd",
            default="",
            help="stdio: the working directory whose project scope tools use by default "
            "(default: this process's cwd)",
        )

    def handle(self, *args, http: bool, host: str, port: int, cwd: str, **options) -> None:
        server = mcp_server_build(default_cwd="" if http else (cwd or os.getcwd()))
        if not http:
            server.run("stdio")
            return
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise CommandError(f"--host {host!r}: MCP over HTTP listens on loopback only")
        if not 1 <= port <= 65535:
            raise CommandError(f"--port {port} is not a TCP port")
        # Imported here: a stdio client waits for the handshake, and these only serve HTTP.
        import uvicorn

        from injection.services.warmup import server_warm, server_warm_in_background
        from tideline_site.edge import edge_wrap
        from tideline_site.http_protocol import EdgeH11Protocol

        # The edge throttles keys and addresses and bounds bodies before MCP reads them.
        app = edge_wrap(
            mcp_http_app(
                server=server, host=host, port=port, max_body=settings.TIDELINE_API_MAX_BODY_BYTES
            )
        )
        # Over HTTP the server outlives many clients: it builds its tools and pays the embedder and
        # index load before it listens, so a client that can connect gets its first tool call
        # answered at once. (Stdio answers the handshake first and loads all that on demand.) A
        # backlog of rows a crash left unembedded may be long: drained in the background.
        self.stderr.write("Tideline MCP: loading the tools, the embedder and the search index…")
        server.tools_ensure()
        server_warm(drain_pending=False)
        connections.close_all()
        server_warm_in_background()
        self.stderr.write(f"Tideline MCP on http://{host}:{port}/mcp (bearer API key required)")
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="on",
            # Forwarded headers are the edge's business (TIDELINE_TRUSTED_PROXIES), not uvicorn's.
            proxy_headers=False,
            # uvicorn's h11 with a deadline and a bound for request heads, as `./tideline up`.
            http=EdgeH11Protocol,
            timeout_keep_alive=5,
        )
