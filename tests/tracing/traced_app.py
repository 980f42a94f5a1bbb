"""Python targets for the tracing tests: apps that report nothing but OpenTelemetry spans (the real SDK, no exporter set up).

``agent`` starts a GenAI ``chat`` span and an ``execute_tool`` span per word
``tool:NAME`` of its input (``fail:NAME``: one with error status) under an
``invoke_agent`` span, and returns only its answer's text. ``tagged`` starts
one span carrying its input as an attribute (the test of concurrent cells).
``openinference_app`` calls an OpenAI-compatible server through the
``openai`` client instrumented by ``openinference-instrumentation-openai``.
"""

from __future__ import annotations

import json
import os

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

tracer = trace.get_tracer("traced-app")


def agent(question: str) -> str:
    with tracer.start_as_current_span("invoke_agent"):
        with tracer.start_as_current_span("chat gpt-test") as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.usage.input_tokens", 12)
            chat.set_attribute("gen_ai.usage.output_tokens", 5)
        for word in question.split():
            kind, _, name = word.partition(":")
            if kind not in ("tool", "fail"):
                continue
            with tracer.start_as_current_span(f"execute_tool {name}") as span:
                span.set_attribute("gen_ai.operation.name", "execute_tool")
                span.set_attribute("gen_ai.tool.name", name)
                span.set_attribute("gen_ai.tool.call.arguments", json.dumps({"q": question.split()[0]}))
                if kind == "fail":
                    span.set_status(Status(StatusCode.ERROR, f"{name} is down"))
                else:
                    span.set_attribute("gen_ai.tool.call.result", json.dumps({"hits": 3}))
    return "done"


def tagged(text: str) -> str:
    with tracer.start_as_current_span("work") as span:
        span.set_attribute("app.input", text)
        with tracer.start_as_current_span("step") as step:
            step.set_attribute("app.input", text)
    return text


_instrumented = False


def openinference_app(question: str) -> str:
    global _instrumented
    import openai
    from openinference.instrumentation.openai import OpenAIInstrumentor

    if not _instrumented:
        OpenAIInstrumentor().instrument()
        _instrumented = True
    client = openai.OpenAI(base_url=os.environ["FAKE_OPENAI_URL"], api_key=os.environ["FAKE_OPENAI_KEY"], max_retries=0)
    reply = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": question}])
    return reply.choices[0].message.content or ""


def named(text: str) -> str:
    """One span named after the input (markup included), with error status, under the ``agent`` spans."""
    agent("paris tool:search")
    with tracer.start_as_current_span(text) as span:
        span.set_status(Status(StatusCode.ERROR, text))
    return "ok"
