"""Provider targets: a raw model behind a provider API, declared in ``providers/NAME.yaml``.

The definition (see :mod:`evalx.targets.definitions`) says how to build the request and
read the answer; this module fills in the case: it renders ``system``,
``prompt`` (or ``messages``), ``params`` and ``tools`` for each cell, sends the
request through the shared HTTP layer (:mod:`evalx.targets.transport.http`: retries, Retry-After,
jittered backoff), optionally paced by ``rate_limit: {rpm: N}``, and turns the
response into a trajectory with a cost (usage × pricing; ``None`` when no
price is known, or when the answer has no usage: then ``cost_note`` says so —
never a silent 0).

What a server says is checked, not trusted: a 2xx answer that carries an
error (``{"error": ...}``, Anthropic's ``{"type": "error"}``, vLLM's
``{"object": "error"}``), or that has no answer in it (the text expression's
path is missing — OpenAI's ``choices: []`` —, or, for other expressions,
no text, no tool call and no stop reason) is the cell's error with the
server's message, never an empty answer (so never cached); a token count
that is negative, not finite or not a whole number is a protocol error
naming the field. The stop reason is the trajectory's ``stop_reason``.

The cache key (:meth:`ProviderTarget.cache_key`) covers everything that
decides the answer or how it is read: provider, model, base URL, the
definition's request and response mapping (a digest of the parsed file,
pricing aside), a digest of the headers sent (never the API key, never a
header in clear), the rendered body and the repeat index. A definition with an ``embeddings:``
section also lets the target embed a text (:meth:`ProviderTarget.embed`), for
``semantic_similar``'s ``embedding:``.

``stream: true`` (or ``params: {stream: true}``, or the definition's
``stream.default``) asks for the answer as Server-Sent Events, read as the
definition's ``stream:`` section says (:mod:`evalx.targets.provider_stream`):
the cell gets ``ttft_ms`` as an engine cell does, and a stream cut before its
end marker, an error event or an idle stream is the cell's error. A target
that does not stream never touches that code.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, NamedTuple, TypedDict

from evalx.common.attachments import elided, is_parts, template_parts
from evalx.common.json_types import JSON, JSONObject, Message
from evalx.common.redaction import SECRET_KEYS, harmless_header, looks_secret_name
from evalx.common.templates import TemplateRenderError, render, render_value
from evalx.errors import (
    ConfigError,
    DefinitionError,
    Issue,
    ProviderRateLimited,
    StreamErrorEvent,
    TargetError,
    TargetProtocolError,
    TargetTimeout,
)
from evalx.models import Cell, ToolCall, Trajectory, Usage, token_count
from evalx.targets.base import RunContext, TemplateContext, system_prompt, template_context
from evalx.targets.batch import FALL_BACK, BatchClient, BatchLedger, BatchQueue, BatchResult, BatchRound
from evalx.targets.definitions import (
    ExpressionScope,
    Price,
    ProviderDefinition,
    Reader,
    RequestScope,
    ToolDefinition,
    UsageSection,
    find_provider,
    plain_path,
    stream_requested,
    target_problems,
)
from evalx.targets.provider_stream import AwsEventStreamFraming, SSEFraming, StreamAssembler, carries_error, framing_for
from evalx.targets.settings import TargetSettings
from evalx.targets.spec import ProviderTargetSpec, TargetSpec, record_of, written_entry
from evalx.targets.transport.auth import AUTH_HINTS, RequestAuth, default_region, make_auth
from evalx.targets.transport.http import (
    Backoff,
    HttpClient,
    HttpResponse,
    StreamResponse,
    classify_status,
    parse_retry_after,
    retry_after_from,
    shown_url,
    snippet,
    too_large,
)
from evalx.targets.transport.pacing import EndpointLimiter, RateLimitHeaders, Slot
from evalx.targets.transport.ratelimit import RateLimiter

#: a response body larger than this is not kept in the result's ``raw``
_MAX_RAW_CHARS = 64_000
_RENDERED_KEPT = 4096  # requests rendered for cache keys and not yet sent (more cells than that in flight: rendered again)
#: ``cost_note`` of an answer whose usage is missing although the model has a price
NO_USAGE = "no usage in response"
#: ``cost_note`` when the provider definition reads no usage at all
NO_USAGE_MAPPING = "the provider definition reads no usage"
#: ``raw.usage_note`` of a streamed answer that sent no usage (its token counts are not known, not 0)
NO_STREAM_USAGE = "the stream sent no usage: token counts unknown"
#: a definition's keys that do not change a request or how its answer is read (left out of the cache key);
#: ``stream`` counts only for a target that streams; ``capabilities`` only by what it changes in the body (tool_history)
_UNKEYED = frozenset({"name", "description", "example_model", "pricing", "params", "stream", "capabilities"})


class ProviderRequest(NamedTuple):
    """One request as rendered for a cell (headers live on the target)."""

    method: str
    url: str
    #: the decoded body
    body: JSON
    #: the body as the bytes to send when rendering made them already, else None (the client encodes ``body``)
    data: bytes | None = None


class SentRequest(TypedDict):
    """A provider cell's ``request`` in results: what was sent, secret headers left out."""

    method: str
    url: str
    headers: dict[str, str]
    body: JSON


class RawAnswer(TypedDict, total=False):
    """A provider cell's ``raw`` in results: what the answer said beyond the trajectory's fields."""

    stop_reason: object
    tool_call_ids: list[object]
    #: the decoded response (when under ``_MAX_RAW_CHARS``)
    response: JSON
    #: a streamed answer's event count
    stream_events: int
    #: a streamed answer that sent no usage: ``usage: null`` and why
    usage: None
    usage_note: str
    #: batch mode: the batch the answer came from
    batch_id: str
    #: batch mode: why the request was sent again as a normal call (``expired: ...``)
    batch_fallback: str


class EmbeddingUsage(TypedDict):
    """What one :meth:`ProviderTarget.embed` call used."""

    input_tokens: int
    cost_usd: float | None


