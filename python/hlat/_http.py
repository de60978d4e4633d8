"""HTTP to `hlat serve`: one kept-alive connection, and the errors a user can catch."""
import http.client
import json
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
    """Posts to `hlat serve` over one kept-alive connection."""

    def __init__(self, url, token, timeout):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"hlat url {url!r}: expected http://HOST:PORT")
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.prefix = parsed.path.rstrip("/")
        self.url, self.token, self.timeout = url, token, timeout
        self.conn = None

    def another(self, timeout):
        """A second connection to the same server, for a thread that must not share this one."""
        return HttpTransport(self.url, self.token, timeout)

    def request(self, method, path, body=b"", content_type="application/json"):
        """The reply's JSON; ServerError for a status >= 400, OSError when unreachable."""
        headers = {"Content-Type": content_type, "X-HLAT-Token": self.token or ""}
        for attempt in range(2):  # a kept-alive connection the server closed: reconnect once
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, self.prefix + path, body=body, headers=headers)
                response = self.conn.getresponse()
                text = response.read().decode("utf-8", "replace")
                status = response.status
                break
            except (OSError, http.client.HTTPException) as e:
                self.close()
                # A refused connection is not a kept-alive one the server closed: no second try.
                if attempt == 1 or isinstance(e, (ConnectionRefusedError, TimeoutError)):
                    raise
        try:
            payload = json.loads(text) if text else {}
        except ValueError:
            payload = {"error": text}
        if status >= 400:
            message = payload.get("error", text) if isinstance(payload, dict) else text
            raise (RunExists if status == 409 and path.endswith("/start") else ServerError)(status, message)
        return payload

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


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
