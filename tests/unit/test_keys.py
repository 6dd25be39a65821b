"""CURVE key files (supervisor.security.keys) and the gate's allowed clients (supervisor.security.curve)."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
import zmq
import zmq.auth

from supervisor.security.curve import AllowedClients, Gate, HandshakeWatch
from supervisor.security.keys import (
    KEYS_ENV,
    ClientKeys,
    KeyFileError,
    ServerKeys,
    client_keys,
    key_dir,
    keygen,
)

TCP = "tcp://127.0.0.1:5555"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keygen_makes_both_pairs_secret_files_0600_and_allows_its_own_client(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    done = keygen(keys)
    assert [what for what, _ in done] == ["created"] * 5
    assert (mode(keys), mode(keys / "server.key_secret"), mode(keys / "client.key_secret")) == (
        0o700,
        0o600,
        0o600,
    )
    server, client = ServerKeys.load(keys), ClientKeys.load(keys)
    assert client.server == server.public
    assert AllowedClients(keys / "allowed_clients").public_keys() == {client.public}
    assert zmq.curve_public(server.secret) == server.public


def test_keygen_keeps_existing_keys_and_rewrites_a_lost_public_file(tmp_path: Path) -> None:
    keygen(tmp_path)
    before = ServerKeys.load(tmp_path)
    (tmp_path / "server.key").unlink()
    done = dict((path.name, what) for what, path in keygen(tmp_path))
    assert done == {
        "server.key_secret": "kept",
        "server.key": "created",
        "client.key_secret": "kept",
        "client.key": "kept",
    }
    assert ServerKeys.load(tmp_path) == before
    assert zmq.auth.load_certificate(tmp_path / "server.key") == (before.public, None)


def test_client_only_keygen_makes_no_server_pair(tmp_path: Path) -> None:
    keygen(tmp_path, server=False)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["client.key", "client.key_secret"]
    with pytest.raises(KeyFileError, match=r"server\.key does not exist: copy the supervisor's server\.key"):
        ClientKeys.load(tmp_path)


def test_secret_readable_by_others_is_refused_naming_the_fix(tmp_path: Path) -> None:
    keygen(tmp_path)
    (tmp_path / "client.key_secret").chmod(0o640)
    with pytest.raises(KeyFileError, match=r"can be read by other users \(mode 0640\): run 'chmod 600 "):
        ClientKeys.load(tmp_path)


def test_allowed_clients_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    keygen(tmp_path)
    (tmp_path / "allowed_clients").chmod(0o777)
    with pytest.raises(KeyFileError, match=r"allowed_clients can be written by other users \(mode 0777\)"):
        ServerKeys.load(tmp_path)


def test_missing_keys_name_the_file_and_the_keygen_command(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError) as caught:
        ServerKeys.load(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path / 'server.key_secret'} does not exist; make keys with 'mcp-supervisor keygen {tmp_path}'"
    )


def test_a_file_that_is_not_a_key_is_refused(tmp_path: Path) -> None:
    keygen(tmp_path)
    (tmp_path / "server.key").write_text('curve\n    public-key = "too short"\n')
    with pytest.raises(KeyFileError, match="holds no public key"):
        ClientKeys.load(tmp_path)


def test_allowed_clients_are_read_again_when_a_key_is_added_and_unsafe_files_are_ignored(
    tmp_path: Path,
) -> None:
    keygen(tmp_path / "server")
    keygen(tmp_path / "other", server=False)
    keygen(tmp_path / "third", server=False)
    allowed = AllowedClients(tmp_path / "server" / "allowed_clients")
    other, third = _public(tmp_path / "other"), _public(tmp_path / "third")
    assert other not in allowed.public_keys()
    shutil.copy(tmp_path / "other" / "client.key", allowed.directory / "other.key")
    assert other in allowed.public_keys()
    shutil.copy(tmp_path / "third" / "client.key", allowed.directory / "third.key")
    (allowed.directory / "third.key").chmod(0o666)
    assert third not in allowed.public_keys()
    (allowed.directory / "other.key").unlink()
    assert other not in allowed.public_keys()
    assert allowed.callback("mcp-supervisor", other) is False


def _public(directory: Path) -> bytes:
    public, _ = zmq.auth.load_certificate(directory / "client.key")
    return public


def test_client_keys_are_used_only_off_ipc_and_found_in_the_key_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEYS_ENV, str(tmp_path / "keys"))
    assert key_dir() == tmp_path / "keys"
    assert client_keys(None, TCP) is None  # no client key there: plain
    keygen(tmp_path / "keys")
    found = client_keys(None, TCP)
    assert found is not None and found.directory == tmp_path / "keys"
    assert client_keys(None, "ipc:///run/x.sock") is None
    assert client_keys(False, TCP) is None and client_keys("none", TCP) is None
    assert client_keys(tmp_path / "keys", TCP) == found
    with pytest.raises(KeyFileError, match="does not exist"):
        client_keys(tmp_path / "elsewhere", TCP)


def test_gate_refuses_unknown_keys_and_the_watch_says_so(tmp_path: Path) -> None:
    keygen(tmp_path / "keys")
    keygen(tmp_path / "stranger", server=False)
    shutil.copy(tmp_path / "keys" / "server.key", tmp_path / "stranger" / "server.key")
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    gate = Gate(ctx, ServerKeys.load(tmp_path / "keys"))
    try:
        server = ctx.socket(zmq.ROUTER)
        ServerKeys.load(tmp_path / "keys").serve(server)
        server.bind("tcp://127.0.0.1:*")
        endpoint = server.getsockopt_string(zmq.LAST_ENDPOINT)
        for directory, expected in (("keys", None), ("stranger", "refused this client's CURVE key")):
            keys = ClientKeys.load(tmp_path / directory)
            client = ctx.socket(zmq.DEALER)
            keys.connect(client)
            watch = HandshakeWatch(client, endpoint, keys)
            client.connect(endpoint)
            client.send(b"hello")
            if expected is None:
                assert server.poll(10_000) and server.recv_multipart()[1] == b"hello"
            else:
                assert watch.monitor.poll(10_000)
                failure = watch.update()
                assert failure is not None and expected in failure and str(tmp_path / "stranger") in failure
                assert not server.poll(0)
            watch.close()
            client.close(linger=0)
        server.close(linger=0)
    finally:
        gate.stop()
        ctx.term()