class ProviderTarget:
    type = "provider"

    def __init__(self, spec: TargetSpec | Mapping[str, object], settings: TargetSettings) -> None:
        entry = record_of(ProviderTargetSpec, spec)
        self.entry = entry
        self.id = entry.id
        self.spec = written_entry(spec)  # as written: the templates' ``target`` and generic cache keys read it
        self.settings = settings
        self.provider = entry.provider
        self.model = str(entry.model)  # a matrix variant's model is checked to be a string; str() keeps the key stable
        self.json_mode = bool(entry.json_mode)
        self.definition: ProviderDefinition | None = None
        self.base_url = ""
        self.url = ""
        self._location: dict[str, object] = {"model": self.model}  # what a definition's URL templates see (start())
        self.api_key: str | None = None
        self.key_hint = "api_key"
        #: the definition's ``auth: {kind: ...}`` other than header: credentials added to each request as it is sent
        self.auth: RequestAuth | None = None
        self.headers: dict[str, str] = {}
        self.public_headers: dict[str, str] = {}
        self.tools: list[ToolDefinition] = []
        self.price: Price | None = None
        self.client: HttpClient | None = None
        self.limiter: RateLimiter | None = None
        #: the endpoint's limiter (:mod:`evalx.targets.transport.pacing`), shared with every target, judge and
        #: simulated user of the same base URL and credential; None without ``rate_limits:`` or adaptive concurrency
        self.gate: EndpointLimiter | None = None
        #: awaited before each invoke()/embed() when a rate limit is set (see :meth:`_wait_turn`)
        self.pacer: Callable[[], Awaitable[None]] | None = None
        self._prepaid = 0  # rate-limit slots taken by pacer() and not yet used by a request
        self._redact: Callable[[str], str] | None = None
        self._readers: _Readers | None = None
        self._readers_of: ProviderDefinition | None = None  # the definition _readers were made from
        self._key_base = ""  # the cache key's part that is the same for every cell (set by start())
        #: whether answers are streamed (``stream: true``, ``params: {stream: true}`` or the definition's default)
        self.streaming = False
        self._params: Mapping[str, object] = dict(entry.params or {})  # the target's params, less its ``stream`` switch
        #: requests cache_key() rendered, by cell, for the invoke() that follows a miss (bounded: a hit never invokes)
        self._rendered: dict[int, tuple[Cell, list[Message] | None, ProviderRequest]] = {}
        #: batch mode: the queue the cells' requests go through (set by :meth:`batch_queue`), and the answers
        #: :meth:`prefetch` got, by cell, for the invoke() that follows
        self.batcher: BatchQueue | None = None
        self._batched: dict[int, tuple[Cell, ProviderRequest, BatchResult]] = {}
        self._batch_price: Price | None = None

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, run: RunContext) -> None:
        where = f"target {self.id!r}"
        definition = find_provider(self.provider, getattr(run, "providers_dir", None))
        self.definition = definition
        self._redact = run.redactor.text

        base_url = self.entry.base_url or definition.base_url
        if not self.entry.base_url:
            missing = definition.missing_env("base_url")
            if missing:
                raise ConfigError(
                    f"{where}: environment variable {missing} is not set ({definition.where('base_url')}); set it or the target's base_url"
                )
        if not base_url:
            raise ConfigError(f"{where}: no base_url (provider {self.provider!r} has no default; set the target's base_url)")
        kind = definition.auth.kind
        region = self.entry.region or default_region(kind)
        self._location = {"model": self.model, "region": region}
        try:
            # a target's own base_url is the URL as it is; the definition's may use model and region
            found = str(base_url) if self.entry.base_url else definition.render_location(str(base_url), self._location, "base_url")
        except DefinitionError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        self.base_url = found.rstrip("/")
        run.redactor.add_url(self.base_url)  # user:password@ or ?api_key= may come from the definition's ${VAR}

        api_key = None
        if kind != "header":
            self.auth = make_auth(definition, region, run.redactor.add, where)
            self.key_hint = AUTH_HINTS[kind]
            try:
                await self.auth.prepare()
            except TargetError as exc:
                raise ConfigError(str(exc)) from None
        else:
            api_key = self.entry.api_key or definition.key_from_env()
            self.key_hint = key_hint(definition.auth_envs)
            if definition.auth_required and not api_key:
                raise ConfigError(f"{where}: provider {self.provider!r} needs an API key: set {self.key_hint}")
        self.api_key = api_key
        if api_key:
            run.redactor.add(api_key)

        headers = dict(definition.headers)
        configured = self.entry.headers or {}
        headers.update(configured)
        # a header set in the config is a secret unless it is on the harmless list (DESIGN "Secrets in headers")
        secret_headers = {k.lower() for k in configured if not harmless_header(k)}
        for k, v in configured.items():
            run.redactor.add_header(k, v)
        if definition.auth_header and api_key:
            try:
                headers[definition.auth_header] = definition.render_auth(api_key)
            except DefinitionError as exc:
                raise ConfigError(str(exc)) from None
            secret_headers.add(definition.auth_header.lower())
        self.headers = headers
        for path, message, warning in target_problems(self.entry, definition):
            if not warning:
                raise ConfigError(Issue(where, None, ".".join(str(p) for p in path), message))
        self.streaming = stream_requested(self.entry, definition)
        try:
            url_path = definition.render_path(("request", "path"), {**self._location, "stream": self.streaming})
        except DefinitionError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        self.url = self.base_url + "/" + url_path.lstrip("/")
        params = dict(self.entry.params or {})
        if isinstance(params.get("stream"), bool):
            del params["stream"]  # the switch, not a param sent as it is
        if self.streaming:
            assert definition.stream is not None
            params = {**definition.stream.params, **params}
        self._params = params
        self._key_base = _key_base(
            self.provider,
            self.model,
            self.base_url,
            self.url,
            definition,
            {k: v for k, v in headers.items() if k != definition.auth_header},
            self.streaming,
        )
        self.public_headers = {
            k: v
            for k, v in headers.items()
            if k.lower() not in secret_headers and k.lower() not in SECRET_KEYS and not looks_secret_name(k)
        }
        self.tools = [_normalize_tool(t, i, where) for i, t in enumerate(self.entry.tools or ())]

        override = self.entry.pricing
        if override is not None:
            self.price = Price.of(override)
        else:
            self.price = definition.price(self.model)

        s = self.settings
        limiters = getattr(run, "limiters", None)
        if limiters is not None and (definition.rate_limits is not None or s.adaptive is not None):
            # the credential as the provider counts it: the key, the secret headers, the auth kind (only a digest is kept)
            credential = "\n".join(
                [kind, api_key or "", *sorted(f"{k.lower()}:{v}" for k, v in headers.items() if k.lower() in secret_headers)]
            )
            names = definition.rate_limits or RateLimitHeaders(
                retry_after=(("retry-after-ms", 0.001), (definition.retry_after_header.lower(), 1.0))
            )
            self.gate = limiters.get(self.base_url, credential, names)
            if s.adaptive is not None:
                self.gate.adapt(s.adaptive)
        self.limiter = RateLimiter(s.rate_limit_rpm) if s.rate_limit_rpm else None
        self.pacer = self._wait_turn if self.limiter is not None else None
        self.client = HttpClient(
            concurrency=s.concurrency,
            retries=s.retries,
            backoff=Backoff(base_s=s.backoff_s),
            timeout_s=s.timeout_s,
            max_response_bytes=s.max_response_bytes,
        )

    async def _wait_turn(self) -> None:
        """Wait for the rate limit's next slot, before the cell's clock starts; its first request uses that slot."""
        assert self.limiter is not None
        await self.limiter.acquire()
        # a cell that fails before sending (a template error) leaves its slot unused: never bank more than a round of them
        self._prepaid = min(self._prepaid + 1, self.settings.concurrency)

    async def aclose(self) -> None:
        if self.batcher is not None:
            await self.batcher.aclose()
            self.batcher = None
        if self.client is not None:
            await self.client.aclose()
            self.client = None

    # -- batch mode ------------------------------------------------------------------

    def batch_queue(self, name: str, ledger: BatchLedger, batch_round: BatchRound) -> BatchQueue | None:
        """Put this started target in batch mode, when its settings ask for it and its definition has a batch API.

        ``name`` tells its batches apart in ``batches.json``. None: normal calls (no ``batch:``, or ``--batch`` and
        a definition without a batch API; ``batch: true`` on such a target is refused before the run).
        """
        d, batch = self.definition, self.settings.batch
        if batch is None or d is None or d.batch is None or self.streaming:
            return None
        scope: JSONObject = {"model": self.model, "path": urllib.parse.urlsplit(self.url).path}
        client = BatchClient(
            d,
            self.base_url,
            self.headers,
            self.auth,
            self._http_error,
            retries=self.settings.retries,
            backoff_s=self.settings.backoff_s,
            scope=scope,
            max_answer_bytes=self.settings.max_response_bytes,
        )
        self.batcher = BatchQueue(name, client, batch, d.batch, ledger, batch_round)
        self._batch_price = self.price.scaled(d.batch.discount) if self.price is not None else None
        return self.batcher

    async def prefetch(self, cell: Cell, run: RunContext) -> None:
        """Batch mode: send the cell's request in a batch and wait for its answer, before the cell's clock starts.

        The answer is kept for the :meth:`invoke` that follows. A request that cannot be rendered is left to invoke()
        (it reports it); a conversation's turns are normal calls.
        """
        batcher, d = self.batcher, self.definition
        if batcher is None or d is None or d.batch is None:
            return
        try:
            request = self._request_for(cell, run, None)
        except TargetError:
            return
        digest = hashlib.sha256()
        digest.update(
            json.dumps([request.url, request.body, cell.repeat], sort_keys=True, ensure_ascii=False, default=str).encode(
                "utf-8", "surrogatepass"
            )
        )
        custom_id = "evalx-" + digest.hexdigest()[:40]
        scope = {**batcher.client.scope, "custom_id": custom_id, "body": request.body, "method": request.method}
        try:
            line = d.render_json(d.batch.request, scope, "batch", "request")
        except DefinitionError:
            self._rendered[id(cell)] = (cell, None, request)
            return  # sent as a normal call
        result = await batcher.call(custom_id, line)
        self._batched[id(cell)] = (cell, request, result)

    async def _batched_answer(self, request: ProviderRequest, result: BatchResult) -> Trajectory:
        """A cell's answer from its batch: read as a normal call's, at the batch price; else its error, or a normal call."""
        if result.outcome == "too_large":  # past max_response_bytes, as a normal call's answer would be: not sent again
            raise TargetError(result.error or "the batch answer is larger than max_response_bytes")
        if result.outcome == "succeeded":
            text = json.dumps(result.response, ensure_ascii=False)
            limit = self.settings.max_response_bytes
            if len(text) > limit and len(text.encode("utf-8", "surrogatepass")) > limit:
                raise too_large(request.url, limit, "batch answer")
            resp = HttpResponse(200, {}, text, result.response, request.url)
            if type(result.response) is dict and _carries_error(result.response):
                raise self._http_error(resp)
            try:
                traj = self._trajectory(result.response, resp, self._batch_price)
            except DefinitionError as exc:
                raise TargetProtocolError(f"reading the batch answer of provider {self.provider!r}: {exc}") from None
            traj.request = self._public(request)
            traj.raw = {**(traj.raw or {}), "batch_id": result.batch_id}
            return traj
        d = self.definition
        assert d is not None
        message = self._safe(result.error or "")
        if result.outcome not in FALL_BACK and d.classify(result.status or 0, message) == "fatal":
            status = f" (HTTP {result.status})" if result.status else ""
            raise TargetError(f"the batch request errored{status}: {message or '(no message)'}")
        # expired, canceled, lost, or an error that a new try may fix: a normal call, at the normal price
        resp = await self._send(request)
        traj = self._trajectory(resp.json_body(), resp)
        traj.request = self._public(request)
        traj.raw = {**(traj.raw or {}), "batch_fallback": result.outcome + (f": {message}" if message else "")}
        return traj

    # -- requests ----------------------------------------------------------------

    def render_request(self, cell: Cell, run: RunContext, history: list[Message] | None = None) -> ProviderRequest:
        """The request for one cell.

        ``history``: a conversation's messages so far (:meth:`converse`), sent instead of the prompt.
        """
        assert self.definition is not None, "start() first"
        ctx = _LazyContext(cell, run, self)
        try:
            system, messages = self._messages(cell, ctx) if history is None else self._conversation(cell, ctx, history)
            params: object = self._params
            if params:
                params = render_value(params, ctx.get(), field="params")
        except TemplateRenderError as exc:
            raise TargetError(f"target {self.id!r}: {exc}") from None
        if not isinstance(params, dict):
            raise TargetError(f"target {self.id!r}: params must be a mapping")
        if self.json_mode:
            params = {**self.definition.json_mode_params, **params}
        scope: RequestScope = {
            "model": self.model,
            "messages": messages,
            "system": system,
            "params": params,
            "tools": self.tools,
            "json_mode": self.json_mode,
        }
        try:
            body, data = self.definition.render_request_body(scope)
        except DefinitionError as exc:
            raise TargetError(str(exc)) from None
        return ProviderRequest(self.definition.method, self.url, body, data)

    def _messages(self, cell: Cell, ctx: _LazyContext) -> tuple[str | None, list[JSONObject]]:
        """``(system, messages)``: the conversation without system turns, and the system text."""
        system_parts: list[str] = []
        first = self._system(cell, ctx)
        if first:
            system_parts.append(first)
        value = cell.case.input
        if is_parts(value):  # images and documents: the definition's parts.message makes the user message
            if self.entry.messages:
                raise TargetError(f"target {self.id!r}: a messages: template cannot carry the case's images and documents; use prompt:")
            try:
                parts = template_parts(value)
            except LookupError as exc:  # a process that did not load the dataset (the attachments are kept where it was read)
                raise TargetError(f"target {self.id!r}: {exc}") from None
            if self.entry.prompt:  # the prompt is the text; the attachments follow it
                prompt = render(self.entry.prompt, ctx.get(), field="prompt")
                parts = [{"type": "text", "text": prompt}, *(p for p in parts if p["type"] != "text")]
            text = "\n\n".join(p.get("text", "") for p in parts if p["type"] == "text")
            assert self.definition is not None
            refused = self.definition.refuses_parts({"image_url" if p.get("url") else p["type"] for p in parts if p["type"] != "text"})
            if refused is not None:  # validate refuses the cases of the targets under test; this is for a judge
                raise TargetError(f"target {self.id!r}: {refused}")
            try:
                message = self.definition.render_parts_message(parts, text)
            except DefinitionError as exc:
                raise TargetError(str(exc)) from None
            return ("\n\n".join(system_parts) if system_parts else None), [message]
        if self.entry.messages:
            raw_messages = render_value(list(self.entry.messages), ctx.get(), field="messages")
        elif self.entry.prompt:
            raw_messages = [{"role": "user", "content": render(self.entry.prompt, ctx.get(), field="prompt")}]
        else:
            if isinstance(value, dict) and isinstance(value.get("messages"), list):
                raw_messages = value["messages"]
            elif isinstance(value, str):
                raw_messages = [{"role": "user", "content": value}]
            else:
                raw_messages = [{"role": "user", "content": json.dumps(value, ensure_ascii=False)}]
        messages: list[JSONObject] = []
        for i, m in enumerate(raw_messages):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise TargetError(f"target {self.id!r}: messages[{i}] must be a mapping with role and content")
            if m["role"] == "system":
                system_parts.append(m["content"] if isinstance(m["content"], str) else json.dumps(m["content"]))
            else:
                messages.append(dict(m))
        return ("\n\n".join(system_parts) if system_parts else None), messages

    def _system(self, cell: Cell, ctx: _LazyContext) -> str | None:
        """The system prompt: the case's own (the more specific one), else the target's, rendered as for every target kind."""
        if not cell.case.system and not self.entry.system:
            return None  # no context to build
        return system_prompt(ctx.get(), self.entry.system)

    def _conversation(self, cell: Cell, ctx: _LazyContext, history: list[Message]) -> tuple[str | None, list[JSONObject]]:
        """``(system, messages)`` for a turn of a conversation: the system prompt as for a cell, then the history.

        The ``prompt:``/``messages:`` templates are not used: the turns are the user messages. An assistant
        reply's tool calls and the mocked tool results go as OpenAI ``tool_calls`` / ``tool`` messages to a
        definition that declares ``capabilities: {tool_history: true}`` (openai and what extends it, ollama,
        azure-openai); other definitions get the replies' text only.
        """
        system = self._system(cell, ctx)
        openai = self.definition is not None and self.definition.sends_tool_history
        messages: list[JSONObject] = []
        ids: list[str] = []
        for n, m in enumerate(history):
            role = m["role"]
            if role == "tool":
                if openai and m.get("tool_call_index", 0) < len(ids):
                    content = m["content"] if isinstance(m["content"], str) else json.dumps(m["content"], ensure_ascii=False)
                    messages.append({"role": "tool", "tool_call_id": ids[m.get("tool_call_index", 0)], "content": content})
                continue
            tool_calls = m.get("tool_calls")
            if role == "assistant" and tool_calls and openai:
                ids = [f"call_{n}_{i}" for i in range(len(tool_calls))]
                calls: list[JSON] = [
                    {"id": ids[i], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c.get("args") or {})}}
                    for i, c in enumerate(tool_calls)
                ]
                messages.append({"role": "assistant", "content": m["content"] or None, "tool_calls": calls})
                continue
            messages.append({"role": role, "content": m["content"]})
        return system, messages

    def cache_key(self, cell: Cell, run: RunContext, history: list[Message] | None = None) -> str | None:
        """sha256 of what is the same for every cell (provider, model, URLs, definition, headers: see start()),
        the rendered body (with ``history`` as its messages, for a conversation's turn) and the repeat index — never the API key."""
        from evalx.targets.transport.cache import make_key

        try:
            request = self.render_request(cell, run, history)
        except TargetError:
            return None  # invoke() reports it
        rendered = self._rendered
        if len(rendered) >= _RENDERED_KEPT:
            del rendered[next(iter(rendered))]  # the oldest: its cell was a cache hit
        rendered[id(cell)] = (cell, history, request)
        return make_key("provider", self._key_base, request.method, request.body, cell.repeat)

    def _request_for(self, cell: Cell, run: RunContext, history: list[Message] | None) -> ProviderRequest:
        """The cell's request: the one :meth:`cache_key` rendered for it (2.5 % of an instant run's CPU), else rendered now."""
        kept = self._rendered.pop(id(cell), None)
        if kept is not None and kept[0] is cell and kept[1] is history:
            return kept[2]
        return self.render_request(cell, run, history)

    def restore_cached(self, traj: Trajectory) -> None:
        """Reprice a cached answer with today's pricing (a price added later applies to cached cells)."""
        if traj.cost_note is not None:  # the answer had no usage: still nothing to price
            traj.cost_usd = None
            if self.price is None:
                traj.cost_note = None
        else:  # a batch target's cached answers are priced as its batch answers
            traj.cost_usd = self._cost(traj.usage, self._batch_price if self.batcher is not None else None)

    def _take_turn(self) -> Awaitable[None] | None:
        """The rate limit's slot for one request: the one pacer() took before the cell started (None: had at once, as
        without a rate limit), else the wait for the next."""
        limiter = self.limiter
        if limiter is None:
            return None
        if self._prepaid:
            self._prepaid -= 1
            return None
        return limiter.acquire()  # a retry, or a caller that did not wait its turn first

    async def _signed(self, request: ProviderRequest, headers: dict[str, str], auth: RequestAuth) -> tuple[bytes | None, dict[str, str]]:
        """The bytes and headers to send with the ``auth:`` kind's credentials over the exact bytes, signed again each time
        (a target without ``auth:`` sends ``request.data`` and its headers as they are)."""
        data, headers = HttpClient.encode(request.body, headers, request.data)
        return data, await auth.sign(request.method, request.url, headers, data)

    async def _send_again_after_401(self, sent: Mapping[str, str], refreshed: _Refreshed, url: str) -> bool:
        """After an HTTP 401: whether to send the request again, with the ``auth:`` kind's credentials refreshed
        (a kept token the server no longer takes). Once a request: a 401 after that is its error, naming the kind."""
        auth = self.auth
        if auth is None:
            return False
        kind = self.definition.auth.kind if self.definition is not None else "?"
        if refreshed.done:
            raise TargetError(
                f"HTTP 401 unauthorized from {shown_url(url)}: auth kind {kind}: the server refused a refreshed token too"
                f" (check {self.key_hint})"
            )
        if not await auth.refresh(sent):  # sigv4: nothing kept to refresh
            return False
        refreshed.done = True
        if (turn := self._take_turn()) is not None:
            await turn
        return True

    def _send(self, request: ProviderRequest) -> Coroutine[Any, Any, HttpResponse]:
        """One request through the shared client: rate limit, retries with backoff, the definition's error mapping.

        The coroutine of :meth:`HttpClient.retrying`, to await (no coroutine of its own around it)."""
        client, gate = self.client, self.gate
        assert client is not None, "start() first"
        refreshed = _Refreshed()

        async def attempt() -> HttpResponse:
            started = time.monotonic()  # the turns taken and the 429s waited out below share one rate_limit.max_wait_s
            while True:  # sent again after a 429 the endpoint's limiter waits out (no retry used)
                if (turn := self._take_turn()) is not None:
                    await turn
                while True:  # sent again once after a 401, with refreshed credentials
                    slot = (
                        None
                        if gate is None
                        else gate.take_now(self.id, self.settings.adaptive is not None) or await self._turn(gate, started)
                    )
                    try:
                        data, headers = request.data, self.headers
                        if self.auth is not None:
                            data, headers = await self._signed(request, headers, self.auth)
                        resp = await client.request_json(
                            request.method,
                            request.url,
                            json=request.body,
                            encoded=data,
                            headers=headers,
                            raise_for_status=False,
                        )
                    except BaseException:
                        if gate is not None and slot is not None:
                            gate.finish(slot, counted=False)
                        raise
                    limited = False
                    try:  # reading the answer may raise (a definition's regex past its budget): the slot is given back all the same
                        limited = resp.status >= 400 and self._limited(resp.status, resp.text)
                    finally:
                        if gate is not None and slot is not None:
                            gate.finish(slot, resp.headers, limited=limited)
                    if resp.status != 401 or not await self._send_again_after_401(headers, refreshed, resp.url or request.url):
                        break
                if resp.status >= 400:
                    error = self._http_error(resp, limited)
                    if not isinstance(error, ProviderRateLimited):
                        raise error
                    self._waited_out(error, started)  # past rate_limit.max_wait_s: the cell's error
                    continue
                body = resp.json
                if type(body) is dict and _carries_error(body):  # a 200 that is an error: the cell's error, never an empty answer
                    raise self._http_error(resp)
                return resp

        # retries stop before the cell's (or judge call's) deadline; a 429 waited out under the endpoint's limiter is none
        return client.retrying(attempt)

    async def _turn(self, gate: EndpointLimiter, started: float) -> Slot:
        """The endpoint limiter's turn for a request, within what is left of the call's ``rate_limit.max_wait_s``
        (counted from ``started``, when the call began waiting for its provider's rate limit)."""
        left = self.settings.rate_limit_max_wait_s - (time.monotonic() - started)
        try:
            return await gate.acquire(self.id, adaptive=self.settings.adaptive is not None, patience_s=max(0.0, left))
        except TargetError as exc:
            limit = self.settings.rate_limit_max_wait_s
            raise TargetError(f"gave up waiting for the rate limit of {shown_url(self.base_url)}: {exc} ({limit:g}s)") from None

    def _limited(self, status: int, body: str) -> bool:
        """Whether an error answer says the provider is at its limit: 429 (or ``rate_limited``), 529 or ``overloaded``."""
        d = self.definition
        assert d is not None
        if status in (429, 529) and not d.fatal.matches(status, body):
            return True
        return d.classify(status, body) == "rate_limited" or d.overloaded.matches(status, body)

    def _waited_out(self, exc: ProviderRateLimited, started: float) -> None:
        """After a 429 under the endpoint's limiter (``exc``): the request is sent again (the limiter waits it out; no retry
        is used), unless the call has waited ``rate_limit.max_wait_s`` since ``started`` in all: then the cell's error.

        Every target with a limiter (its definition has ``rate_limits:``, or ``concurrency: auto``) waits out a
        429, whatever its concurrency: the limiter pauses and spaces every request to the endpoint, so the 429 says
        "later", never "failed".
        """
        limit = self.settings.rate_limit_max_wait_s
        waited = time.monotonic() - started
        if waited >= limit:
            raise TargetError(
                f"{exc} (gave up after waiting {waited:.0f}s for the rate limit: rate_limit.max_wait_s is {limit:g})"
            ) from None

    async def converse(self, cell: Cell, run: RunContext, history: list[Message], turn: int) -> Trajectory:
        """One turn of a conversation: the growing history sent as the request's messages (streamed with ``stream: true``)."""
        return await self.invoke(cell, run, history)

    async def invoke(self, cell: Cell, run: RunContext, history: list[Message] | None = None) -> Trajectory:
        assert self.definition is not None and self.client is not None, "start() first"
        if self._batched and history is None:
            kept = self._batched.pop(id(cell), None)
            if kept is not None and kept[0] is cell:
                return await self._batched_answer(kept[1], kept[2])
        if self.streaming:
            return await self._invoke_streamed(cell, run, history)
        request = self._request_for(cell, run, history)
        resp = await self._send(request)
        data = resp.json_body()
        public = self._public(request)
        try:
            traj = self._trajectory(data, resp)
        except DefinitionError as exc:
            raise TargetProtocolError(f"reading the response of provider {self.provider!r}: {exc}") from None
        traj.request = public
        if self.gate is not None:
            self.gate.spent(traj.usage.input_tokens, traj.usage.output_tokens)
        return traj

    # -- streamed answers (stream: true) --------------------------------------------

    def _public(self, request: ProviderRequest) -> SentRequest:
        return {"method": request.method, "url": request.url, "headers": dict(self.public_headers), "body": elided(request.body)}

    async def _invoke_streamed(self, cell: Cell, run: RunContext, history: list[Message] | None = None) -> Trajectory:
        """The cell's answer streamed (the definition's ``stream:`` section), with ``ttft_ms`` from the cell's start."""
        client = self.client
        assert client is not None
        t0 = time.perf_counter()
        request = self._request_for(cell, run, history)
        public = self._public(request)
        refreshed = _Refreshed()
        try:
            traj = await client.retrying(self._stream_attempt, request, t0, refreshed)
        except DefinitionError as exc:
            raise TargetProtocolError(f"reading the stream of provider {self.provider!r}: {exc}") from None
        except TargetError as exc:
            exc.args = (self._safe(str(exc)),)  # the line is reported as it is: a server's echo of a secret stays out
            raise
        traj.request = public
        if self.gate is not None:
            self.gate.spent(traj.usage.input_tokens, traj.usage.output_tokens)
        return traj

    async def _stream_attempt(self, request: ProviderRequest, t0: float, refreshed: _Refreshed) -> Trajectory:
        """One streamed request (sent again once after a 401 with refreshed credentials), holding the endpoint
        limiter's slot (if any) until the stream ends."""
        client, d, gate = self.client, self.definition, self.gate
        assert client is not None and d is not None
        assert d.stream is not None
        started = time.monotonic()  # the turns taken and the 429s waited out below share one rate_limit.max_wait_s
        while True:  # sent again after a 429 the endpoint's limiter waits out (no retry used)
            try:
                if (turn := self._take_turn()) is not None:
                    await turn
                while True:
                    framing = framing_for(d.stream, shown_url(self.url))  # one reader a stream: it holds a partial event
                    slot = await self._turn(gate, started) if gate is not None else None
                    seen: list[tuple[int, Mapping[str, str], bool]] = []  # the answer's status, headers, and whether it said "at the limit"
                    try:
                        accept = {"Accept": framing.accept} if framing.accept else {}
                        data, headers = request.data, {**accept, **self.headers}
                        if self.auth is not None:
                            data, headers = await self._signed(request, headers, self.auth)
                        async with client.stream(
                            request.method,
                            request.url,
                            json=request.body,
                            encoded=data,
                            headers=headers,
                            idle_timeout_s=self.settings.idle_timeout_s,
                        ) as resp:
                            seen.append((resp.status, resp.headers, False))
                            if resp.status == 401 and await self._send_again_after_401(headers, refreshed, resp.url or request.url):
                                continue
                            return await self._read_stream(resp, d, t0, framing, seen)
                    finally:
                        if gate is not None and slot is not None:
                            if seen:
                                gate.finish(slot, seen[0][1], limited=seen[0][2])
                            else:
                                gate.finish(slot, counted=False)
            except ProviderRateLimited as exc:
                if gate is None:
                    raise
                self._waited_out(exc, started)

    async def _read_stream(
        self,
        resp: StreamResponse,
        d: ProviderDefinition,
        t0: float,
        framing: SSEFraming | AwsEventStreamFraming,
        seen: list[tuple[int, Mapping[str, str], bool]],
    ) -> Trajectory:
        """A streamed response's answer (or, for an error status or a whole JSON body, as a plain answer)."""
        shown = shown_url(self.url)
        if resp.status >= 400 or resp.content_type in ("application/json", "application/problem+json"):
            # an error status, or a server that answered the request whole: read as a non-streamed answer
            whole = await _whole(resp)
            if whole.status >= 400:
                limited = self._limited(whole.status, whole.text)
                seen[0] = (whole.status, resp.headers, limited)
                raise self._http_error(whole, limited)
            body = whole.json_body()
            if type(body) is dict and carries_error(body):
                raise self._http_error(whole)
            return self._trajectory(body, whole)
        assembler = StreamAssembler(d, t0, shown, self._safe)
        try:
            if await framing.read(resp, assembler):
                return self._streamed_trajectory(assembler)
        except TargetError as exc:
            # a stream that answered in part is not sent again (its tokens are billed)
            if assembler.n_events and not isinstance(exc, StreamErrorEvent):
                if exc.retryable and not isinstance(exc, TargetTimeout):  # the connection broke
                    raise assembler.closed_early(framing.pending, str(exc)) from None
                exc.retryable = False
            raise
        raise assembler.closed_early(framing.pending)

    def _streamed_trajectory(self, assembler: StreamAssembler) -> Trajectory:
        calls, ids = assembler.tool_calls()
        text = "".join(assembler.text)
        stop = assembler.stop_reason
        if not text and not calls and stop is None:
            n = assembler.n_events
            raise TargetProtocolError(
                f"stream from {assembler.shown} ended without an answer: no text, no tool call and no stop reason in {n} event{'s' if n != 1 else ''}"
            )
        usage = Usage(
            input_tokens=assembler.input_tokens or 0,
            output_tokens=assembler.output_tokens or 0,
            cache_hit_tokens=assembler.cached_tokens or 0,
        )
        raw: RawAnswer = {"stream_events": assembler.n_events}
        if stop is not None:
            raw["stop_reason"] = stop
        if any(i is not None for i in ids):
            raw["tool_call_ids"] = ids
        cost, note = self._cost(usage), None
        if not assembler.saw_usage:
            raw["usage"] = None
            raw["usage_note"] = NO_STREAM_USAGE
            if cost is not None:
                cost, note = None, NO_USAGE
        elif assembler.output_tokens is None and cost is not None:
            cost, note = None, NO_USAGE  # an input count alone cannot price an answer
        return _answer(text, calls, usage, cost, note, raw, stop, ttft_ms=assembler.ttft_ms)

    # -- embeddings (semantic_similar's `embedding:` target) ---------------------

    @property
    def can_embed(self) -> bool:
        """Whether the provider definition has an ``embeddings:`` request."""
        return self.definition is not None and self.definition.embeddings is not None

    def _embeddings_request(self, text: str) -> ProviderRequest:
        d = self.definition
        assert d is not None, "start() first"
        if d.embeddings is None:
            raise TargetError(f"provider {self.provider!r} has no embeddings request ({d.file} has no embeddings: section)")
        try:
            body = d.render_embeddings_body({"model": self.model, "input": text})
        except DefinitionError as exc:
            raise TargetError(str(exc)) from None
        try:
            path = d.render_path(("embeddings", "path"), {**self._location, "stream": False})
        except DefinitionError as exc:
            raise TargetError(str(exc)) from None
        return ProviderRequest(d.embeddings.method, self.base_url + "/" + path.lstrip("/"), body)

    def embedding_cache_key(self, text: str) -> str | None:
        """sha256 of provider, model, base URL and the rendered embeddings request — never the key."""
        from evalx.targets.transport.cache import make_key

        try:
            request = self._embeddings_request(text)
        except TargetError:
            return None  # embed() reports it
        return make_key("embedding", self.provider, self.model, self.base_url, request.method, request.url, request.body)

    def embedding_cost(self, input_tokens: int) -> float | None:
        """USD for embedding ``input_tokens`` (input price only); None when no price is known."""
        return None if self.price is None else self.price.cost(input_tokens, 0)

    async def embed(self, text: str, run: RunContext) -> tuple[list[float], EmbeddingUsage]:
        """The embedding of ``text`` and its usage ``{input_tokens, cost_usd}``, through the same client and retries as invoke()."""
        assert self.definition is not None and self.client is not None, "start() first"
        d = self.definition
        request = self._embeddings_request(text)
        resp = await self._send(request)
        scope: ExpressionScope = {"response": resp.json_body(), "status": resp.status, "headers": dict(resp.headers)}
        try:
            vector = d.evaluate(("embeddings", "vector"), scope)
            if (
                not isinstance(vector, list)
                or not vector
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vector)
            ):
                raise DefinitionError(f"{d.where('embeddings', 'vector')}: expected a non-empty list of numbers, got {_shape(vector)}")
            tokens = self._embedding_tokens(scope)
        except DefinitionError as exc:
            raise TargetProtocolError(f"reading the embeddings response of provider {self.provider!r}: {exc}") from None
        return [float(x) for x in vector], {"input_tokens": tokens, "cost_usd": self.embedding_cost(tokens)}

    def _embedding_tokens(self, scope: ExpressionScope) -> int:
        d = self.definition
        assert d is not None and d.embeddings is not None
        if not d.embeddings.has_input_tokens:
            return 0
        value = d.evaluate(("embeddings", "usage", "input_tokens"), scope)
        if value is None:
            return 0
        try:
            if isinstance(value, (int, float, str)):
                return max(0, int(value))
        except ValueError:
            pass
        raise DefinitionError(f"{d.where('embeddings', 'usage', 'input_tokens')}: expected a number of tokens, got {value!r}") from None

    # -- responses ---------------------------------------------------------------

    def _trajectory(self, data: JSON, resp: HttpResponse, price: Price | None = None) -> Trajectory:
        d = self.definition
        assert d is not None
        scope: ExpressionScope = {"response": data, "status": resp.status}
        if d.reads_headers:  # a dict of the headers per cell only for a definition that reads them
            scope["headers"] = dict(resp.headers)
        read = self._readers if self._readers is not None and self._readers_of is d else self._make_readers(d)
        text = read.text(scope)
        if text is None:
            text = ""
        elif not isinstance(text, str):
            text = json.dumps(text, ensure_ascii=False) if isinstance(text, (dict, list)) else str(text)
        stop = read.stop_reason(scope)

        calls: list[ToolCall] = []
        ids: list[object] = []
        if read.tool_call_items is not None:
            items = read.tool_call_items(scope)
            if items is None:
                items = []
            if not isinstance(items, list):
                raise DefinitionError(f"{d.where('response', 'tool_calls', 'items')}: expected a list, got {type(items).__name__}")
            spec = d.response.get("tool_calls") or {}
            for item in items:
                item_scope: ExpressionScope = {**scope, "item": item}
                name = d.evaluate(("response", "tool_calls", "name"), item_scope)
                if not isinstance(name, str) or not name:
                    raise DefinitionError(f"{d.where('response', 'tool_calls', 'name')}: a tool call has no name")
                args = d.evaluate(("response", "tool_calls", "args"), item_scope) if "args" in spec else None
                calls.append(ToolCall(name=name, args=args))
                if "id" in spec:
                    ids.append(d.evaluate(("response", "tool_calls", "id"), item_scope))

        if not text and not calls and _no_answer(read, scope, stop):
            raise TargetProtocolError(
                f"{shown_url(resp.url or self.url)} answered HTTP {resp.status} without an answer"
                f" ({d.where('response', 'text')} found nothing): {self._safe(snippet(resp.text)) or '(empty)'}"
            )

        input_tokens = self._tokens(scope, "input_tokens", read.input_tokens)
        output_tokens = self._tokens(scope, "output_tokens", read.output_tokens)
        usage = Usage(
            input_tokens=input_tokens or 0,
            output_tokens=output_tokens or 0,
            cache_hit_tokens=self._tokens(scope, "cached_tokens", read.cached_tokens) or 0,
        )
        raw: RawAnswer = {}
        if stop is not None:
            raw["stop_reason"] = stop
        if ids and any(i is not None for i in ids):
            raw["tool_call_ids"] = ids
        if len(resp.text) <= _MAX_RAW_CHARS:
            raw["response"] = data
        cost, note = self._cost(usage, price), None
        if cost is not None:
            # what a chat answer always has is its output count (Anthropic's input expression adds up to 0 without usage)
            counted = output_tokens if read.output_tokens is not None else input_tokens if read.input_tokens is not None else None
            if counted is None:
                cost, note = None, NO_USAGE if read.output_tokens is not None or read.input_tokens is not None else NO_USAGE_MAPPING
        return _answer(text, calls, usage, cost, note, raw or None, stop)

    def _safe(self, text: str) -> str:
        return self._redact(text) if self._redact is not None else text

    def _make_readers(self, d: ProviderDefinition) -> _Readers:
        """The response expressions read for every answer, looked up once (None: a usage count the definition lacks)."""
        usage = d.response.get("usage") or UsageSection()

        def count(key: str) -> Reader | None:
            return d.reader(("response", "usage", key)) if key in usage else None

        readers = _Readers(
            d.reader(("response", "text")),
            d.reader(("response", "stop_reason")),
            count("input_tokens"),
            count("output_tokens"),
            count("cached_tokens"),
            _text_path(d.response.get("text")),
            "stop_reason" in d.response,
            d.reader(("response", "tool_calls", "items")) if d.response.get("tool_calls") else None,
        )
        self._readers, self._readers_of = readers, d
        return readers

    def _tokens(self, scope: ExpressionScope, key: str, read: Reader | None) -> int | None:
        """A usage count from the response; None when the definition or the response has none.

        A count that is negative, not finite or not a whole number is a DefinitionError naming the
        expression (the cell's protocol error): a faked figure must not pass the cost guard or ``max_tokens``.
        """
        if read is None:
            return None
        value = read(scope)
        if value is None:
            return None
        if type(value) is int and value >= 0:
            return value
        d = self.definition
        assert d is not None
        try:
            return token_count(value)
        except ValueError as exc:
            raise DefinitionError(f"{d.where('response', 'usage', key)}: {exc}") from None

    def _cost(self, usage: Usage, price: Price | None = None) -> float | None:
        price = price or self.price
        if price is None:
            return None
        return price.cost(usage.input_tokens, usage.output_tokens, usage.cache_hit_tokens)

    def _http_error(self, resp: HttpResponse, limited: bool = False) -> TargetError:
        """The error of an error answer; ``limited`` (a 429, 529 or overloaded) under the endpoint's limiter is waited out."""
        d = self.definition
        assert d is not None
        status, url = resp.status, shown_url(resp.url or self.url)  # no credentials or query string in messages
        if status in (401, 403):
            return classify_status(status, None, url=url, key_hint=self.key_hint)
        kind = d.classify(status, resp.text)
        message = None
        if d.error_message and resp.json is not None:
            try:
                value = d.evaluate(("errors", "message"), {"response": resp.json, "status": status})
            except DefinitionError:
                value = None
            if value is not None:
                message = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        message = _one_line(message) if message else snippet(resp.text)
        if self._redact is not None:
            message = self._redact(message)
        detail = f": {message}" if message else ""
        if status < 400:  # a 2xx answer that is an error (see _carries_error)
            detail = f" carries an error{detail or ' (no message)'}"
        if kind == "fatal":
            hint = " (check base_url and model)" if status == 404 else ""
            return TargetError(f"HTTP {status} from {url}{detail}{hint}")
        retry_after = _retry_after(resp.headers, d.retry_after_header)
        if limited and self.gate is not None:
            return ProviderRateLimited(f"HTTP {status} rate limited by {url}{detail}", retryable=True, retry_after=retry_after)
        if kind == "rate_limited":
            return TargetError(f"HTTP {status} rate limited by {url}{detail}", retryable=True, retry_after=retry_after)
        return TargetError(f"HTTP {status} from {url}{detail}", retryable=True, retry_after=retry_after)


