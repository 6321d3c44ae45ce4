"""`manage.py mcp`: Tideline's MCP server, over stdio (default) or streamable HTTP."""

import ipaddress
import os

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from injection.mcp_server import mcp_http_app, mcp_server_build
from injection.services.warmup import server_warm_in_background
from tideline_site.edge import edge_wrap


class Command(BaseCommand):
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
        # The edge throttles keys and addresses and bounds bodies before MCP reads them.
        app = edge_wrap(
            mcp_http_app(
                server=server, host=host, port=port, max_body=settings.TIDELINE_API_MAX_BODY_BYTES
            )
        )
        # Over HTTP the server outlives many clients: pay the embedder and index load now, not
        # on the first tool call. (Stdio answers the handshake first and loads on demand.)
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
            http="h11",
            timeout_keep_alive=5,
            h11_max_incomplete_event_size=16 * 1024,
        )
