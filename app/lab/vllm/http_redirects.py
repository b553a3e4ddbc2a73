"""Redirects an attached server may give: to http or https only.

urllib's default redirect handler follows http, https and ftp; a /metrics answered with a redirect to
ftp://elsewhere made kvscope open an FTP connection to a host the user never named. A vLLM server
redirects, if at all, to itself over HTTP."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request


class HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    def __init__(self):
        super().__init__()
        # The last address redirected to: a failure there was said of the address the user gave ("connection
        # refused (is the server running?)" of a server that had just answered with the redirect).
        self.redirected_to: str | None = None

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        self.redirected_to = urllib.parse.urljoin(req.full_url, newurl)
        scheme = urllib.parse.urlsplit(self.redirected_to).scheme.lower()
        if scheme not in ("http", "https"):
            raise urllib.error.HTTPError(req.full_url, code, f"redirected to a {scheme or 'schemeless'} address, "
                                         "which kvscope does not follow (only http and https)", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)