def key_hint(names: tuple[str, ...]) -> str:
    """Where a key comes from, for messages: ``the target's api_key, GEMINI_API_KEY or GOOGLE_API_KEY``."""
    where = ["the target's api_key", *names]
    return where[0] if len(where) == 1 else ", ".join(where[:-1]) + " or " + where[-1]


class _Refreshed:
    """Whether a request's credentials were refreshed after a 401 already (once a request, across its retries)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False


class _Readers(NamedTuple):
    """The response expressions :meth:`ProviderTarget._trajectory` reads for every answer."""

    text: Reader
    stop_reason: Reader
    input_tokens: Reader | None
    output_tokens: Reader | None
    cached_tokens: Reader | None
    #: the text expression as ``(name, steps)`` when it is a plain path (``response.choices[0].message.content or ""``)
    text_path: tuple[str, tuple[str | int, ...]] | None
    #: whether the definition reads a stop reason
    has_stop_reason: bool
    #: the tool calls' ``items`` expression, when the definition reads tool calls
    tool_call_items: Reader | None


def _text_path(source: str | None) -> tuple[str, tuple[str | int, ...]] | None:
    """``(name, steps)`` of a text expression that is a plain path (with an optional ``or`` literal), else None."""
    return plain_path(source) if isinstance(source, str) else None


def _no_answer(read: _Readers, scope: ExpressionScope, stop: object) -> bool:
    """For an empty answer (no text, no tool call): whether the response lacks the answer itself, not just its words.

    A plain-path text expression: a step of the path is missing (``choices: []``, no ``message``);
    a ``null`` content is an empty answer. Any other expression: the definition reads a stop
    reason and the response has none. Only asked for empty answers: never on the hot path.
    """
    if read.text_path is not None:
        name, steps = read.text_path
        node: object = scope.get(name)
        for step in steps:
            if isinstance(step, str):
                if type(node) is not dict or step not in node:
                    return True
                node = node[step]
            else:
                if type(node) is not list or step >= len(node):
                    return True
                node = node[step]
        return False
    return read.has_stop_reason and stop is None


#: whether a 2xx JSON body is an error (one rule for whole answers and stream events)
_carries_error = carries_error


def _key_base(
    provider: str, model: str, base_url: str, url: str, definition: ProviderDefinition, headers: dict[str, str], streaming: bool = False
) -> str:
    """A digest of what decides every cell's answer alike: the cache key's fixed part.

    The definition counts by its parsed content (request, response mapping, headers, errors...;
    not its name, description or prices: a cached answer is repriced), so an edit of
    ``response.text`` is a new key. Headers count by a digest (a secret header is never kept
    in clear, and the key is itself a digest); the API key's header is left out. The ``stream:``
    section counts for a target that streams only (a definition that learns to stream keeps its
    non-streamed answers' keys), the ``params:`` list never (it only feeds a warning).
    """
    data = definition.loaded.data
    mapping = {k: v for k, v in data.items() if k not in _UNKEYED} if isinstance(data, dict) else data
    if streaming and isinstance(data, dict):
        mapping = {**mapping, "stream": data.get("stream")}
    parts = [provider, model, base_url, url, mapping, sorted((k.lower(), str(v)) for k, v in headers.items())]
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class _LazyContext:
    """A cell's template context, built on first use: a target without templates never pays for it."""

    __slots__ = ("_value", "cell", "run", "target")

    def __init__(self, cell: Cell, run: RunContext, target: ProviderTarget) -> None:
        self.cell, self.run, self.target = cell, run, target
        self._value: TemplateContext | None = None

    def get(self) -> TemplateContext:
        if self._value is None:
            self._value = template_context(self.cell, self.run, self.target.entry, self.target.spec)
        return self._value


async def _whole(resp: StreamResponse) -> HttpResponse:
    """A streamed response read whole (at most its ``max_bytes``), as :meth:`HttpClient.request_json` would give it."""
    raw = await resp.read()
    text = raw.decode("utf-8", "replace")
    try:
        parsed = json.loads(text) if text.strip() else None
    except ValueError:
        parsed = None
    return HttpResponse(resp.status, resp.headers, text, parsed, resp.url)


def _retry_after(headers: Any, name: str) -> float | None:
    if name.lower() == "retry-after":
        return retry_after_from(headers)
    return parse_retry_after(headers.get(name))


def _shape(value: Any) -> str:
    """What a response expression gave, briefly (not the value: an embedding can be thousands of numbers)."""
    if isinstance(value, list):
        odd = next((x for x in value if not isinstance(x, (int, float)) or isinstance(x, bool)), None)
        return (
            "an empty list"
            if not value
            else f"a list holding {type(odd).__name__}"
            if odd is not None
            else f"a list of {len(value)} numbers"
        )
    return "nothing" if value is None else type(value).__name__


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _normalize_tool(tool: object, index: int, where: str) -> ToolDefinition:
    """A tool as ``{name, description?, parameters?}``, from that form, OpenAI's or Anthropic's."""
    if not isinstance(tool, Mapping):
        raise ConfigError(Issue(where, None, f"tools[{index}]", "a tool must be a mapping with a name"))
    function = tool.get("function")
    if tool.get("type") == "function" and isinstance(function, Mapping):
        tool = function
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(Issue(where, None, f"tools[{index}]", "a tool needs a name"))
    out: ToolDefinition = {"name": name}
    if tool.get("description"):
        out["description"] = str(tool["description"])
    parameters = tool.get("parameters", tool.get("input_schema"))
    if parameters is not None:
        out["parameters"] = parameters
    return out


def _answer(
    text: str,
    calls: list[ToolCall],
    usage: Usage,
    cost: float | None,
    note: str | None,
    raw: RawAnswer | None,
    stop: object,
    *,
    ttft_ms: float | None = None,
) -> Trajectory:
    """The trajectory of an answer, streamed or not (a stop reason that is not text is kept as its JSON)."""
    return Trajectory(
        text=text,
        tool_calls=calls,
        usage=usage,
        cost_usd=cost,
        cost_note=note,
        raw=raw,
        ttft_ms=ttft_ms,
        stop_reason=stop if stop is None or isinstance(stop, str) else json.dumps(stop, ensure_ascii=False, default=str),
    )
