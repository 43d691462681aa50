"""The HTTP API: OpenAI-compatible chat and text completions, best-of-N, and reward scores.

``create_app(service, settings)`` builds the FastAPI app around a loaded
:class:`~tether.serve.service.ModelService`. Routes validate and plan on the event loop, then
wait for the batcher's worker thread; no route ever runs the model itself. Every error is an
OpenAI-shaped JSON body, and malformed input is a 400 (FastAPI's 422 is mapped to 400).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from concurrent.futures import Future
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tether.serve import render
from tether.serve.batcher import Batcher, Job, QueueFull, ShuttingDown
from tether.serve.errors import APIError, engine_stopped, error_body, queue_full, shutting_down
from tether.serve.middleware import GuardMiddleware
from tether.serve.planning import Planner
from tether.serve.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    ModelCard,
    ModelList,
    RewardRequest,
    RewardResponse,
)
from tether.serve.service import GenJob, ModelService
from tether.serve.settings import ServeSettings

log = logging.getLogger(__name__)

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def create_app(service: ModelService, settings: ServeSettings | None = None) -> FastAPI:
    settings = settings or ServeSettings()
    settings.validate(service.has_reward)
    planner = Planner(service, settings)
    batcher = Batcher(service.run_batch, settings.max_batch_size, settings.queue_depth,
                      settings.batch_wait_ms / 1000.0)
    started = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        yield
        # Graceful shutdown: uvicorn has stopped accepting connections and waited for the
        # open ones; finish whatever is still queued, then stop the worker.
        await asyncio.to_thread(batcher.close, True)

    app = FastAPI(title="tether", summary="OpenAI-compatible serving with best-of-N reranking", lifespan=lifespan)
    app.state.service, app.state.settings, app.state.batcher = service, settings, batcher
    app.add_middleware(GuardMiddleware, api_key=settings.api_key, max_body_bytes=settings.max_body_bytes)
    install_error_handlers(app)

    jobs = Dispatcher(batcher, settings, service.failure)

    @app.get("/health")
    async def health():
        failure = service.failure()  # a dead generation engine (vLLM) makes the server unhealthy for good
        body = {
            "status": "engine_stopped" if failure else "shutting_down" if batcher.closing else "ok",
            "model": settings.model_name,
            "reward_model": settings.reward_model_name if service.has_reward else None,
            "queue": {"pending": batcher.pending, "depth": settings.queue_depth},
            "batches": {"run": batcher.batches_run, "largest_rows": batcher.largest_batch},
        }
        if failure:
            body["error"] = engine_stopped(failure).body()["error"]
        return JSONResponse(body, status_code=503 if failure or batcher.closing else 200)

    @app.get("/v1/models")
    async def models():
        return ModelList(data=[ModelCard(id=settings.model_name, created=started)]).model_dump()

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest):
        return await jobs.generate(planner.chat(req), req, chat=True)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest):
        return await jobs.generate(planner.completion(req), req, chat=False)

    @app.post("/v1/rewards")
    async def rewards(req: RewardRequest):
        scores = await jobs.run(planner.rewards(req))
        return RewardResponse(model=settings.reward_model_name or "reward", scores=scores).model_dump()

    return app


class Dispatcher:
    """Hands jobs to the batcher and waits for them, or streams their text as server-sent events."""

    def __init__(self, batcher: Batcher, settings: ServeSettings, failure=lambda: None):
        self.batcher = batcher
        self.settings = settings
        self.failure = failure  # why the generation engine has stopped, or None

    def check_engine(self) -> None:
        """A 503 naming the reason once the generation engine has stopped."""
        if (reason := self.failure()) is not None:
            raise engine_stopped(reason)

    async def generate(self, job: GenJob, req, chat: bool):
        """A completion's response: a JSON body, or a stream of server-sent events."""
        self.check_engine()
        model = self.settings.model_name
        tools = chat and req.parses_tool_calls  # answers parsed for <tool_call> blocks
        if req.stream:
            return self.stream(job, render.ChunkMaker(chat, model, req.include_usage), buffered=tools)
        result = await self.run(job)
        if chat:
            return JSONResponse(render.chat_completion(job, result, req.n, model, req.return_scores, tools))
        return JSONResponse(render.completion(job, result, req.n, model, req.return_scores))

    def submit(self, job: Job) -> Future:
        try:
            self.batcher.start()
            return self.batcher.submit(job)
        except QueueFull:
            raise queue_full(self.settings.queue_depth) from None
        except ShuttingDown:
            raise shutting_down() from None

    async def run(self, job: Job):
        future = self.submit(job)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            job.cancel()
            raise
        except Exception:
            self.check_engine()  # the engine died under this job: a 503 with its reason, not a 500
            raise

    def stream(self, job: GenJob, chunks: render.ChunkMaker, buffered: bool = False) -> StreamingResponse:
        """Stream ``job``'s text as it is generated; ``buffered`` (a chat answer with tools, whose
        blocks must be read whole): the whole answer at the end, as content and tool_calls deltas."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def on_delta(text: str) -> None:  # on the worker thread; the final None comes after these
            try:
                loop.call_soon_threadsafe(queue.put_nowait, text)
            except RuntimeError:  # the event loop is gone (forced shutdown): stop this row
                job.cancelled = True

        if not buffered:
            job.on_delta = on_delta
        future = asyncio.wrap_future(self.submit(job))  # a full queue is a 429 before the stream opens
        future.add_done_callback(lambda _: queue.put_nowait(None))

        async def events():
            try:
                if (first := chunks.start()) is not None:
                    yield sse(first)
                while (text := await queue.get()) is not None:
                    yield sse(chunks.text(text))
                try:
                    result = future.result()
                except Exception:  # noqa: BLE001 - the status line is sent: report in-band
                    if (reason := self.failure()) is not None:
                        yield sse(engine_stopped(reason).body())
                    else:
                        log.exception("streamed generation failed")
                        yield sse(error_body("Generation failed on the server.", "server_error",
                                             code="internal_error"))
                else:
                    sample = result[0][0]
                    for chunk in chunks.turn(sample) if buffered else [chunks.finish(sample.finish_reason)]:
                        yield sse(chunk)
                    if chunks.include_usage:
                        yield sse(chunks.usage(job, result))
                yield "data: [DONE]\n\n"
            finally:
                if not future.done():
                    job.cancel()  # the client went away: stop generating for it

        return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def _param(loc) -> str | None:
    """('body', 'messages', 0, 'role') -> 'messages[0].role'."""
    out = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def _common_prefix(locs: list[tuple]) -> tuple:
    prefix = []
    for parts in zip(*locs):
        if any(p != parts[0] for p in parts):
            break
        prefix.append(parts[0])
    return tuple(prefix)


def validation_message(errors: list[dict]) -> tuple[str, str | None]:
    """Pydantic errors -> one readable message and the OpenAI ``param`` (the offending field)."""
    if not errors:
        return "Invalid request body.", None
    first = errors[0]
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if first.get("type") == "json_invalid":
        return f"The request body is not valid JSON ({msg}).", None
    locs = [tuple(e.get("loc", ())) for e in errors]
    prefix = _common_prefix(locs)
    if len(errors) > 1 and _param(prefix):
        # One field matched none of a union's members (e.g. prompt: str | list[str] | ...):
        # pydantic reports each member; name the field and the accepted types instead.
        tags = [loc[len(prefix)] for loc in locs if len(loc) > len(prefix)]
        kinds = [t for i, t in enumerate(tags) if isinstance(t, str) and t not in tags[:i]]
        return f"Invalid '{_param(prefix)}': expected {' or '.join(kinds) or 'another value'}.", _param(prefix)
    param = _param(locs[0])
    if param is None:
        if first.get("type") == "missing":
            return "The request body is missing: send a JSON object.", None
        return f"The request body must be a JSON object with the documented fields ({msg}).", None
    return f"Invalid '{param}': {msg}.", param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError):
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        message, param = validation_message(exc.errors())
        return JSONResponse(error_body(message, param=param), 400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse(error_body(message, code=code), status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("Internal server error.", "server_error", code="internal_error"), 500)
