"""A bounded fetch of a model's small files from a Hub endpoint that may lie.

``HF_ENDPOINT`` can point at a mirror or a proxy the user does not control, and
``huggingface_hub``'s own download trusts its headers: it builds cache paths from the ETag and
``X-Repo-Commit``, follows redirects anywhere, reads a body for as long as it flows and retries.
So the network part is done here, and nothing the endpoint answers is used before it is parsed:

* **one deadline** over every request of a :class:`HubFetch` (all files of one model): a watchdog
  shuts the open sockets when it passes, so a trickle (one byte a second restarts a per-read
  timeout forever) or a stall ends on time;
* **one attempt** per request (no retries, no back-off) and at most :data:`MAX_REDIRECTS`
  redirects, each to the endpoint's own scheme, host and port (elsewhere would carry the token
  to another host and size another host's file);
* **the metadata first** (a HEAD): ``X-Repo-Commit`` must be 40 hex digits, the ETag a plain
  token (letters, digits, ``._-``; no ``/``, ``\\``, ``..`` or NUL), the size digits and under
  the file's cap, before the body is asked;
* **the body** (a GET) is read decoded, in chunks, to at most the declared size or the cap
  (whatever ``Content-Length`` or ``Content-Encoding`` say), then checked against the declared size;
* **the cache**: files are written only below the cache folder, in the client's layout
  (``blobs/<etag>``, ``snapshots/<commit>/<file>``, ``refs/main``) with the names checked above,
  through a temporary file moved into place; a cached file is read only when its real path lies
  inside the cache folder.

The real client still gives the URLs (``hf_hub_url``), the headers (``build_hf_headers``: token,
user agent), the Hub's error classes (``hf_raise_for_status`` on the metadata answer, which has
no body), the cache folder's names (``repo_folder_name``) and the offline look-up
(``try_to_load_from_cache``), so its cache and this module's are one.
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from inputs.errors import shown
from inputs.uploads import read_capped
from sizing.errors import SizingError

MAX_REDIRECTS = 3  # the Hub redirects a renamed repo once; a loop is refused after a few hops
REVISION = "main"  # the only revision asked: a branch name, so the answer names its commit
_CHUNK_BYTES = 1 << 16  # decoded bytes per read: a gzip bomb is expanded this much at a time
_MAX_LOCATION_CHARS = 2048
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # one safe path component: an ETag, a file name
_SIZE = re.compile(r"[0-9]{1,15}")  # a petabyte at most; the caps are megabytes
_RETRY_AFTER = re.compile(r"[0-9]{1,6}")  # seconds; an HTTP date is not repeated


class _NoHeaderParseWarnings(logging.Filter):
    """Drops urllib3's "Failed to parse headers" warning, which it logs with a traceback: a lying
    endpoint's headers (or the deadline cutting them off) are refused here with one message,
    and the warning would print a traceback to a command line's stderr beside it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to parse headers")


logging.getLogger("urllib3.connection").addFilter(_NoHeaderParseWarnings())


class HubUnavailable(Exception):
    """No usable answer, for a reason the shipped catalogue may stand in for (the network, a
    5xx answer, a rate limit, too slow, offline without a cached copy). ``problem`` is a phrase
    such as ``"the Hub is unreachable (ConnectionError)"``."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def _refuse(message: str) -> SizingError:
    return SizingError("model_id", message)


def check_repo_id(text: object) -> str:
    """``text`` if it is a Hub repo id (``org/name``); :class:`SizingError` on ``model_id`` otherwise.

    It becomes a URL path and a cache folder name (``models--org--name``), hence no ``..`` and no ``--``.
    """
    if not isinstance(text, str) or not _REPO_ID.fullmatch(text) or ".." in text or "--" in text:
        raise _refuse(f"{str(text)[:60]!r} is not a Hugging Face repo id (org/name; no URLs or paths)")
    return text


class _Deadline:
    """``seconds`` from now, for every request made while it runs. At the end a watchdog shuts
    the sockets of the connections :meth:`track` was given, which wakes a blocked read."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds
        self._connections: list[object] = []
        self._lock = threading.Lock()
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def left(self) -> float:
        """Seconds left; :class:`HubUnavailable` once none are."""
        left = self._end - time.monotonic()
        if left <= 0 or self.expired:
            raise self.too_slow()
        return left

    def too_slow(self) -> HubUnavailable:
        return HubUnavailable(f"the Hub is too slow (no complete answer within {self.seconds:g} s)")

    def track(self, connection: object) -> None:
        with self._lock:
            self._connections.append(connection)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            connections = list(self._connections)
        for connection in connections:
            sock = getattr(connection, "sock", None)
            if sock is None:
                continue
            try:  # the plain socket call: an SSL socket's own shutdown would drop its TLS state first
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except (OSError, TypeError, ValueError):
                pass  # already closed: nothing left to wake


