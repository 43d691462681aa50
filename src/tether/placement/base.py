"""Where roles run, behind one call interface the loops use.

A placement holds named roles ("actor", "reference", "critic", "reward", "rollout") and runs
their methods: synchronously (``placement.role("actor").logprobs(rollout)``) or asynchronously
(``h = placement.role("actor").submit.update(...)`` then ``placement.wait([h, ...])``), in which
case the placement decides whether the calls overlap. The loops only ever hold
:class:`RoleProxy` objects, never a role or a model: the in-process placement
(:mod:`tether.placement.local`) and a Ray placement serve the same calls.
"""

from __future__ import annotations

from typing import Any, Protocol


class Placement(Protocol):
    def call(self, role: str, method: str, *args, **kwargs) -> Any:
        """Run ``role.method(*args, **kwargs)`` and return its result."""

    def submit(self, role: str, method: str, *args, **kwargs) -> Any:
        """Start ``role.method(*args, **kwargs)``; returns a handle for :meth:`wait`."""

    def wait(self, handles: list) -> list:
        """The results of submitted calls, in the order given (an exception in any is raised)."""

    def has(self, role: str) -> bool:
        """Whether a role of that name is placed."""

    def close(self) -> None:
        """Release what the placement holds (threads, remote workers)."""


class RoleProxy:
    """A role as the loop sees it: method calls go through the placement.

    ``proxy.method(...)`` is a synchronous call; ``proxy.submit.method(...)`` an asynchronous one.
    """

    def __init__(self, placement: Placement, name: str, asynchronous: bool = False):
        self._placement, self._name, self._async = placement, name, asynchronous

    @property
    def submit(self) -> "RoleProxy":
        return RoleProxy(self._placement, self._name, asynchronous=True)

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)
        run = self._placement.submit if self._async else self._placement.call

        def call(*args, **kwargs):
            return run(self._name, method, *args, **kwargs)

        call.__name__ = f"{self._name}.{method}"
        return call

    def __repr__(self) -> str:
        return f"RoleProxy({self._name!r})"


def role(placement: Placement, name: str) -> RoleProxy:
    """The proxy the loop uses for role ``name``."""
    return RoleProxy(placement, name)
