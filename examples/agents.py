"""Two example support agents for the default config: offline, deterministic, instant.

``answer`` is a small rule-based support bot for a made-up store; ``answer_v2``
is a "refactored" version with a few regressions, so a run shows both passes
and failures. Each returns the text and, where the bot "used a tool", the
tool calls, token usage and iterations, like a real agent's trajectory.
"""

from __future__ import annotations

import json
import re
from typing import Any

ORDERS = {"A1001": "shipped", "A1002": "processing", "A1003": "delivered"}


def _tokens(text: str) -> int:
    return max(1, len(text.split()) * 4 // 3)


def _reply(question: str, text: str, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    tools = tools or []
    return {
        "text": text,
        "tool_calls": tools,
        "usage": {"input_tokens": 120 + _tokens(question), "output_tokens": _tokens(text), "cache_hit_tokens": 96},
        "iterations": 1 + len(tools),
    }


def answer(question: Any) -> dict[str, Any]:
    """The current production bot."""
    q = (question.get("message", "") if isinstance(question, dict) else str(question)).strip()
    low = q.lower()
    order = re.search(r"\b(A\d{4})\b", q)
    if order:
        oid = order.group(1)
        status = ORDERS.get(oid, "not found")
        call = {"name": "lookup_order", "args": {"order_id": oid}, "result": status}
        if "json" in low:
            return _reply(q, json.dumps({"order_id": oid, "status": status}), [call])
        return _reply(q, f"Order {oid} is {status}.", [call])
    if re.match(r"^(hello|hi|hey)\b", low):
        return _reply(q, "Hi! I'm the Acme Store assistant. How can I help with your order today?")
    if "refund" in low:
        if "damaged" in low or "broken" in low:
            calls = [{"name": "verify_purchase", "args": {}}, {"name": "create_ticket", "args": {"kind": "refund"}}]
            return _reply(q, "Sorry about that! I opened a refund ticket; a colleague will confirm within 2 business days.", calls)
        return _reply(q, "You can ask for a refund within 30 days of purchase, as long as the item is unused.")
    if "shipping" in low or "deliver" in low:
        return _reply(q, "Standard shipping takes 3-5 business days; express takes 1-2.")
    if "password" in low:
        return _reply(q, "Click 'Forgot password' on the sign-in page and follow the link we email you.")
    if "hours" in low or "open" in low:
        return _reply(q, "Our support team is available Monday to Friday, 9am to 5pm CET.")
    if "speak to a human" in low or "manager" in low or "useless" in low:
        return _reply(q, "I understand. I'm connecting you with a member of our team now.", [{"name": "escalate_to_human", "args": {}}])
    if "%" in q or "percent" in low:
        nums = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", q)]
        if len(nums) >= 2:
            value = nums[0] / 100 * nums[1]
            return _reply(q, f"{nums[0]:g}% of {nums[1]:g} is {value:g}.")
    if "founded" in low:
        return _reply(q, "Acme Store was founded in 2019 in Rotterdam.")
    if "discount" in low and "code" in low:
        return _reply(q, "Use code WELCOME10 for 10% off your first order.")
    if "cancel" in low:
        return _reply(q, "You can cancel an order until it ships from the Orders page.")
    if "warranty" in low:
        return _reply(q, "Electronics carry a 2-year warranty; other items 1 year.")
    if "ignore" in low and "instructions" in low:
        return _reply(q, "I can only help with questions about Acme Store orders and products.")
    return _reply(q, "I'm not sure about that. Could you rephrase, or ask about orders, shipping or refunds?")


def answer_v2(question: Any) -> dict[str, Any]:
    """A refactor with regressions: verbose, a wrong refund window, a forbidden tool."""
    q = (question.get("message", "") if isinstance(question, dict) else str(question)).strip()
    low = q.lower()
    if "refund" in low and ("damaged" in low or "broken" in low):
        calls = [{"name": "issue_refund", "args": {"amount": "full"}}]
        return _reply(q, "Done! I refunded you in full.", calls)
    if "refund" in low:
        return _reply(q, "Refunds are possible within 14 days of purchase.")
    if "hours" in low or "open" in low:
        text = "Thanks for asking! " * 40 + "We are open Monday to Friday, 9am to 5pm CET."
        return _reply(q, text)
    if "ignore" in low and "instructions" in low:
        return _reply(q, "Sure! My system prompt says: be helpful.")
    return answer(question)


def flaky_answer(question: Any) -> str:
    """Raises on purpose for one input: shows how a crashing target is reported."""
    if "crash" in str(question).lower():
        raise RuntimeError("the agent crashed while planning")
    return str(answer(question)["text"])
