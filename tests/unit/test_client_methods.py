"""The stubs' methods written once (``supervisor.client.methods``) read as each stub's own."""

from __future__ import annotations

import inspect
import typing

import pytest

from supervisor.client.aio import AsyncSupervisorClient
from supervisor.client.blocking import SupervisorClient
from supervisor.client.methods import Methods

SHARED = [name for name in vars(Methods) if not name.startswith("_")]


@pytest.mark.parametrize("stub", [SupervisorClient, AsyncSupervisorClient])
@pytest.mark.parametrize("name", SHARED)
def test_each_shared_method_is_the_stubs_own_with_its_doc_and_what_its_reply_means(
    stub: type, name: str
) -> None:
    method = vars(stub)[name]
    assert method.__doc__ == getattr(Methods, name).__doc__
    assert method.__qualname__ == f"{stub.__qualname__}.{name}"
    assert method.__module__ == stub.__module__
    returns = inspect.signature(method).return_annotation
    assert "Exchange" not in returns
    assert typing.get_type_hints(method)["return"] is not None
    assert inspect.iscoroutinefunction(method) == (stub is AsyncSupervisorClient)
