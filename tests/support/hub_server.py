"""A small HTTP server speaking the Hugging Face Hub's file URL layout
(``/{org}/{name}/resolve/{revision}/{filename}``), for testing the real ``huggingface_hub``
client: files from a dict, plus repos that answer 404, 401 (gated), slowly, or oversize."""

from __future__ import annotations

import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0" * 40


class HubServer:
    """``files``: {(repo_id, filename): bytes}. ``gated``/``slow``: repo ids answering 401 / after ``delay_s``."""

    def __init__(self, files: dict[tuple[str, str], bytes], *, gated=(), slow=(), delay_s: float = 2.0):
        self.files, self.gated, self.slow, self.delay_s = files, set(gated), set(slow), delay_s
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _answer(self, body_wanted: bool):
                server.requests.append(self.path)
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    return self._error(404, "RepoNotFound")
                repo, filename = "/".join(parts[:2]), "/".join(parts[4:])
                if repo in server.slow:
                    time.sleep(server.delay_s)
                if repo in server.gated:
                    return self._error(401, "GatedRepo")
                if not any(r == repo for r, _ in server.files):
                    return self._error(404, "RepoNotFound")
                body = server.files.get((repo, filename))
                if body is None:
                    return self._error(404, "EntryNotFound")
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
                self.send_header("X-Repo-Commit", COMMIT)
                self.end_headers()
                if body_wanted:
                    self.wfile.write(body)

            def _error(self, status: int, code: str):
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self):
                self._answer(False)

            def do_GET(self):
                self._answer(True)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
