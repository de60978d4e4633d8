"""HTTP to `hlat serve`: one kept-alive connection, its replies read and checked against what
docs/api.md documents, and the errors a user can catch."""
import http.client
import json
import re
import socket
import time
import urllib.parse

MAX_REPLY_BYTES = 64 << 20  # hlat serve's largest reply to the client is a batch's alerts: a few MB
MAX_HEAD_BYTES = 64 << 10   # a status line and headers (hlat serve's are ~170 bytes)
MAX_INTERIM = 8             # 100 Continue and 103 Early Hints before the reply: more is no server of ours
RECV_BYTES = 65536
HEX = b"0123456789abcdefABCDEF"
STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([1-5]\d\d)(?: ([^\r\n]*))?")


class ServerError(Exception):
    """hlat serve answered with an error status (400 a bad request, 401 a wrong token, ...)."""

    def __init__(self, status, message):
        super().__init__(f"hlat serve answered {status}: {message}")
        self.status = status
        self.message = message


class RunExists(ServerError):
    """hlat.init: the server already has a run of this name. Pass resume=True (or "allow")
    to add to it, or choose another name."""


class BadReply(ServerError):
    """What answered at hlat serve's address is not hlat serve's documented reply: a redirect (an
    authenticating proxy's login), a page or a body that is not the documented JSON, a reply cut
    short or garbled. Nothing sent is delivered: the client keeps it and tries again, as when the
    server does not answer (unreachable() is True). `status` is the reply's, 0 before it had one."""

    def __init__(self, status, message):
        super().__init__(status, message)
        self.args = (f"not hlat serve's reply: {message}",)


class _Garbled(Exception):
    """A reply that breaks HTTP/1.1's framing; read_reply makes it a BadReply with the status."""


def quote(name):
    return urllib.parse.quote(name, safe="")


def unreachable(error):
    """Whether `error` says the server could not be reached or could not answer now (try again
    later), rather than that it refused what was sent."""
    if isinstance(error, BadReply):
        return True  # a proxy's login page or a garbled reply: nothing delivered, so kept and tried again
    if isinstance(error, ServerError):
        return error.status >= 500  # 503: a store that fails for now; 500: a server bug
    return isinstance(error, (OSError, http.client.HTTPException))


class HttpTransport:
    """Posts to `hlat serve` over one kept-alive connection.

    HTTP/1.1 by hand on a socket rather than http.client: a request and its reply cost the
    sender thread ~40 us of Python instead of ~400 us (http.client parses headers with the
    email package), and every microsecond the sender holds the interpreter lock is one the
    training thread may wait for. `timeout` bounds each request whole (connect, send, the full
    reply), not each read: a server that trickles a byte a second is given up on in time.
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
        self.sock = None

    def another(self, timeout):
        """A second connection to the same server, for a thread that must not share this one."""
        return HttpTransport(self.url, self.token, timeout)

    def request(self, method, path, body=b"", content_type="application/json"):
        """The reply's JSON object. ServerError (RunExists) when hlat serve refuses (a status >= 400
        with its {"error"}); BadReply, a ServerError, for any reply that is not the documented
        one; OSError when unreachable or not answered whole within `timeout` s."""
        deadline = time.monotonic() + self.timeout
        head = (f"{method} {self.prefix}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: {content_type}\r\nX-HLAT-Token: {self.token}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode("ascii")
        for attempt in range(2):  # a kept-alive connection the server closed: reconnect once
            reused = self.sock is not None
            try:
                if not reused:
                    self._connect(deadline)
                self.sock.settimeout(_left(deadline, self.timeout))  # sendall's timeout is for the whole send
                self.sock.sendall(head + body)
                status, data, keep = read_reply(_Reader(self.sock, deadline, self.timeout))
                break
            except ServerError:  # a garbled reply: what follows it on this connection cannot be trusted
                self.close()
                raise
            except TimeoutError:  # the socket's own says "timed out": of a read, where the whole request timed out
                self.close()
                raise TimeoutError(f"no whole reply within {self.timeout:g} s") from None
            except OSError:
                self.close()
                if attempt == 1 or not reused:
                    raise
        if not keep:
            self.close()
        return reply_payload(path, status, data)

    def _connect(self, deadline):
        self.sock = socket.create_connection((self.host, self.port), timeout=_left(deadline, self.timeout))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a small request goes out at once

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None


def _left(deadline, timeout):
    """Seconds left before `deadline`; TimeoutError when none."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"no whole reply within {timeout:g} s")
    return left


