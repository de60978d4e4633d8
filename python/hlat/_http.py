"""HTTP to `hlat serve`: one kept-alive connection, and the errors a user can catch."""
import http.client
import json
import socket
import urllib.parse


class ServerError(Exception):
    """hlat serve answered with an error status (400 a bad request, 401 a wrong token, ...)."""

    def __init__(self, status, message):
        super().__init__(f"hlat serve answered {status}: {message}")
        self.status = status
        self.message = message


class RunExists(ServerError):
    """hlat.init: the server already has a run of this name. Pass resume=True (or "allow")
    to add to it, or choose another name."""


def quote(name):
    return urllib.parse.quote(name, safe="")


def unreachable(error):
    """Whether `error` says the server could not be reached or could not answer now (try again
    later), rather than that it refused what was sent."""
    if isinstance(error, ServerError):
        return error.status >= 500  # 503: a store that fails for now; 500: a server bug
    return isinstance(error, (OSError, http.client.HTTPException))


class HttpTransport:
    """Posts to `hlat serve` over one kept-alive connection.

    HTTP/1.1 by hand on a socket rather than http.client: a request and its reply cost the
    sender thread ~40 us of Python instead of ~400 us (http.client parses headers with the
    email package), and every microsecond the sender holds the interpreter lock is one the
    training thread may wait for.
    """

    def __init__(self, url, token, timeout):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"hlat url {url!r}: expected http://HOST:PORT")
        token = token or ""
        if any(ord(c) < 33 or ord(c) > 126 for c in token):
            raise ValueError("hlat token: expected the printable characters `hlat serve` printed, no spaces")
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.prefix = parsed.path.rstrip("/")
        self.url, self.token, self.timeout = url, token, timeout
        self.sock = self.reader = None

    def another(self, timeout):
        """A second connection to the same server, for a thread that must not share this one."""
        return HttpTransport(self.url, self.token, timeout)

    def request(self, method, path, body=b"", content_type="application/json"):
        """The reply's JSON; ServerError for a status >= 400, OSError when unreachable."""
        head = (f"{method} {self.prefix}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: {content_type}\r\nX-HLAT-Token: {self.token}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode("ascii")
        for attempt in range(2):  # a kept-alive connection the server closed: reconnect once
            reused = self.sock is not None
            try:
                if not reused:
                    self._connect()
                self.sock.sendall(head + body)
                status, text, keep = self._read_reply()
                break
            except (OSError, http.client.HTTPException) as e:
                self.close()
                if attempt == 1 or not reused or isinstance(e, TimeoutError):
                    raise
        if not keep:
            self.close()
        try:
            payload = json.loads(text) if text else {}
        except ValueError:
            payload = {"error": text}
        if status >= 400:
            message = payload.get("error", text) if isinstance(payload, dict) else text
            raise (RunExists if status == 409 and path.endswith("/start") else ServerError)(status, message)
        return payload

    def _connect(self):
        self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a small request goes out at once
        self.reader = self.sock.makefile("rb")

    def _read_reply(self):
        """(status, body text, whether the connection stays open)."""
        line = self.reader.readline(65537)
        if not line:
            raise http.client.RemoteDisconnected("hlat serve closed the connection without a reply")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise http.client.BadStatusLine(repr(line[:100]))
        status, headers = int(parts[1]), {}
        while True:
            line = self.reader.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if status == 100:  # an interim reply: the real one follows
            return self._read_reply()
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = self._read_chunked()
        else:
            body = self.reader.read(int(headers.get(b"content-length", b"0")))
        keep = headers.get(b"connection", b"").lower() != b"close"
        return status, body.decode("utf-8", "replace"), keep

    def _read_chunked(self):
        out = []
        while True:
            size = int(self.reader.readline(1024).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.reader.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(out)
            out.append(self.reader.read(size))
            self.reader.readline(1024)

    def close(self):
        for part in (self.reader, self.sock):
            if part is not None:
                try:
                    part.close()
                except OSError:
                    pass
        self.sock = self.reader = None


def post_lines(transport, name, lines, on_reply, on_refused):
    """POSTs JSON lines (bytes) to the run's ingest. A piece the server refuses (400, 413: what
    it says cannot be stored) is split in halves until each refused line stands alone; those are
    given to on_refused(line, error) and not sent again, the others are stored. Other errors
    (unreachable, 401, 5xx) are raised, nothing dropped."""
    try:
        reply = transport.request("POST", f"/api/v1/runs/{quote(name)}/ingest", b"".join(lines),
                                  "application/x-ndjson")
    except ServerError as e:
        if e.status not in (400, 413):
            raise
        if len(lines) == 1:
            on_refused(lines[0], e)
            return
        half = len(lines) // 2
        post_lines(transport, name, lines[:half], on_reply, on_refused)
        post_lines(transport, name, lines[half:], on_reply, on_refused)
        return
    on_reply(reply)
