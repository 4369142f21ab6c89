"""A small HTTP server speaking the Hugging Face Hub's file URL layout
(``/{org}/{name}/resolve/{revision}/{filename}``), for testing the real ``huggingface_hub``
client: files from a dict, plus repos that answer 404, 401 (gated), slowly, or oversize, and
files whose answers lie (:class:`Hostile`: bad headers, endless or compressed bodies, trickles,
stalls, redirects), as a mirror or proxy the user does not control could."""

from __future__ import annotations

import hashlib
import threading
import time
import zlib
from dataclasses import dataclass
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0" * 40
_CHUNK = 1 << 16
# An endless body stops here even if the client never hangs up, so a test of a client that
# reads without end still finishes (and shows how much it read).
ENDLESS_LIMIT_BYTES = 256 << 20
_WAIT_S = 30.0  # the longest a stall waits; the server's stop event ends it sooner


@dataclass(frozen=True, kw_only=True)
class Hostile:
    """How the server lies about one file, for the requests whose method is in ``methods``
    (the others get the honest answer, so a HEAD and a GET can disagree).

    ``headers`` set (or, with value None, drop) headers of the honest answer (Content-Length,
    ETag, X-Repo-Commit). ``body`` replaces the file's bytes on a GET while the declared size
    stays the file's; ``endless`` sends a GET body with no Content-Length that ends only when the
    client hangs up; ``gzip_bytes`` sends a gzip body of that many zero bytes. ``trickle_s`` sends
    the whole answer one byte per that many seconds; ``stall_s`` waits before a HEAD's answer and
    between a GET's headers and its body;
    ``location`` answers ``status`` (302 unless set) with that Location (``"{self}"``: the
    request's own URL, a loop).
    """

    status: int = 200
    headers: tuple[tuple[str, str | None], ...] = ()
    body: bytes | None = None
    endless: bool = False
    gzip_bytes: int = 0
    trickle_s: float = 0.0
    stall_s: float = 0.0
    location: str | None = None
    methods: frozenset[str] = frozenset({"HEAD", "GET"})


@lru_cache(maxsize=4)
def gzip_of_zeros(size: int) -> bytes:
    """A gzip stream of ``size`` zero bytes (about 1,000 times smaller than what it decodes to)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: a gzip header and trailer
    block = bytes(_CHUNK)
    parts = [packer.compress(block) for _ in range(size // _CHUNK)]
    parts.append(packer.compress(bytes(size % _CHUNK)))
    return b"".join(parts) + packer.flush()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a client hanging up mid-answer is expected
        pass


class HubServer:
    """``files``: {(repo_id, filename): bytes}. ``gated``/``slow``: repo ids answering 401 / after
    ``delay_s``. ``hostile``: {(repo_id, filename): :class:`Hostile`} (may be changed while running).
    ``requests`` lists the paths asked, ``bytes_sent`` the body bytes written."""

    def __init__(self, files: dict[tuple[str, str], bytes], *, gated=(), slow=(), delay_s: float = 2.0,
                 hostile: dict[tuple[str, str], Hostile] | None = None):
        self.files, self.gated, self.slow, self.delay_s = files, set(gated), set(slow), delay_s
        self.hostile = dict(hostile or {})
        self.requests: list[str] = []
        self.bytes_sent = 0
        self.stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the Hub speaks it

            def log_message(self, *args):  # keep test output clean
                pass

            def _answer(self, method: str):
                server.requests.append(self.path)
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) < 5 or parts[2] != "resolve":
                    return self._error(404, "RepoNotFound")
                repo, filename = "/".join(parts[:2]), "/".join(parts[4:])
                if repo in server.slow:
                    time.sleep(server.delay_s)
                if repo in server.gated:
                    return self._error(401, "GatedRepo")
                known = {r for r, _ in server.files} | {r for r, _ in server.hostile}
                if repo not in known:
                    return self._error(404, "RepoNotFound")
                body = server.files.get((repo, filename))
                lie = server.hostile.get((repo, filename))
                if lie is not None and method in lie.methods:
                    return self._lie(method, lie, body)
                if body is None:
                    return self._error(404, "EntryNotFound")
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
                self.send_header("X-Repo-Commit", COMMIT)
                self.end_headers()
                if method == "GET":
                    self._send_body(body)

            def _lie(self, method: str, lie: Hostile, body: bytes | None):
                body = body if body is not None else b""
                headers = {"Content-Length": str(len(body)), "ETag": f'"{hashlib.sha256(body).hexdigest()}"',
                           "X-Repo-Commit": COMMIT}
                status = lie.status
                if lie.location is not None:
                    status = lie.status if 300 <= lie.status < 400 else 302
                    own = f"http://{self.headers.get('Host', '')}{self.path}"
                    headers["Location"] = lie.location.replace("{self}", own)
                    headers["Content-Length"] = "0"
                sent = body if method == "GET" else b""
                if method == "GET" and lie.body is not None:
                    sent = lie.body
                    headers["Content-Length"] = str(len(sent))  # honest about itself, not about the file
                if method == "GET" and lie.gzip_bytes:
                    sent = gzip_of_zeros(lie.gzip_bytes)
                    headers["Content-Encoding"] = "gzip"
                    headers["Content-Length"] = str(len(sent))
                for name, value in lie.headers:
                    headers.pop(name, None)
                    if value is not None:
                        headers[name] = value
                if method == "GET" and lie.endless:
                    headers.pop("Content-Length", None)
                headers["Connection"] = "close"  # as this handler does: a client must not reuse the socket
                if status >= 300:
                    sent = b""
                head = f"HTTP/1.1 {status} Lie\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
                self.close_connection = True
                try:
                    if lie.stall_s and method == "HEAD":  # a HEAD has no body to stall before
                        server.stopping.wait(min(lie.stall_s, _WAIT_S))
                    self._send(head.encode("latin-1"), lie.trickle_s)
                    if lie.stall_s and method == "GET":
                        server.stopping.wait(min(lie.stall_s, _WAIT_S))
                    if method == "GET" and lie.endless and status < 300:
                        block = bytes(_CHUNK)
                        while server.bytes_sent < ENDLESS_LIMIT_BYTES and not server.stopping.is_set():
                            self._send(block, lie.trickle_s)
                    elif sent:
                        self._send(sent, lie.trickle_s)
                except OSError:
                    pass  # the client hung up, which is what a bounded client does

            def _send(self, data: bytes, trickle_s: float):
                if not trickle_s:
                    self.wfile.write(data)
                    server.bytes_sent += len(data)
                    return
                for i in range(len(data)):
                    if server.stopping.wait(trickle_s):
                        return
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    server.bytes_sent += 1

            def _send_body(self, body: bytes):
                self.wfile.write(body)
                server.bytes_sent += len(body)

            def _error(self, status: int, code: str):
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                if code == "EntryNotFound":  # the repo exists: the Hub names the commit that lacks the file
                    self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self):
                self._answer("HEAD")

            def do_GET(self):
                self._answer("GET")

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
