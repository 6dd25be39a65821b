"""The gateway file's ``oauth`` block (``supervisor.config.oauth_resource``): what it becomes, and every
mistake named by the file and the key."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from supervisor.config.gateway import GatewayError, parse_gateway
from supervisor.config.oauth_resource import (
    DEFAULT_ALGORITHMS,
    Introspection,
    OAuthResource,
    OAuthSettingsError,
)

ISSUER = "https://login.example.com/realms/mcp"


def parse(oauth: Any, environ: dict[str, str] | None = None, folder: Path | None = None) -> OAuthResource:
    gateway = parse_gateway(json.dumps({"oauth": oauth}).encode(), "gw.json", environ or {}, folder)
    assert gateway.oauth is not None
    return gateway.oauth


def refused(oauth: Any, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(GatewayError) as caught:
        parse(oauth, environ)
    text = str(caught.value)
    assert text.startswith("gw.json: "), text
    return text


def test_the_least_block_is_an_issuer_with_defaults_for_the_rest() -> None:
    settings = parse({"issuer": ISSUER})
    assert settings == OAuthResource(issuer=ISSUER)
    assert settings.algorithms == DEFAULT_ALGORITHMS == ("RS256", "ES256", "PS256", "EdDSA")
    assert settings.leeway == 30.0 and settings.required_scopes == () and settings.advertised_scopes is None
    assert settings.resource is None and settings.introspection is None


def test_every_key_in_camel_case_becomes_its_setting(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s3cret\n")
    settings = parse(
        {
            "issuer": ISSUER,
            "resource": "https://mcp.example.com/mcp",
            "audience": "api://mcp",
            "jwksUri": "https://login.example.com/certs",
            "algorithms": ["ES256", "RS256", "ES256"],
            "requiredScopes": ["mcp:tools"],
            "scopesSupported": ["mcp:tools", "mcp:admin"],
            "leeway": 5,
            "introspection": {
                "endpoint": "https://login.example.com/introspect",
                "clientId": "${CLIENT}",
                "clientSecret": "${file:secret}",
                "introspectAll": True,
            },
        },
        {"CLIENT": "mcp-gateway"},
        tmp_path,
    )
    assert settings == OAuthResource(
        issuer=ISSUER,
        resource="https://mcp.example.com/mcp",
        audience="api://mcp",
        jwks_uri="https://login.example.com/certs",
        algorithms=("ES256", "RS256"),
        required_scopes=("mcp:tools",),
        scopes_supported=("mcp:tools", "mcp:admin"),
        leeway=5.0,
        introspection=Introspection("https://login.example.com/introspect", "mcp-gateway", "s3cret", True),
    )
    assert settings.expected_audience == "api://mcp"
    assert "s3cret" not in repr(settings)


def test_required_scopes_are_advertised_when_no_others_are_given() -> None:
    assert parse({"issuer": ISSUER, "requiredScopes": ["a", "b"]}).advertised_scopes == ("a", "b")
    assert parse({"issuer": ISSUER, "requiredScopes": ["a"], "scopesSupported": []}).advertised_scopes == ()


def test_the_resource_of_a_loopback_listener_is_its_own_url() -> None:
    settings = parse({"issuer": "http://127.0.0.1:9000"})
    assert settings.for_listener("127.0.0.1", 8765).resource == "http://127.0.0.1:8765/mcp"
    assert settings.for_listener("::1", 8765).resource == "http://[::1]:8765/mcp"
    assert settings.for_listener("localhost", 1).expected_audience == "http://localhost:1/mcp"
    given = parse({"issuer": ISSUER, "resource": "https://mcp.example.com/mcp"})
    assert given.for_listener("0.0.0.0", 80) is given


def test_another_listener_needs_the_resource_named() -> None:
    settings = parse({"issuer": ISSUER})
    with pytest.raises(
        OAuthSettingsError, match=r"^gw.json: oauth.resource is needed when listening on 0.0.0.0"
    ):
        settings.for_listener("0.0.0.0", 8765, "gw.json")
    with pytest.raises(ValueError, match="for_listener"):
        _ = settings.expected_audience


@pytest.mark.parametrize(
    ("oauth", "said"),
    [
        ({}, r"missing required field `issuer`"),
        ({"issuer": ISSUER, "jwks": "x"}, r"unknown field `jwks`"),
        ({"issuer": ISSUER, "required_scopes": []}, r"unknown field `required_scopes`"),
        ({"issuer": 3}, r"Expected `str`, got `int` - at `\$.oauth.issuer`"),
        ({"issuer": "login.example.com"}, r"oauth.issuer: 'login.example.com' is not an http\(s\):// URL"),
        ({"issuer": "http://login.example.com"}, r"oauth.issuer: .* http:// is only for loopback hosts"),
        ({"issuer": ISSUER + "?x=1"}, r"oauth.issuer: .* has a query"),
        ({"issuer": ISSUER + "#f"}, r"oauth.issuer: .* has a fragment"),
        ({"issuer": "https://u:p@login.example.com"}, r"oauth.issuer: .* user name or password"),
        ({"issuer": "https://[::1"}, r"oauth.issuer: .* is not a URL"),
        ({"issuer": ISSUER, "resource": "ftp://x/mcp"}, r"oauth.resource: .* not an http\(s\):// URL"),
        ({"issuer": ISSUER, "resource": "https://x/mcp#a"}, r"oauth.resource: .* has a fragment"),
        ({"issuer": ISSUER, "audience": " "}, r"oauth.audience: is empty"),
        ({"issuer": ISSUER, "audience": " api"}, r"oauth.audience: is empty or has spaces around it"),
        ({"issuer": ISSUER, "jwksUri": "http://keys.example.com/"}, r"oauth.jwksUri: .* loopback"),
        ({"issuer": ISSUER, "algorithms": []}, r"oauth.algorithms: is empty"),
        (
            {"issuer": ISSUER, "algorithms": ["none"]},
            r"oauth.algorithms: 'none' \(unsigned tokens\) is never",
        ),
        ({"issuer": ISSUER, "algorithms": ["HS256"]}, r"oauth.algorithms: 'HS256' is symmetric"),
        ({"issuer": ISSUER, "algorithms": ["RS1"]}, r"oauth.algorithms: 'RS1' is none of"),
        ({"issuer": ISSUER, "requiredScopes": ["a b"]}, r"oauth.requiredScopes: 'a b' is not a scope"),
        ({"issuer": ISSUER, "requiredScopes": [""]}, r"oauth.requiredScopes: '' is not a scope"),
        ({"issuer": ISSUER, "scopesSupported": ['a"']}, r"oauth.scopesSupported: 'a\"' is not a scope"),
        ({"issuer": ISSUER, "leeway": -1}, r"oauth.leeway: must be 0 to 300 seconds, not -1"),
        ({"issuer": ISSUER, "leeway": 301}, r"oauth.leeway: must be 0 to 300 seconds"),
        ({"issuer": ISSUER, "leeway": "30"}, r"Expected `float`, got `str` - at `\$.oauth.leeway`"),
        (
            {"issuer": ISSUER, "introspection": {}},
            r"missing required field `endpoint` - at `\$.oauth.introspection`",
        ),
        (
            {"issuer": ISSUER, "introspection": {"endpoint": "https://x/i", "clientId": "a"}},
            r"oauth.introspection: give both clientId and clientSecret, or neither",
        ),
        (
            {"issuer": ISSUER, "introspection": {"endpoint": "https://x/i", "clientSecret": "s"}},
            r"oauth.introspection: give both clientId and clientSecret",
        ),
        (
            {"issuer": ISSUER, "introspection": {"endpoint": "http://x/i"}},
            r"oauth.introspection.endpoint: .* loopback",
        ),
        (
            {
                "issuer": ISSUER,
                "introspection": {"endpoint": "https://x/i", "clientId": "${NOPE}", "clientSecret": "s"},
            },
            r"oauth.introspection.clientId: .*NOPE",
        ),
        (
            {
                "issuer": ISSUER,
                "introspection": {"endpoint": "https://x/i", "clientId": "a", "clientSecret": "${E}"},
            },
            r"oauth.introspection.clientSecret: is empty",
        ),
        (
            {"issuer": ISSUER, "introspection": {"endpoint": "https://x/i", "introspect_all": True}},
            r"unknown field `introspect_all`",
        ),
    ],
)
def test_each_mistake_is_named_by_its_key(oauth: dict[str, Any], said: str) -> None:
    text = refused(oauth, {"E": ""})
    assert text.count("\n") == 0
    assert re.search(said, text), text


def test_a_missing_secret_file_names_the_key_and_the_path_not_a_value(tmp_path: Path) -> None:
    block = {"endpoint": "https://x/i", "clientId": "a", "clientSecret": "${file:/nonexistent/secret}"}
    text = refused({"issuer": ISSUER, "introspection": block})
    assert (
        "oauth.introspection.clientSecret" in text
        and "/nonexistent/secret" in text
        and "no such file" in text
    )


def test_loopback_hosts_may_use_plain_http() -> None:
    for issuer in ("http://127.0.0.1:9000", "http://localhost:9000/realms/x", "http://[::1]:9000"):
        assert parse({"issuer": issuer}).issuer == issuer
