"""A tiny agent that reports nothing but OpenTelemetry spans: evalx grades its tool calls and tokens from them.

It follows the OpenTelemetry GenAI semantic conventions: a ``chat`` span with
``gen_ai.usage.*`` token counts, and an ``execute_tool`` span per tool call
with ``gen_ai.tool.name`` and the call's arguments and result. It sets up no
exporter: under ``evalx run --trace`` evalx takes the spans in-process
(docs/tracing.md). Run it with::

    pip install 'evalx-runner[otel]'
    evalx run --config examples/tracing/evalconfig.yaml
"""

from __future__ import annotations

import json

from opentelemetry import trace

tracer = trace.get_tracer("example-agent")

WEATHER = {"paris": {"temp_c": 21, "sky": "clear"}, "oslo": {"temp_c": 3, "sky": "snow"}}


def get_weather(city: str) -> dict[str, object]:
    with tracer.start_as_current_span("execute_tool get_weather") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", "get_weather")
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps({"city": city}))
        result = WEATHER.get(city.lower(), {"error": "unknown city"})
        span.set_attribute("gen_ai.tool.call.result", json.dumps(result))
        return result


def chat(prompt: str) -> str:
    """A stand-in for a model call: the span an instrumented client would make."""
    with tracer.start_as_current_span("chat demo-model") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.request.model", "demo-model")
        span.set_attribute("gen_ai.usage.input_tokens", len(prompt.split()) + 20)
        span.set_attribute("gen_ai.usage.output_tokens", 8)
        words = [w.strip("?.,!").lower() for w in prompt.split()]
        return next((w for w in words if w in WEATHER), "")


def agent(question: str) -> str:
    with tracer.start_as_current_span("invoke_agent weather-bot"):
        city = chat(question)
        if not city:
            return "Which city?"
        weather = get_weather(city)
        return f"It is {weather['temp_c']} °C and {weather['sky']} in {city.title()}."