class _Reader:
    """A reply's bytes from a socket, buffered; every wait for more is bounded by what is left
    of the request's deadline (a socket's own timeout bounds each read, not the reply)."""

    def __init__(self, sock, deadline, timeout):
        self.sock, self.deadline, self.timeout = sock, deadline, timeout
        self.buf, self.pos = bytearray(), 0
        self.scanned = 0  # where the search for the next line end goes on from
        self.got = 0      # bytes received, for the message of a reply cut short

    def _fill(self):
        """More bytes into the buffer; False at the end of the stream."""
        self.sock.settimeout(_left(self.deadline, self.timeout))
        data = self.sock.recv(RECV_BYTES)
        if not data:
            return False
        if self.pos:
            del self.buf[:self.pos]
            self.scanned -= self.pos
            self.pos = 0
        self.buf += data
        self.got += len(data)
        return True

    def head(self, limit):
        """The next status line and its headers, up to the empty line that ends them: a list of
        lines without their CRLF (or LF). One search for the end: a line at a time costs the
        sender thread twice as much per reply."""
        while True:
            start = max(self.pos, self.scanned - 2)
            ends = [(i, n) for i, n in ((self.buf.find(b"\n\r\n", start), 3), (self.buf.find(b"\n\n", start), 2))
                    if i >= 0]
            if ends:
                end, skip = min(ends)
                if end - self.pos > limit:
                    break
                lines = bytes(self.buf[self.pos:end]).split(b"\n")
                self.pos = self.scanned = end + skip
                return [line[:-1] if line.endswith(b"\r") else line for line in lines]
            if len(self.buf) - self.pos > limit:
                break
            self.scanned = len(self.buf)
            if not self._fill():
                raise self._cut("the headers")
        raise _Garbled(f"a status line and headers of more than {limit} bytes")

    def line(self, limit, what):
        """The next line without its CRLF (or LF); _Garbled past `limit` bytes or at the end."""
        while True:
            end = self.buf.find(b"\n", max(self.pos, self.scanned), self.pos + limit + 1)
            if end >= 0:
                line = bytes(self.buf[self.pos:end])
                self.pos = self.scanned = end + 1
                return line[:-1] if line.endswith(b"\r") else line
            if len(self.buf) - self.pos > limit:
                raise _Garbled(f"{what} is longer than {limit} bytes")
            self.scanned = len(self.buf)
            if not self._fill():
                raise self._cut(what)

    def take(self, n, what):
        """The next n bytes."""
        while len(self.buf) - self.pos < n:
            if not self._fill():
                raise self._cut(what)
        data = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return data

    def rest(self, limit):
        """Everything up to the end of the stream (a reply framed by closing the connection)."""
        while len(self.buf) - self.pos <= limit and self._fill():
            pass
        if len(self.buf) - self.pos > limit:
            raise _Garbled(f"a body of more than {limit} bytes, more than the client reads")
        return self.take(len(self.buf) - self.pos, "the body")

    def pending(self):
        """Whether bytes beyond the reply came with it."""
        return len(self.buf) > self.pos

    def _cut(self, what):
        if not self.got:  # nothing at all: a kept-alive connection the server had closed
            return http.client.RemoteDisconnected("hlat serve closed the connection without a reply")
        return _Garbled(f"the reply was cut short in {what}, after {self.got} bytes")


def read_reply(reader):
    """(status, body bytes, whether the connection stays open) of the reply `reader` holds.
    BadReply for a redirect or a reply HTTP/1.1 cannot frame; OSError when the stream ends
    before it began or the deadline passes."""
    status, reason = 0, b""
    try:
        for _ in range(MAX_INTERIM + 1):
            status, reason, version, headers = _read_head(reader)
            if status >= 200 or status == 101:
                break
        else:
            raise _Garbled(f"more than {MAX_INTERIM} interim replies")
        if status < 200 or 300 <= status < 400:
            # A redirect is an authenticating proxy's login, or the wrong address: said with where to.
            where = headers.get(b"location", b"")[:200].decode("latin-1")
            raise _Garbled(f"a redirect to {where}" if where else "a status hlat serve never answers")
        keep = version == b"1" and b"close" not in headers.get(b"connection", b"").lower()
        if status in (204, 304):
            body = b""
        elif b"transfer-encoding" in headers:
            if headers[b"transfer-encoding"].lower() != b"chunked":
                raise _Garbled(f"Transfer-Encoding {headers[b'transfer-encoding'][:40]!r}, not chunked")
            body = _read_chunked(reader)
            keep = keep and b"content-length" not in headers  # both framings: RFC 9112 6.3 says close
        elif b"content-length" in headers:
            body = reader.take(_content_length(headers[b"content-length"]), "the body")
        else:
            body, keep = reader.rest(MAX_REPLY_BYTES), False
    except _Garbled as e:
        said = f"{status} {reason[:60].decode('latin-1')}".strip() + ", " if status else ""
        raise BadReply(status, f"{said}{e}") from None
    return status, body, keep and not reader.pending()


