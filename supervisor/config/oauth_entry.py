"""The ``"oauth"`` object of a remote server's config entry, checked and expanded into an ``OAuthSpec``.

Above: ``supervisor.config.load``, which builds each server and passes its ``${VAR}`` expansion and its
problem type. Below: the config's data model. What the fields mean is in the README ("Servers that
need OAuth") and in ``OAuthConfig``; what runs them is ``workers.oauth``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import fields

from supervisor.config.model import OAuthConfig, OAuthSpec, Transport

__all__ = ["HTTP_URL", "oauth_spec"]

HTTP_URL = re.compile(r"https?://[^/?#\s]", re.IGNORECASE)  # a URL the config accepts: http(s), a host


def oauth_spec(
    oauth: OAuthConfig | bool | None,
    transport: Transport,
    headers: Mapping[str, str],
    expand: Callable[[str, str], str],
    problem: Callable[[str], Exception],
) -> OAuthSpec | None:
    """A server's ``"oauth"`` object checked (a problem raised as ``problem(text)``), with ``${VAR}``
    expanded (``expand(text, where)``) in every string; None when the server has none."""
    if oauth is None or oauth is False:
        return None
    if transport == "stdio":
        raise problem('"oauth" is for remote servers ("url"); a stdio server takes credentials in "env"')
    if any(key.lower() == "authorization" for key in headers):
        raise problem('"headers" has an Authorization header and "oauth" is set: give only one of them')
    raw = OAuthConfig() if oauth is True else oauth

    def text(value: str | None, key: str) -> str | None:
        return None if value is None else expand(value, f"oauth.{key}")

    values = {f.name: getattr(raw, f.name) for f in fields(OAuthSpec)}
    for key in _TEXT:
        values[key] = text(values[key], key)
    spec = OAuthSpec(**values)
    need = _NEEDS[spec.grant]
    missing = [f'"{_camel(name)}"' for name in need if not values[name]]
    if spec.grant == "client_credentials" and not (spec.client_secret or spec.private_key):
        missing.append('one of "clientSecret", "privateKey"')
    if missing:
        raise problem(f'"oauth": grant {spec.grant} needs {" and ".join(missing)}')
    method = spec.token_endpoint_auth_method
    if method == "private_key_jwt" and not spec.private_key:
        raise problem('"oauth": tokenEndpointAuthMethod private_key_jwt needs "privateKey" (a PEM key)')
    if spec.private_key and spec.grant != "client_credentials":
        raise problem('"oauth": "privateKey" (private_key_jwt) is for grant client_credentials')
    if spec.client_secret and not spec.client_id:
        raise problem('"oauth": "clientSecret" needs the "clientId" it belongs to')
    if spec.client_metadata_url is not None and not _CIMD_URL.match(spec.client_metadata_url):
        raise problem(
            '"oauth": "clientMetadataUrl" must be an https:// URL with a path, e.g. https://example.com/client.json'
        )
    if not HTTP_URL.match(spec.redirect_uri):
        raise problem('"oauth": "redirectUri" must be an http:// or https:// URL')
    for key in ("issuer", "idp_token_endpoint"):
        if values[key] is not None and not HTTP_URL.match(values[key]):
            raise problem(f'"oauth": "{_camel(key)}" must be an http:// or https:// URL')
    return spec


_TEXT: tuple[str, ...] = ("client_id", "client_secret", "private_key", "scope", "client_metadata_url")
_TEXT += ("redirect_uri", "issuer", "idp_token_endpoint", "idp_client_id", "idp_id_token")
_NEEDS: dict[str, tuple[str, ...]] = {
    "authorization_code": (),
    "client_credentials": ("client_id",),
    "identity_assertion": (
        "client_id",
        "client_secret",
        "issuer",
        "idp_token_endpoint",
        "idp_client_id",
        "idp_id_token",
    ),
}
_CIMD_URL = re.compile(r"https://[^/?#\s]+/[^?#\s]+", re.IGNORECASE)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