def _session(deadline: _Deadline):
    """A ``requests`` session whose connections the deadline can shut, and which never retries."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class Tracked:
        def __init__(self, *args, deadline: _Deadline, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._deadline = deadline

        def _new_conn(self):
            connection = super()._new_conn()
            self._deadline.track(connection)
            return connection

    class HTTPPool(Tracked, HTTPConnectionPool):
        pass

    class HTTPSPool(Tracked, HTTPSConnectionPool):
        pass

    pools = {"http": partial(HTTPPool, deadline=deadline), "https": partial(HTTPSPool, deadline=deadline)}

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools

        def proxy_manager_for(self, proxy, **kwargs):
            manager = super().proxy_manager_for(proxy, **kwargs)
            if not proxy.lower().startswith("socks"):  # SOCKS pools are their own; reads stay bounded by the timeout
                manager.pool_classes_by_scheme = pools
            return manager

    session = requests.Session()
    adapter = Adapter(max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


def _place(origin: tuple[str, str, int]) -> str:
    scheme, host, port = origin
    return f"{scheme}://{host}:{port}"


def check_endpoint(endpoint: object) -> str:
    """``endpoint`` without a trailing ``/`` if it is an http(s) URL with a host; else refused."""
    text = endpoint if isinstance(endpoint, str) else ""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        parts = None
    if (parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname
            or parts.query or parts.fragment or not text.isascii() or any(c in text for c in " \r\n\x00")):
        raise _refuse(f"the Hub endpoint {shown(endpoint)} is not an http(s) URL (set HF_ENDPOINT to one)")
    return text.rstrip("/")


def _offline() -> bool:
    from huggingface_hub import constants

    # The client reads HF_HUB_OFFLINE once, at import; a later change still counts here.
    return constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


class HubFetch:
    """Files of Hub repos under one deadline of ``timeout_s`` seconds; use as a context manager.

    ``endpoint`` is checked by :func:`check_endpoint`; ``cache_dir`` is the client's cache
    folder (``HF_HUB_CACHE``); ``token`` as the client takes it (None: ``HF_TOKEN`` or the
    stored login).
    """

    def __init__(self, *, endpoint: str, cache_dir: str, token: str | None, timeout_s: float) -> None:
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
            raise _refuse(f"the Hub timeout must be a positive number of seconds, not {shown(timeout_s)}")
        self.endpoint = check_endpoint(endpoint)
        self.cache_dir = cache_dir
        self._token = token
        self._deadline = _Deadline(float(timeout_s))
        self._session = None

    def __enter__(self) -> HubFetch:
        self._deadline.start()
        return self

    def __exit__(self, *exc) -> None:
        self._deadline.cancel()
        if self._session is not None:
            self._session.close()

    # ---- one file ------------------------------------------------------------------------------
    def read(self, repo_id: str, filename: str, *, cap: int) -> bytes | None:
        """The bytes of ``filename`` (a top-level file of a plain name) in ``repo_id``, at most
        ``cap`` of them; None when the repo has no such file.

        Raises :class:`HubUnavailable` (the caller may fall back), :class:`SizingError` on
        ``model_id`` (a refused answer, a file over ``cap``, an unusable cache folder), or the
        client's ``GatedRepoError`` / ``RepositoryNotFoundError`` / ``HfHubHTTPError`` for the
        Hub's own refusals.
        """
        repo_id = check_repo_id(repo_id)
        if not _TOKEN.fullmatch(filename) or ".." in filename:
            raise ValueError(f"{filename!r}: only top-level files of plain names are fetched")
        if _offline():
            return self._read_offline(repo_id, filename, cap)
        storage = self._storage(repo_id)
        name = f"{repo_id}'s {filename}"
        metadata = self._metadata(repo_id, filename, name, storage)
        if metadata is None:
            return None
        etag, commit, size, url = metadata
        if size is not None and size > cap:
            raise _refuse(f"{name} is {size:,} bytes, over the {cap:,}-byte limit")
        blob = storage / "blobs" / etag
        pointer = storage / "snapshots" / commit / filename
        data = self._cached(pointer, cap)
        if data is None:
            data = self._cached(blob, cap)
        if data is None:
            data = self._body(url, name, size, cap)
        self._store(storage, blob, pointer, commit, data)
        return data

    # ---- the metadata ----------------------------------------------------------------------------
    def _metadata(self, repo_id: str, filename: str, name: str,
                  storage: Path) -> tuple[str, str, int | None, str] | None:
        """(etag, commit, declared size or None, URL of the body) from a checked HEAD answer;
        None when the Hub says the repo lacks the file (noted in the cache, as the client does,
        when the answer's ``X-Repo-Commit`` is a commit, so that offline the lack is known)."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.errors import EntryNotFoundError
        from huggingface_hub.utils import hf_raise_for_status

        url = hf_hub_url(repo_id, filename, revision=REVISION, endpoint=self.endpoint)
        response, url = self._request("HEAD", url, name)
        with response:
            status, headers = response.status_code, response.headers
            self._raise_unavailable(status, headers)
            if status >= 400:
                try:
                    hf_raise_for_status(response)  # the Hub's own refusal classes; a HEAD has no body to read
                except EntryNotFoundError:
                    commit = (headers.get("X-Repo-Commit") or "").strip()
                    if _COMMIT.fullmatch(commit):
                        self._store_missing(storage, commit, filename)
                    return None
            if status != 200:
                raise _refuse(f"the Hub answered HTTP {status} for {name}")
        commit = _header(headers, "X-Repo-Commit", name)
        if not _COMMIT.fullmatch(commit):
            raise _bad_header(name, "X-Repo-Commit", commit, "not 40 lowercase hex digits")
        etag_name = "X-Linked-Etag" if "X-Linked-Etag" in headers else "ETag"
        etag = _plain_etag(_header(headers, etag_name, name))
        if etag is None:
            raise _bad_header(name, etag_name, headers[etag_name], "not a plain token")
        size_name = "X-Linked-Size" if "X-Linked-Size" in headers else "Content-Length"
        size = headers.get(size_name)
        if size is not None and not _SIZE.fullmatch(size.strip()):
            raise _bad_header(name, size_name, size, "not a byte count")
        return etag, commit, None if size is None else int(size), url

    @staticmethod
    def _raise_unavailable(status: int, headers) -> None:
        if status == 429:
            wait = (headers.get("Retry-After") or "").strip()
            after = f", retry after {int(wait):,} s" if _RETRY_AFTER.fullmatch(wait) else ""
            raise HubUnavailable(f"the Hub is rate limiting requests (HTTP 429{after})")
        if status >= 500:
            raise HubUnavailable(f"the Hub is unreachable (HTTP {status})")

    # ---- requests ------------------------------------------------------------------------------
    def _request(self, method: str, url: str, name: str):
        """(response, final URL): one attempt per hop, redirects on the endpoint's origin only."""
        from huggingface_hub.utils import build_hf_headers
        from requests.exceptions import RequestException

        if self._session is None:
            self._session = _session(self._deadline)
        headers = build_hf_headers(token=self._token, headers={"Accept-Encoding": "identity"})
        for _ in range(MAX_REDIRECTS + 1):
            left = self._deadline.left()
            try:
                response = self._session.request(method, url, headers=headers, stream=True, allow_redirects=False,
                                                 timeout=(left, left))
            except (RequestException, OSError) as exc:
                raise self._network(exc) from None
            except ValueError:  # requests parses a redirect's Location even when not following it
                raise _refuse(f"the Hub's answer for {name} is not valid HTTP (a header that does not parse, "
                              "such as its Location)") from None
            if self._deadline.expired:  # headers cut short by the watchdog parse as a shorter answer
                response.close()
                raise self._deadline.too_slow()
            if not 300 <= response.status_code < 400:
                return response, url
            location = response.headers.get("Location")
            response.close()
            url = self._redirect(url, location, name)
        raise _refuse(f"the Hub redirected {name} more than {MAX_REDIRECTS} times")

    def _redirect(self, url: str, location: str | None, name: str) -> str:
        if location is None:
            raise _refuse(f"the Hub's redirect for {name} has no Location header")
        if (len(location) > _MAX_LOCATION_CHARS or not location.isascii()
                or any(c in location for c in "\r\n\x00\\")):
            raise _bad_header(name, "Location", location, "not a plain URL")
        try:
            target = urljoin(url, location.strip())
            origin = _origin(target)
        except ValueError:
            raise _bad_header(name, "Location", location, "not a URL") from None
        own = _origin(self.endpoint)
        if origin != own:
            raise _refuse(f"the Hub redirected {name} to another host ({shown(_place(origin))}); only redirects "
                          f"on {_place(own)} are followed")
        return target

    def _network(self, exc: BaseException) -> HubUnavailable:
        from requests.exceptions import Timeout
        from urllib3.exceptions import TimeoutError as Urllib3Timeout

        if self._deadline.expired or isinstance(exc, (Timeout, Urllib3Timeout, TimeoutError)):
            return self._deadline.too_slow()
        return HubUnavailable(f"the Hub is unreachable ({type(exc).__name__})")

    # ---- the body ------------------------------------------------------------------------------
    def _body(self, url: str, name: str, size: int | None, cap: int) -> bytes:
        """The decoded body, at most ``size`` (when declared) or ``cap`` bytes, read in chunks."""
        from requests.exceptions import RequestException
        from urllib3.exceptions import DecodeError, HTTPError

        response, _ = self._request("GET", url, name)
        limit = cap if size is None else size
        chunks: list[bytes] = []
        total = 0
        with response:
            self._raise_unavailable(response.status_code, response.headers)
            if response.status_code != 200:
                raise _refuse(f"the Hub answered HTTP {response.status_code} to the download of {name}")
            try:
                while True:
                    self._deadline.left()
                    chunk = response.raw.read(_CHUNK_BYTES, decode_content=True)
                    if not chunk:
                        break
                    total += len(chunk)
                    if total > limit:
                        raise _refuse(f"{name} is over the {cap:,}-byte limit (the download was stopped there)"
                                      if size is None else
                                      f"the Hub sent more of {name} than the {size:,} bytes it declared")
                    chunks.append(chunk)
            except DecodeError:
                if self._deadline.expired:
                    raise self._deadline.too_slow() from None
                encoding = shown(response.headers.get("Content-Encoding", ""))
                raise _refuse(f"the Hub's answer for {name} could not be decoded (Content-Encoding {encoding})") \
                    from None
            except (HTTPError, RequestException, OSError) as exc:
                raise self._network(exc) from None
        self._deadline.left()  # a body completed only because the watchdog shut the socket is not one
        if size is not None and total != size:
            raise _refuse(f"the Hub sent {total:,} bytes of {name}, not the {size:,} it declared")
        return b"".join(chunks)

    # ---- the cache -----------------------------------------------------------------------------
    def _storage(self, repo_id: str) -> Path:
        """The repo's folder in the cache, its ``blobs`` made; unusable is refused before any request."""
        from huggingface_hub.file_download import repo_folder_name

        storage = Path(self.cache_dir) / repo_folder_name(repo_id=repo_id, repo_type="model")
        try:
            (storage / "blobs").mkdir(parents=True, exist_ok=True)
            if not os.access(storage / "blobs", os.W_OK | os.X_OK):
                raise PermissionError(13, "not writable")
        except OSError as exc:
            raise self._unusable(exc) from None
        return storage

    def _unusable(self, exc: OSError) -> SizingError:
        return _refuse(f"the Hub cache folder {shown(str(self.cache_dir))} cannot be used "
                       f"({exc.strerror or type(exc).__name__})")

    def _inside(self, path: Path) -> bool:
        root = os.path.realpath(self.cache_dir)
        return os.path.commonpath([os.path.realpath(path), root]) == root

    def _cached(self, path: Path, cap: int) -> bytes | None:
        """The bytes at ``path`` if it is a file whose real path is in the cache folder; a link
        that leads out (a cache written by a client that trusted a lying endpoint) is removed."""
        if not os.path.lexists(path):
            return None
        if not self._inside(path) or not path.is_file():
            try:
                path.unlink()  # removes the link itself, never what it points at
            except OSError as exc:
                raise self._unusable(exc) from None
            return None
        try:
            with open(path, "rb") as stream:
                return read_capped(stream, cap, field="model_id")
        except OSError as exc:
            raise self._unusable(exc) from None

    def _store(self, storage: Path, blob: Path, pointer: Path, commit: str, data: bytes) -> None:
        """``data`` as the client stores it: the blob, the snapshot's link to it, the branch's commit."""
        try:
            if not os.path.lexists(blob):
                _replace_with(blob, lambda tmp: Path(tmp).write_bytes(data))
            if not os.path.lexists(pointer):
                pointer.parent.mkdir(parents=True, exist_ok=True)
                target = os.path.relpath(blob, pointer.parent)
                try:
                    _replace_with(pointer, lambda tmp: (os.unlink(tmp), os.symlink(target, tmp)))
                except OSError:  # no symlinks here (some Windows setups): a copy, as the client does
                    _replace_with(pointer, lambda tmp: Path(tmp).write_bytes(data))
            self._store_ref(storage, commit)
        except OSError as exc:
            raise self._unusable(exc) from None

    def _store_missing(self, storage: Path, commit: str, filename: str) -> None:
        try:
            marker = storage / ".no_exist" / commit / filename
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
            self._store_ref(storage, commit)
        except OSError as exc:
            raise self._unusable(exc) from None

    @staticmethod
    def _store_ref(storage: Path, commit: str) -> None:
        ref = storage / "refs" / REVISION
        if not ref.is_file() or ref.read_text() != commit:
            ref.parent.mkdir(exist_ok=True)
            _replace_with(ref, lambda tmp: Path(tmp).write_text(commit))

    def _read_offline(self, repo_id: str, filename: str, cap: int) -> bytes | None:
        from huggingface_hub import try_to_load_from_cache
        from huggingface_hub.file_download import _CACHED_NO_EXIST

        found = try_to_load_from_cache(repo_id, filename, cache_dir=self.cache_dir, revision=REVISION)
        if found is _CACHED_NO_EXIST:
            return None
        if not isinstance(found, str) or not self._inside(Path(found)):
            raise HubUnavailable(f"offline mode is on (HF_HUB_OFFLINE) and the client's cache has no {filename} "
                                 f"for {repo_id}")
        try:
            with open(found, "rb") as stream:
                return read_capped(stream, cap, field="model_id")
        except OSError as exc:
            raise self._unusable(exc) from None


def _header(headers, header: str, name: str) -> str:
    value = headers.get(header)
    if value is None:
        raise _refuse(f"the Hub's answer for {name} has no {header} header (is HF_ENDPOINT a Hub?)")
    return value.strip()


def _plain_etag(value: str) -> str | None:
    """The ETag as the client names its blob (weak mark and quotes dropped), if a plain token."""
    token = value[2:] if value.startswith("W/") else value
    if len(token) >= 2 and token[0] == token[-1] == '"':
        token = token[1:-1]
    return token if _TOKEN.fullmatch(token) and ".." not in token else None


def _bad_header(name: str, header: str, value: str, why: str) -> SizingError:
    return _refuse(f"the Hub's answer for {name} has a bad {header} header ({shown(value)}: {why})")


def _replace_with(path: Path, write) -> None:
    """Make ``path`` atomically: ``write(temporary name)`` beside it, then moved into place."""
    descriptor, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".incomplete")
    os.close(descriptor)
    try:
        write(tmp)
        if not os.path.islink(tmp):
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the cache from the user's other tools
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
