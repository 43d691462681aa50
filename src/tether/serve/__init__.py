"""OpenAI-compatible serving of a policy, with best-of-N reranking and a reward endpoint.

Modules, one job each: :mod:`.settings` (limits), :mod:`.schemas` (request/response bodies),
:mod:`.planning` (requests -> jobs under the limits), :mod:`.batcher` (bounded queue + the one
model thread), :mod:`.service` (models: sampling and scoring), :mod:`.textstream` (stop
sequences, streaming deltas), :mod:`.tool_use` (tools in, ``tool_calls`` out), :mod:`.render`
(response bodies), :mod:`.middleware` (API key, body size), :mod:`.app` (routes, errors),
:mod:`.server` (uvicorn), :mod:`.loadtest`.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "create_app": "tether.serve.app",
    "ModelService": "tether.serve.service",
    "ServeSettings": "tether.serve.settings",
    "ServerThread": "tether.serve.server",
    "serve": "tether.serve.server",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
