"""The blocking and async client stubs offer the same methods, with the same parameters."""

from __future__ import annotations

import inspect

from supervisor.client import AsyncSupervisorClient, SupervisorClient

LIFECYCLE = {"close"}  # the blocking client's; the async one closes on leaving ``async with``


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if not name.startswith("_") and callable(member) and name not in LIFECYCLE
    }


def parameters(signature: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def test_both_clients_have_the_same_public_methods() -> None:
    assert sorted(public_methods(SupervisorClient)) == sorted(public_methods(AsyncSupervisorClient))


def test_each_method_takes_the_same_parameters_on_both_clients() -> None:
    blocking, asynchronous = public_methods(SupervisorClient), public_methods(AsyncSupervisorClient)
    for name, signature in blocking.items():
        assert parameters(signature) == parameters(asynchronous[name]), name


SYNC_ON_BOTH = {"as_client"}  # a view of the client, made without I/O


def test_every_async_method_is_a_coroutine_function() -> None:
    for name in public_methods(AsyncSupervisorClient):
        if name not in SYNC_ON_BOTH:
            assert inspect.iscoroutinefunction(getattr(AsyncSupervisorClient, name)), name


def test_the_constructors_take_the_same_parameters() -> None:
    assert parameters(inspect.signature(SupervisorClient)) == parameters(
        inspect.signature(AsyncSupervisorClient)
    )
