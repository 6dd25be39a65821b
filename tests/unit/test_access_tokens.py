"""The HTTP facade's protected resource (``supervisor.facade.protected_resource``) checking access tokens:
what a valid one proves, every reason one is refused, the JWKS and introspection it asks, and its
metadata. The authorization server is an in-process fake (httpx2's ``MockTransport``); the real one,
with real processes, is in tests/e2e/test_facade_oauth.py."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx2
import jwt
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.config.oauth_resource import Introspection, OAuthResource
from supervisor.facade.access_tokens import Refusal
from supervisor.facade.principal import Principal
from supervisor.facade.protected_resource import ProtectedResource, metadata_url
from supervisor.facade.token_keys import REFETCH_INTERVAL, IssuerKeys, KeysUnavailable

ISSUER = "https://as.example.com"
RESOURCE = "https://mcp.example.com/mcp"
KEY = ec.generate_private_key(ec.SECP256R1())
NEW_KEY = ec.generate_private_key(ec.SECP256R1())  # a key the issuer rotates to
OTHER_KEY = ec.generate_private_key(ec.SECP256R1())  # nobody's
FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],  # make: no state kept
)


def jwk(key: ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
    return dict(public) | {"kid": kid, "use": "sig"}


class FakeServer:
    """The authorization server, as httpx2 sees it: metadata, JWKS and introspection, each request
    counted by path."""

    def __init__(self) -> None:
        self.keys = [jwk(KEY, "k1")]
        self.jwks_status = 200
        self.metadata: dict[str, Any] = {"issuer": ISSUER, "jwks_uri": f"{ISSUER}/jwks"}
        self.metadata_path = "/.well-known/oauth-authorization-server"
        self.introspected: dict[str, dict[str, Any]] = {}
        self.introspection_status = 200
        self.requests: list[httpx2.Request] = []

    def count(self, path: str) -> int:
        return sum(1 for request in self.requests if request.url.path == path)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        path = request.url.path
        if path == self.metadata_path:
            return httpx2.Response(200, json=self.metadata)
        if path == "/jwks":
            return httpx2.Response(self.jwks_status, json={"keys": self.keys})
        if path == "/introspect":
            form = dict(item.split("=", 1) for item in request.content.decode().split("&"))
            answer = self.introspected.get(form["token"], {"active": False})
            return httpx2.Response(self.introspection_status, json=answer)
        return httpx2.Response(404, json={"error": "not found"})


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


Make = Callable[..., ProtectedResource]


@pytest.fixture
def make(server: FakeServer) -> Make:
    def make(**changes: Any) -> ProtectedResource:
        """A protected resource of RESOURCE for ISSUER, no leeway, its settings changed by ``changes``."""
        settings = OAuthResource(**({"issuer": ISSUER, "resource": RESOURCE, "leeway": 0.0} | changes))
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(server.handle))
        return ProtectedResource(settings, http=http)

    return make


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {
        "iss": ISSUER,
        "sub": "alice",
        "aud": RESOURCE,
        "exp": now + 600,
        "iat": now,
        "scope": "mcp:tools",
    }
    return {key: value for key, value in (base | changes).items() if value is not None}


def signed(key: Any = KEY, kid: str | None = "k1", alg: str = "ES256", **changes: Any) -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(claims(**changes), key, algorithm=alg, headers=headers)


def bearer(token: str) -> bytes:
    return f"Bearer {token}".encode()


async def refusal(resource: ProtectedResource, header: bytes | None) -> Refusal:
    verdict = await resource.verify(header)
    assert isinstance(verdict, Refusal), verdict
    return verdict


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


UNSIGNED = b64(b'{"alg":"none"}') + "." + b64(json.dumps(claims()).encode()) + "."
NOT_AN_OBJECT = f"{b64(b'[1]')}.{b64(b'{}')}.sig"
KID_NOT_A_STRING = b64(b'{"alg":"ES256","kid":7}') + "." + b64(b"{}") + ".sig"


async def test_a_valid_jwt_proves_its_subject_with_its_claims_scopes_and_expiry(make: Make) -> None:
    resource = make()
    expires = int(time.time()) + 60
    token = signed(scope="mcp:tools mcp:read", groups=["eng"], exp=expires)
    principal = await resource.verify(bearer(token))
    assert isinstance(principal, Principal)
    assert principal.name == "alice" and principal.via == "jwt"
    assert principal.scopes == {"mcp:tools", "mcp:read"}
    assert principal.claims["groups"] == ["eng"] and principal.expires_at == expires
    assert await resource.verify(b"bearer   " + token.encode() + b"  ") == principal  # scheme in any case


async def test_a_list_audience_and_scp_scopes_are_understood(make: Make) -> None:
    resource = make(required_scopes=("a", "b"))
    token = signed(aud=["other", RESOURCE], scope=None, scp=["a", "b"])
    principal = await resource.verify(bearer(token))
    assert isinstance(principal, Principal) and principal.scopes == {"a", "b"}


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (lambda: signed(exp=int(time.time()) - 60), "the token expired"),
        (
            lambda: signed(aud="https://other.example.com/mcp"),
            f"wrong audience: the token is not for {RESOURCE}",
        ),
        (lambda: signed(iss="https://evil.example.com"), f"wrong issuer: the token is not from {ISSUER}"),
        (lambda: signed(nbf=int(time.time()) + 600), "the token is not yet valid"),
        (lambda: signed(iat=int(time.time()) + 600), "the token is not yet valid"),
        (lambda: signed(key=OTHER_KEY), "bad signature"),
        (lambda: signed(kid="k9"), "unknown key: kid k9 is not in the issuer's JWKS"),
        (lambda: signed(exp=None), "the token has no exp claim"),
        (lambda: signed(aud=None), "the token has no aud claim"),
        (lambda: signed(iss=None), "the token has no iss claim"),
        (lambda: signed(sub=None), "the token has no sub (subject)"),
        (lambda: signed(sub=""), "the token has no sub (subject)"),
        (lambda: UNSIGNED, "the token is unsigned"),
        (
            lambda: signed(key="a-shared-secret-of-32-bytes-long", alg="HS256"),
            "the token's algorithm HS256 is not accepted",
        ),
        (
            lambda: signed(alg="ES384", key=ec.generate_private_key(ec.SECP384R1())),
            "the token's algorithm ES384 is not",
        ),
        (lambda: "abc.def.ghi", "malformed JWT"),
        (lambda: NOT_AN_OBJECT, "malformed JWT"),
        (lambda: KID_NOT_A_STRING, "malformed JWT: Key ID header parameter must be a string"),
        (lambda: "opaque-token", "the token is not a JWT, and this server has no introspection endpoint"),
        (lambda: "x" * 9000, "the token is over 8192 bytes"),
        (lambda: "to\u00e9ken", "the token has characters a bearer token cannot have"),
    ],
)
async def test_each_refusal_says_why(make: Make, token: Callable[[], str], why: str) -> None:
    verdict = await refusal(make(), bearer(token()))
    assert (verdict.status, verdict.error) == (401, "invalid_token")
    assert verdict.description.startswith(why), verdict.description


async def test_no_bearer_token_is_a_401_without_an_error_code(make: Make) -> None:
    resource = make()
    for header in (None, b"", b"Bearer", b"Bearer   ", b"Basic dXNlcjpwYXNz", b"Token abc"):
        verdict = await refusal(resource, header)
        assert (verdict.status, verdict.error) == (401, None), header


async def test_a_token_without_a_required_scope_is_403_naming_the_scopes(make: Make) -> None:
    resource = make(required_scopes=("mcp:tools", "mcp:admin"))
    verdict = await refusal(resource, bearer(signed(scope="mcp:tools")))
    assert (verdict.status, verdict.error, verdict.scope) == (
        403,
        "insufficient_scope",
        "mcp:tools mcp:admin",
    )
    assert verdict.description == "the token lacks the scope mcp:admin"


async def test_the_jwks_is_found_through_the_issuers_metadata_and_fetched_once(
    make: Make, server: FakeServer
) -> None:
    resource = make()
    for _ in range(3):
        assert isinstance(await resource.verify(bearer(signed())), Principal)
        assert isinstance(await resource.verify(bearer(signed(sub="bob"))), Principal)
    assert server.count("/jwks") == 1 and server.count("/.well-known/oauth-authorization-server") == 1


async def test_openid_configuration_is_the_fallback_and_a_given_jwks_uri_needs_no_metadata(
    make: Make, server: FakeServer
) -> None:
    server.metadata_path = "/.well-known/openid-configuration"
    assert isinstance(await make().verify(bearer(signed())), Principal)
    assert server.count("/.well-known/oauth-authorization-server") == 1  # tried first, 404
    server.requests.clear()
    assert isinstance(await make(jwks_uri=f"{ISSUER}/jwks").verify(bearer(signed())), Principal)
    assert [request.url.path for request in server.requests] == ["/jwks"]


async def test_metadata_of_another_issuer_is_not_believed(make: Make, server: FakeServer) -> None:
    server.metadata["issuer"] = "https://evil.example.com"
    verdict = await refusal(make(), bearer(signed()))
    assert (verdict.status, verdict.error) == (503, "temporarily_unavailable")
    assert "is the metadata of another issuer" in verdict.description


async def test_keys_that_cannot_be_fetched_are_503_logged_once_per_interval(
    make: Make, server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.jwks_status = 500
    resource = make(jwks_uri=f"{ISSUER}/jwks")
    with caplog.at_level(logging.WARNING, "mcp_supervisor.facade.oauth"):
        for _ in range(5):
            verdict = await refusal(resource, bearer(signed()))
            assert verdict.status == 503
            assert verdict.description == (
                f"the authorization server's keys cannot be fetched: {ISSUER}/jwks answered HTTP 500"
            )
    assert server.count("/jwks") == 1
    assert len([r for r in caplog.records if "cannot be fetched" in r.getMessage()]) == 1
    assert not any(r.exc_info for r in caplog.records)


async def test_an_unknown_kid_refetches_at_most_once_per_interval(server: FakeServer) -> None:
    now = [1000.0]
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(server.handle))
    keys = IssuerKeys(ISSUER, f"{ISSUER}/jwks", lambda: http, clock=lambda: now[0])
    assert [key.kid for key in await keys.keys_for("k1", "ES256")] == ["k1"]
    server.keys.append(jwk(NEW_KEY, "k2"))  # the issuer rotates
    assert await keys.keys_for("k2", "ES256") == []  # too soon to ask again
    assert await keys.keys_for("k3", "ES256") == []
    assert server.count("/jwks") == 1
    now[0] += REFETCH_INTERVAL
    assert [key.kid for key in await keys.keys_for("k2", "ES256")] == ["k2"]
    assert await keys.keys_for("k3", "ES256") == []
    assert server.count("/jwks") == 2
    assert await keys.keys_for("k1", "RS256") == []  # an EC key checks no RSA signature


async def test_a_failed_refetch_keeps_the_keys_fetched_before(server: FakeServer) -> None:
    now = [0.0]
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(server.handle))
    keys = IssuerKeys(ISSUER, f"{ISSUER}/jwks", lambda: http, clock=lambda: now[0])
    assert len(await keys.keys_for(None, "ES256")) == 1
    server.jwks_status, now[0] = 503, REFETCH_INTERVAL
    assert await keys.keys_for("k2", "ES256") == []
    assert len(await keys.keys_for("k1", "ES256")) == 1


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ({"keys": "no"}, "is not a JWKS"),
        ({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}, "has no public signing key"),
        (
            {"keys": [{"kty": "RSA", "n": "!!", "e": "AQAB"}, {"kty": "EC", "use": "enc"}]},
            "has no public signing key",
        ),
    ],
)
async def test_a_jwks_without_usable_keys_is_named(
    server: FakeServer, document: dict[str, Any], said: str
) -> None:
    def handle(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json=document)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handle))
    with pytest.raises(KeysUnavailable, match=said):
        await IssuerKeys(ISSUER, f"{ISSUER}/jwks", lambda: http).keys_for(None, "ES256")


def introspecting(make: Make, every: bool = False) -> ProtectedResource:
    endpoint = Introspection(f"{ISSUER}/introspect", "gate way", "s:cret", every)
    return make(introspection=endpoint)


def answer(**changes: Any) -> dict[str, Any]:
    return {"active": True, **claims(**changes)}


async def test_an_opaque_token_is_introspected_and_the_answer_kept(make: Make, server: FakeServer) -> None:
    resource = introspecting(make)
    server.introspected["opaque-1"] = answer(groups=["eng"])
    for _ in range(3):
        principal = await resource.verify(bearer("opaque-1"))
        assert isinstance(principal, Principal)
        assert (principal.name, principal.via, principal.scopes) == ("alice", "introspection", {"mcp:tools"})
    assert server.count("/introspect") == 1
    [request] = server.requests
    assert request.headers["authorization"] == "Basic " + base64.b64encode(b"gate%20way:s%3Acret").decode()
    assert b"token=opaque-1" in request.content and b"token_type_hint=access_token" in request.content
    assert isinstance(await resource.verify(bearer(signed())), Principal)  # a JWT is still checked itself
    assert server.count("/introspect") == 1


@pytest.mark.parametrize(
    ("said", "why"),
    [
        ({"active": False}, "the token is not active"),
        (answer(aud="https://other.example.com"), "wrong audience"),
        (answer(aud=None), "wrong audience"),
        (answer(iss="https://evil.example.com"), "wrong issuer"),
        (answer(exp=int(time.time()) - 5), "the token expired"),
        (answer(nbf=int(time.time()) + 600), "the token is not yet valid"),
        (answer(sub=None), "the token has no sub"),
        (answer(exp="soon"), "the introspection answer's exp is not a number"),
    ],
)
async def test_an_introspection_answer_is_checked(
    make: Make, server: FakeServer, said: dict[str, Any], why: str
) -> None:
    server.introspected["t"] = said
    resource = introspecting(make)
    for _ in range(2):
        verdict = await refusal(resource, bearer("t"))
        assert (verdict.status, verdict.error) == (401, "invalid_token")
        assert verdict.description.startswith(why)
    assert server.count("/introspect") == 1  # the refusal was kept too


async def test_an_introspection_endpoint_that_fails_is_503(make: Make, server: FakeServer) -> None:
    resource = introspecting(make)
    server.introspection_status = 401
    verdict = await refusal(resource, bearer("t"))
    assert verdict.status == 503 and "introspect answered HTTP 401" in verdict.description
    server.introspection_status = 200
    server.introspected["t"] = {"no": "active"}
    assert "has no 'active'" in (await refusal(resource, bearer("t"))).description


async def test_introspect_all_asks_about_jwts_too(make: Make, server: FakeServer) -> None:
    token = signed()
    server.introspected[token] = answer(sub="from-introspection")
    principal = await introspecting(make, every=True).verify(bearer(token))
    assert isinstance(principal, Principal) and (principal.name, principal.via) == (
        "from-introspection",
        "introspection",
    )
    assert server.count("/jwks") == 0


def test_the_metadata_says_the_resource_its_issuer_scopes_and_bearer_header() -> None:
    settings = OAuthResource(
        issuer="http://127.0.0.1:9000", resource="http://127.0.0.1:8765/mcp", required_scopes=("s",)
    )
    resource = ProtectedResource(settings)
    assert json.loads(resource.document) == {
        "resource": "http://127.0.0.1:8765/mcp",
        "authorization_servers": ["http://127.0.0.1:9000"],
        "scopes_supported": ["s"],
        "bearer_methods_supported": ["header"],
        "resource_name": "mcp-supervisor",
    }
    assert resource.metadata_url == "http://127.0.0.1:8765/.well-known/oauth-protected-resource/mcp"
    assert resource.metadata_paths == {
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    }
    behind = ProtectedResource(OAuthResource(issuer=ISSUER, resource="https://example.com/tools/mcp/"))
    assert behind.metadata_url == "https://example.com/.well-known/oauth-protected-resource/tools/mcp"
    assert "/.well-known/oauth-protected-resource/tools/mcp" in behind.metadata_paths
    assert "scopes_supported" not in json.loads(behind.document)
    assert metadata_url("https://example.com") == "https://example.com/.well-known/oauth-protected-resource"


class Sent:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: Any) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def headers(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.messages[0]["headers"]}

    @property
    def body(self) -> Any:
        return json.loads(self.messages[1]["body"])


async def test_refusals_are_answered_as_rfc_6750_and_rfc_9728_say(make: Make) -> None:
    resource = make(required_scopes=("mcp:tools",))
    where = 'resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"'

    sent = Sent()
    await resource.refuse(sent, await refusal(resource, None))
    assert sent.status == 401
    assert sent.headers["www-authenticate"] == f'Bearer {where}, scope="mcp:tools"'
    assert sent.body["error"] == "unauthorized" and sent.body["scope"] == "mcp:tools"

    sent = Sent()
    await resource.refuse(sent, await refusal(resource, bearer(signed(kid='k"9\\'))))
    why = "unknown key: kid k?9? is not in the issuer's JWKS"
    assert (
        sent.headers["www-authenticate"]
        == f'Bearer error="invalid_token", error_description="{why}", {where}'
    )
    assert sent.body == {
        "error": "invalid_token",
        "error_description": "unknown key: kid k?9? is not in the issuer's JWKS",
        "resource_metadata": where.split('"')[1],
    }

    sent = Sent()
    await resource.refuse(sent, await refusal(resource, bearer(signed(scope="other"))))
    assert sent.status == 403
    assert 'error="insufficient_scope"' in sent.headers["www-authenticate"]
    assert 'scope="mcp:tools"' in sent.headers["www-authenticate"]

    sent = Sent()
    await resource.refuse(sent, Refusal(503, "temporarily_unavailable", "the keys cannot be fetched"))
    assert (
        sent.status == 503 and sent.headers["retry-after"] == "30" and "www-authenticate" not in sent.headers
    )


async def test_the_metadata_is_read_with_get_or_head() -> None:
    resource = ProtectedResource(OAuthResource(issuer=ISSUER, resource=RESOURCE))
    for method, status in (("GET", 200), ("HEAD", 200), ("POST", 405)):
        sent = Sent()
        await resource.send_metadata(method, sent)
        assert sent.status == status
        assert (sent.messages[1]["body"] == b"") == (method == "HEAD")
        assert int(sent.headers["content-length"]) == (
            len(resource.document) if status == 200 else len(sent.messages[1]["body"])
        )


def check_never_fails(make: Make, header: bytes) -> None:
    async def main() -> None:
        verdict = await make().verify(header)
        assert isinstance(verdict, Refusal) and verdict.status == 401, verdict
        assert verdict.error in (None, "invalid_token")
        assert all(0x20 <= ord(c) < 0x7F for c in verdict.description)

    trio.run(main)


@FUZZ
@given(header=st.binary(max_size=300))
def test_any_authorization_header_is_401(make: Make, header: bytes) -> None:
    check_never_fails(make, header)


segment = st.one_of(
    st.binary(max_size=80).map(b64),
    st.dictionaries(
        st.sampled_from(["alg", "kid", "typ", "crit", "sub", "exp", "aud", "iss"]),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(allow_nan=True),
            st.text(max_size=10),
            st.lists(st.integers(), max_size=2),
        ),
    ).map(lambda value: b64(json.dumps(value).encode())),
    st.sampled_from([b64(b'{"alg":"ES256","kid":"k1"}'), b64(b'{"alg":"none"}'), b64(b'{"alg":"HS256"}')]),
)


@FUZZ
@given(
    parts=st.lists(segment, min_size=3, max_size=3), scheme=st.sampled_from(["Bearer", "bearer", "BEARER"])
)
def test_any_jwt_shaped_token_is_401(make: Make, parts: list[str], scheme: str) -> None:
    check_never_fails(make, f"{scheme} {'.'.join(parts)}".encode())
