"""Serve the repository to this machine only, for the page in hosts/web (standard library only).

    python hosts/web/serve.py            # then open http://127.0.0.1:8000/hosts/web/
    python hosts/web/serve.py --port 0   # any free port

The page needs the host library (hosts/node/src), the npm packages' browser builds
(hosts/node/node_modules, after `npm ci` there) and the export folders under one origin, so the
repository root is served. The headers COOP/COEP make the page cross-origin isolated, which lets
onnxruntime-web run WebAssembly with threads; `python -m http.server` works too, with one thread.
"""

import argparse
import functools
import http.server
from pathlib import Path
from typing import ClassVar

ROOT = Path(__file__).resolve().parents[2]
TYPES = {
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".wasm": "application/wasm",
    ".json": "application/json",
}


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        **TYPES,
    }

    def end_headers(self) -> None:
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:
        if self.server.verbose:
            super().log_message(format, *args)


def make_server(
    *, root: Path = ROOT, host: str = "127.0.0.1", port: int = 8000, verbose: bool = False
) -> http.server.ThreadingHTTPServer:
    """A server of `root` (not yet serving: call serve_forever, and shutdown to stop it)."""
    server = http.server.ThreadingHTTPServer((host, port), functools.partial(Handler, directory=str(root)))
    server.daemon_threads = True
    server.verbose = verbose
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the repository for the onnxformer web page.")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="the port (0: any free one)")
    arguments = parser.parse_args()
    if not (ROOT / "hosts/node/node_modules/onnxruntime-web").is_dir():
        parser.exit(
            2, "hosts/node/node_modules is missing: run `npm ci` in hosts/node first (see its README)\n"
        )
    server = make_server(host=arguments.host, port=arguments.port, verbose=True)
    host, port = server.server_address[:2]
    print(f"serving {ROOT} on http://{host}:{port}/hosts/web/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
