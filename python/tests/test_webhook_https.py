"""Alerts where the team is (issue 55): `hlat serve`'s webhook over HTTPS. A local HTTPS endpoint
with a self-signed certificate, given as the CA (detectors.webhook_ca), receives a NaN alert in
Slack's shape ({"text": ...}, what Slack's incoming webhooks take) and Discord's ({"content"});
an endpoint whose certificate that CA did not sign is refused with a clear warning that names the
host and never the URL's path (a webhook's secret); and an endpoint that accepts and never
answers holds up no step: every step of the run is stored and the run ended while the webhook
still waits."""
import http.server
import json
import os
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

from support import ServerTestCase, TOKEN
import hlat

SECRET = "T000/B000/XXXXsecretXXXX"


def certificate(folder, name):
    """A self-signed certificate for 127.0.0.1 (openssl), as (cert, key) paths."""
    cert, key = os.path.join(folder, f"{name}.pem"), os.path.join(folder, f"{name}.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    return cert, key


class Endpoint:
    """An HTTPS server on 127.0.0.1 keeping every POST's path and body."""

    def __init__(self, cert, key):
        self.posts = []
        posts = self.posts

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                posts.append((self.path, json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()


def wait_for(predicate, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline and not predicate():
        time.sleep(0.1)
    return predicate()


class HttpsWebhook(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix="hlat-webhook-")
        cls.trusted = certificate(cls.tmp, "trusted")
        cls.other = certificate(cls.tmp, "other")

    def nan_run(self, name, url, fmt, steps=3):
        run = hlat.init(name, url=self.server.url, token=TOKEN,
                        detectors={"nonfinite": {"policy": "warn"}, "webhook": url, "webhook_ca": self.trusted[0],
                                   "webhook_format": fmt, "webhook_page": "https://hlat.example/"})
        for step in range(steps):
            run.log({"loss": float("nan") if step == 1 else 2.0}, step=step)
        run.finish()

    def server_log(self):
        with open(self.server.log.name) as f:
            return f.read()

    def test_slack_and_discord_shapes_reach_a_verified_https_endpoint(self):
        endpoint = Endpoint(*self.trusted)
        try:
            for fmt, field in (("slack", "text"), ("discord", "content")):
                self.nan_run(f"hook-{fmt}", f"https://127.0.0.1:{endpoint.port}/services/{SECRET}", fmt)
                self.assertTrue(wait_for(lambda: any(f"hook-{fmt}" in str(b) for _, b in endpoint.posts)),
                                endpoint.posts)
                path, body = [p for p in endpoint.posts if f"hook-{fmt}" in str(p[1])][0]
                self.assertEqual(path, f"/services/{SECRET}")
                self.assertEqual(list(body), [field], "the one field the chat's webhook reads")
                self.assertIn("nonfinite at step 1", body[field])
                link = f"https://hlat.example/static/run.html?run=hook-{fmt}"  # the run's page, as the team opens it
                self.assertIn(f"<{link}|open the run>" if fmt == "slack" else link, body[field])
            for path in ("/api/v1/runs", "/api/v1/runs/hook-slack/events"):
                self.assertNotIn("secret", json.dumps(self.server.get(path)), f"{path} shows the webhook's path")
            self.nan_run("hook-elsewhere", f"https://127.0.0.1:{endpoint.port}/services/another-secret", "json")
            with urllib.request.urlopen(self.server.url + "/api/v1/report?runs=hook-slack,hook-elsewhere") as r:
                self.assertNotIn("secret", r.read().decode(), "the post-mortem's config differences")
            shown = self.server.runs()["hook-slack"]["config"]["detectors"]["webhook"]
            self.assertEqual(shown, f"https://127.0.0.1:{endpoint.port}/\u2026", "the page shows where alerts go")
        finally:
            endpoint.stop()

    def test_a_certificate_the_ca_did_not_sign_is_refused_and_the_secret_stays_out_of_the_log(self):
        endpoint = Endpoint(*self.other)
        try:
            self.nan_run("hook-untrusted", f"https://127.0.0.1:{endpoint.port}/services/{SECRET}", "json")
            line = f"webhook https://127.0.0.1:{endpoint.port}/… did not take the alert"
            self.assertTrue(wait_for(lambda: line in self.server_log()), self.server_log()[-2000:])
            self.assertIn("certificate verify failed", self.server_log())
            self.assertEqual(endpoint.posts, [])
            self.assertNotIn("secret", self.server_log())
        finally:
            endpoint.stop()

    def test_an_endpoint_that_never_answers_holds_up_no_step(self):
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections are taken by the kernel and never answered
        port = silent.getsockname()[1]
        given_up = f"127.0.0.1:{port}/… did not take the alert"
        try:
            run = hlat.init("hook-silent", url=self.server.url, token=TOKEN,
                            detectors={"nonfinite": {"policy": "warn"}, "webhook": f"https://127.0.0.1:{port}/x"})
            for step in range(50):
                run.log({"loss": float("nan") if step == 1 else 2.0}, step=step)
            run.flush()
            # Every step stored and answered while the webhook still waits on its first post
            # (10 s, then two more tries): the session never waits for it.
            self.assertEqual(self.server.steps("hook-silent"), list(range(50)))
            self.assertNotIn(given_up, self.server_log())
            run.finish()  # the run's end gives the webhook what is left of 5 s, then it says so
            self.assertEqual(self.server.runs()["hook-silent"]["status"], "finished")
            self.assertTrue(wait_for(lambda: given_up in self.server_log()), self.server_log()[-1000:])
        finally:
            silent.close()


if __name__ == "__main__":
    unittest.main()
