"""Per-route request plans for the HTTP service (issue 14, item 9 over HTTP).

FastAPI answers each request by walking the route's dependency tree: for every parameter it
looks up aliases, checks whether the annotation is a sequence, a form, a JSON field or a
parameter model, parses the content type with ``email.message``, and runs a sync route through
anyio's thread pool. Profiled in ``memlab serve`` under the 8-client load test, that walk and
the hand-over to the thread pool cost more CPU per request than memlab's own checks and often
more than the store's read. A :class:`RoutePlan` does that inspection once, when the route is
made, for the shapes memlab's routes have, and at request time only reads the values and
validates each with the same pydantic field FastAPI would use. The sync route then runs in
:class:`~memlab.service._workers.Workers`.

A plan never answers differently from FastAPI. Whenever a request is not the plain case (no
JSON body where one is expected, a content type other than ``application/json``, a value that
does not validate, a dependency override installed), the plan hands the request to FastAPI's
own handler, which answers it as it always did (the 422 with its exact errors, say). That is
why the one dependency a plan runs itself must be marked pure (``__memlab_pure__ = True``): a
handed-over request runs it a second time, and it must give the same outcome and change
nothing. A route whose shape a plan does not cover (a ``Request`` parameter, several body
parameters, a sequence or model query parameter, nested dependencies, an endpoint that does not
encode its own answer) keeps FastAPI's handler for every request.
"""

from __future__ import annotations

import asyncio
import inspect
from copy import deepcopy
from typing import Any

from fastapi import BackgroundTasks, params
from fastapi import routing as fastapi_routing
from fastapi.datastructures import DefaultPlaceholder
from fastapi.routing import APIRoute, serialize_response
from starlette.responses import Response

from memlab.service._workers import Workers

__all__ = ["PlannedRoute", "RoutePlan", "WORKERS"]

#: The worker threads every planned route of this process runs in (at most 40, as anyio's).
WORKERS = Workers()

_MISSING = object()

# FastAPI's request telemetry (0.165+, on when an OpenTelemetry provider is set) records spans
# and data inside its own handler: a request it observes is handed to that handler.
_telemetry = getattr(fastapi_routing, "get_telemetry_data", lambda: None)
# FastAPI builds the handler of a route copied by include_router under this context variable
# (the include's dependencies, overrides, limits): such a route keeps FastAPI's handler.
_included = getattr(fastapi_routing, "_effective_route_context_var", None)


class _Param:
    """One path, query or header parameter: where it is read, and its field."""

    __slots__ = ("name", "key", "field", "required", "default", "copy_default",
                 "validate_default", "loc")

    def __init__(self, field, key: str, where: str) -> None:
        self.name, self.key, self.field = field.name, key, field
        self.required = field.field_info.is_required()
        self.default = None if self.required else field.default
        # FastAPI deep-copies a default per request; an immutable one needs no copy
        self.copy_default = not isinstance(self.default, (str, int, float, bool, type(None)))
        self.validate_default = bool(field.field_info.validate_default)
        self.loc = (where, key)

    def value(self, source) -> Any:
        """The validated value from ``source`` (a mapping), or ``_MISSING`` when FastAPI
        must answer (missing and required, or not valid)."""
        raw = source.get(self.key)
        if raw is None:
            if self.required:
                return _MISSING
            raw = deepcopy(self.default) if self.copy_default else self.default
            if not self.validate_default:
                return raw
        value, errors = self.field.validate(raw, {}, loc=self.loc)
        return _MISSING if errors else value


def _scalar_param(field, where: str) -> _Param | None:
    """A plan for a scalar parameter FastAPI reads with ``values.get(alias)``, or None."""
    info = field.field_info
    if getattr(info, "validation_alias", None) is not None:
        return None
    if info.metadata and any(type(item).__name__ == "Json" for item in info.metadata):
        return None
    annotation = info.annotation
    if annotation not in (str, int, float, bool) and annotation != (str | None):
        return None  # sequences, parameter models, unions of several types: FastAPI reads them
    return _Param(field, field.alias, where)  # (a header's alias is already "x-api-key")


