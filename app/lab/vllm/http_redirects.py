"""Redirects an attached server may give: to http or https only.

urllib's default redirect handler follows http, https and ftp; a /metrics answered with a redirect to
ftp://elsewhere made kvscope open an FTP connection to a host the user never named. A vLLM server
redirects, if at all, to itself over HTTP."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request


class HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        scheme = urllib.parse.urlsplit(urllib.parse.urljoin(req.full_url, newurl)).scheme.lower()
        if scheme not in ("http", "https"):
            raise urllib.error.HTTPError(req.full_url, code, f"redirected to a {scheme or 'schemeless'} address, "
                                         "which kvscope does not follow (only http and https)", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)
