"""The `http:` checkpoint mode: a POST to the pod IP, no redirects, no proxies."""

from __future__ import annotations

import http.client


class PodHttp:
    def post(self, url: str, timeout: float) -> int:
        """POST and answer the status code. Only http://IP:PORT/PATH built by gpuwarden reaches here."""
        if not url.startswith("http://"):
            raise ValueError(f"not an http URL: {url}")
        host_port, _, path = url.removeprefix("http://").partition("/")
        host, _, port = host_port.rpartition(":")
        connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout)
        try:
            connection.request("POST", "/" + path, body=b"", headers={"User-Agent": "gpuwarden"})
            return connection.getresponse().status
        finally:
            connection.close()