class RoutePlan:
    """What a request to one route needs, worked out once from its FastAPI ``dependant``.

    Built by :meth:`of`, which returns None for a route whose shape it does not cover.
    """

    def __init__(self, route: APIRoute, fallback, *, call, background: str | None,
                 path: list[_Param], query: list[_Param], body, dependency) -> None:
        self.route, self.fallback, self.call, self.background = route, fallback, call, background
        self.path, self.query, self.body, self.dependency = path, query, body, dependency

    @classmethod
    def of(cls, route: APIRoute, fallback) -> RoutePlan | None:
        """The plan for ``route`` (``fallback``: FastAPI's own handler for it), or None."""
        try:
            return cls._build(route, fallback)
        except Exception:  # noqa: BLE001 - a FastAPI whose internals differ: keep its handler
            return None

    @classmethod
    def _build(cls, route: APIRoute, fallback) -> RoutePlan | None:
        if "dump_json" not in inspect.signature(serialize_response).parameters:
            return None  # an older FastAPI: _as_fastapi_would could not answer as it does
        if _included is not None and _included.get() is not None:
            return None  # a route copied by include_router: its include's context applies
        dependant = route.dependant
        call = dependant.call
        if not getattr(call, "__memlab_encoded__", False) or inspect.iscoroutinefunction(call):
            return None  # only sync routes that encode their own answer
        if (dependant.request_param_name or dependant.websocket_param_name
                or dependant.http_connection_param_name or dependant.response_param_name
                or dependant.security_scopes_param_name or dependant.cookie_params
                or dependant.header_params or len(dependant.body_params) > 1
                or len(dependant.dependencies) > 1 or route.response_field is None
                or not isinstance(route.response_class, DefaultPlaceholder)
                or route.status_code not in (None, 200)):
            return None
        path = [_scalar_param(f, "path") for f in dependant.path_params]
        query = [_scalar_param(f, "query") for f in dependant.query_params]
        if None in path or None in query:
            return None
        body = None
        if dependant.body_params:
            (param,) = dependant.body_params
            if (route.body_field is None or isinstance(param.field_info, (params.Form,
                                                                           params.File))
                    or getattr(route, "_embed_body_fields", False)
                    or not param.field_info.is_required()):
                return None
            body = route.body_field
        dependency = None
        if dependant.dependencies:
            (sub,) = dependant.dependencies
            if (not getattr(sub.call, "__memlab_pure__", False)
                    or not inspect.iscoroutinefunction(sub.call) or sub.dependencies
                    or sub.path_params or sub.query_params or sub.cookie_params
                    or sub.body_params or sub.background_tasks_param_name
                    or sub.response_param_name or sub.security_scopes_param_name
                    or sub.websocket_param_name or sub.http_connection_param_name
                    or getattr(sub, "concurrency", None) is not None):
                return None
            headers = [_scalar_param(f, "header") for f in sub.header_params]
            if None in headers:
                return None
            dependency = (sub.name, sub.call, sub.request_param_name, headers)
        return cls(route, fallback, call=call, background=dependant.background_tasks_param_name,
                   path=path, query=query, body=body, dependency=dependency)

    async def __call__(self, request) -> Response:
        """Answer ``request`` as FastAPI's handler would; hand it over when it is not the
        plain case."""
        overrides = getattr(self.route.dependency_overrides_provider, "dependency_overrides",
                            None)
        if overrides or _telemetry() is not None:
            return await self.fallback(request)
        body = _MISSING
        if self.body is not None:
            content_type = request.headers.get("content-type", "")
            if content_type.split(";", 1)[0].strip().lower() != "application/json":
                return await self.fallback(request)
            try:
                body = await request.json() if await request.body() else _MISSING
            except Exception:  # noqa: BLE001 - not JSON, or the client left: FastAPI answers
                return await self.fallback(request)
            if body is _MISSING:
                return await self.fallback(request)
        values: dict[str, Any] = {}
        if self.dependency is not None:  # FastAPI solves it before the route's own values
            name, call, request_name, headers = self.dependency
            arguments = {} if request_name is None else {request_name: request}
            for param in headers:
                value = param.value(request.headers)
                if value is _MISSING:
                    return await self.fallback(request)
                arguments[param.name] = value
            values[name] = await call(**arguments)
        for params_, source in ((self.path, request.path_params),
                                (self.query, request.query_params)):
            for param in params_:
                value = param.value(source)
                if value is _MISSING:
                    return await self.fallback(request)
                values[param.name] = value
        if self.body is not None:
            value, errors = self.body.validate(body, {}, loc=("body",))
            if errors:
                return await self.fallback(request)
            values[self.body.name] = value
        background = None
        if self.background is not None:
            background = values[self.background] = BackgroundTasks()
        answer = await WORKERS.run(self.call, **values)
        if not isinstance(answer, Response):
            answer = await self._as_fastapi_would(answer, background)
        elif answer.background is None:
            answer.background = background
        return answer

    async def _as_fastapi_would(self, content: Any, background) -> Response:
        """An answer the route could not encode: validated and encoded by FastAPI's own
        ``serialize_response`` (a value that does not validate raises its
        ``ResponseValidationError``, a 500, as FastAPI's handler does)."""
        route = self.route
        body = await serialize_response(
            field=route.response_field, response_content=content,
            include=route.response_model_include, exclude=route.response_model_exclude,
            by_alias=route.response_model_by_alias,
            exclude_unset=route.response_model_exclude_unset,
            exclude_defaults=route.response_model_exclude_defaults,
            exclude_none=route.response_model_exclude_none, is_coroutine=False,
            dump_json=True)
        return Response(content=body, media_type="application/json", background=background,
                        status_code=route.status_code or 200)


class PlannedRoute(APIRoute):
    """A FastAPI route answered through its :class:`RoutePlan` when it has one.

    Examples
    --------
    >>> from fastapi import FastAPI
    >>> app = FastAPI()
    >>> app.router.route_class = PlannedRoute
    >>> @app.get("/ping")
    ... async def ping() -> dict:
    ...     return {"ok": True}
    >>> app.routes[-1].plan is None  # an async route keeps FastAPI's handler
    True
    """

    plan: RoutePlan | None = None

    def get_route_handler(self):
        fallback = super().get_route_handler()
        plan = RoutePlan.of(self, fallback)
        if plan is None:
            return fallback
        self.plan = plan

        async def planned(request) -> Response:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # another event loop (trio): Workers needs asyncio's
                return await fallback(request)
            return await plan(request)
        return planned
