"""The in-process placement: every role in this process, on this machine's devices.

Synchronous calls run at once. Asynchronous calls are queued and run when :meth:`wait` is
called: side by side in threads (:class:`~tether.placement.threads.RoleThreads`, each with its
share of the torch threads) when the roles run on a multi-core CPU and ``cpu.parallel_roles``
is on, else one after the other in the calling thread, in order. On a CPU that overlap is worth
~15 % of a PPO iteration (docs/performance.md); on a GPU the calls run in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.placement.threads import RoleThreads


@dataclass
class _Call:
    role: str
    method: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


class LocalPlacement:
    """Roles as plain objects in this process; ``parallel``: run submitted calls side by side."""

    def __init__(self, roles: dict[str, Any], parallel: bool = False):
        self.roles = dict(roles)
        self.threads = RoleThreads(2 if parallel else 1)

    def has(self, role: str) -> bool:
        return role in self.roles

    def call(self, role: str, method: str, *args, **kwargs) -> Any:
        return getattr(self.roles[role], method)(*args, **kwargs)

    def submit(self, role: str, method: str, *args, **kwargs) -> _Call:
        if role not in self.roles:
            raise KeyError(f"no role {role!r} is placed (placed: {sorted(self.roles)})")
        return _Call(role, method, args, kwargs)

    def wait(self, handles: list[_Call]) -> list:
        jobs = [lambda c=c: self.call(c.role, c.method, *c.args, **c.kwargs) for c in handles]
        return self.threads.run(jobs)

    def parallel(self) -> bool:
        """Submitted calls will run side by side (two workers and 2+ torch threads)."""
        return self.threads.parallel()

    def close(self) -> None:
        self.threads.close()
        for role in self.roles.values():  # engines with processes of their own (vLLM)
            close = getattr(role, "close", None)
            if callable(close):
                close()