def _read_head(reader):
    """(status, reason, minor version, {lowercase name: value}) of the next status line and
    headers. A header given twice is joined with ", " (RFC 9110 5.3), so Content-Length: 5 twice
    is "5, 5": not one length, and refused."""
    lines = reader.head(MAX_HEAD_BYTES)
    m = STATUS_LINE.fullmatch(lines[0])
    if not m:
        raise _Garbled(f"a status line {lines[0][:60]!r}")
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():  # obs-fold and "Name :" included (RFC 9112 5)
            raise _Garbled(f"a header line {line[:60]!r}")
        name, value = name.lower(), value.strip(b" \t")
        headers[name] = headers[name] + b", " + value if name in headers else value
    return int(m.group(2)), m.group(3) or b"", m.group(1), headers


def _content_length(value):
    if not value.isdigit() or len(value) > 19:
        raise _Garbled(f"Content-Length {value[:40]!r}")
    if int(value) > MAX_REPLY_BYTES:
        raise _Garbled(f"a body of {int(value)} bytes, more than the client reads")
    return int(value)


def _read_chunked(reader):
    out, size = [], 0
    while True:
        line = reader.line(1024, "a chunk size")
        digits = line.split(b";", 1)[0].strip(b" \t")
        if not digits or len(digits) > 16 or digits.translate(None, HEX):  # int(x, 16) takes "-1", "0x", "1_0"
            raise _Garbled(f"a chunk size {line[:40]!r}")
        n = int(digits, 16)
        size += n
        if size > MAX_REPLY_BYTES:
            raise _Garbled(f"a chunked body of more than {MAX_REPLY_BYTES} bytes, more than the client reads")
        if n == 0:
            while reader.line(MAX_HEAD_BYTES, "the trailer"):  # trailers: read, not used
                pass
            return b"".join(out)
        out.append(reader.take(n, "a chunk"))
        if reader.line(2, "a chunk's end"):
            raise _Garbled("a chunk longer than its size")


def reply_payload(path, status, body):
    """The JSON object of a reply to `path` when it is the documented success. ServerError (or
    RunExists) when it is hlat serve's refusal, a status >= 400 with {"error": "..."}; BadReply
    for anything else: no server of ours sent it, so nothing sent may count as delivered."""
    try:
        payload = json.loads(body.decode("utf-8")) if body else None
    except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than Python recurses
        payload = None
    if status >= 400:
        if isinstance(payload, dict) and isinstance(payload.get("error"), str):
            raise (RunExists if status == 409 and path.endswith("/start") else ServerError)(status, payload["error"])
        raise BadReply(status, f"{status} with {_said(body, payload)}")
    why = _undocumented(path, payload) if isinstance(payload, dict) else _said(body, payload)
    if why:
        raise BadReply(status, f"{status} with {why}")
    return payload


def _said(body, payload):
    """What came back instead of a JSON object, for a message."""
    if not body:
        return "no body"
    if payload is None:
        return f"a body that is not JSON: {body[:80]!r}"
    return f"a JSON {type(payload).__name__}, not an object: {body[:80]!r}"


def _undocumented(path, reply):
    """Why a success reply to `path` is not the JSON docs/api.md documents, or None: start,
    ingest, finish and state answer the run's "state"; ingest its "alerts", the values it took
    and the halt's reason, in the types the client reads them as."""
    endpoint = path.rsplit("/", 1)[-1]
    if endpoint not in ("start", "ingest", "finish", "state"):
        return None
    if not isinstance(reply.get("state"), str):
        return 'a JSON object without the run\'s "state"'
    if endpoint == "start" or endpoint == "finish":
        return None
    alerts, halt = reply.get("alerts", []), reply.get("halt", {})
    if not isinstance(alerts, list) or not all(isinstance(a, dict) for a in alerts):
        return '"alerts" that are not a list of objects'
    if not isinstance(halt, dict) or not isinstance(halt.get("reason", ""), str):
        return 'a "halt" without a reason'
    if type(reply.get("values", 0)) is not int or not isinstance(reply.get("unwatched", ""), str):
        return '"values" or "unwatched" of the wrong type'
    return None


def post_lines(transport, name, lines, on_reply, on_refused):
    """POSTs JSON lines (bytes) to the run's ingest. A piece the server refuses (400, 413: what
    it says cannot be stored) is split in halves until each refused line stands alone; those are
    given to on_refused(line, error) and not sent again, the others are stored. Other errors
    (unreachable, 401, 5xx, a reply that is not hlat serve's) are raised, nothing dropped."""
    try:
        reply = transport.request("POST", f"/api/v1/runs/{quote(name)}/ingest", b"".join(lines),
                                  "application/x-ndjson")
    except ServerError as e:
        if e.status not in (400, 413) or isinstance(e, BadReply):
            raise
        if len(lines) == 1:
            on_refused(lines[0], e)
            return
        half = len(lines) // 2
        post_lines(transport, name, lines[:half], on_reply, on_refused)
        post_lines(transport, name, lines[half:], on_reply, on_refused)
        return
    on_reply(reply)
