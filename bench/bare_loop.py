"""The reference: a bare aiohttp loop, the most one Python process can push through the fake server.

    python bench/bare_loop.py --url http://127.0.0.1:8123 --kind provider|engine -n 10000 -c 50

One ``aiohttp.ClientSession`` (a pool of ``c`` connections), ``c`` workers
pulling from one counter, and a minimal reading of every answer — the JSON
parsed and the text and usage taken out (provider), or the SSE stream read
line by line with each ``data:`` parsed as JSON and the text deltas joined
(engine) — so the reference does the least work a real client must do. No
retries, no scoring, nothing written. Prints one JSON line: n, concurrency,
seconds (inside the loop), rps, failures. Run as a whole process by
bench/run.py, which times the process from the outside, like ``evalx run``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp


async def run(url: str, kind: str, n: int, concurrency: int) -> dict[str, float]:
    failures = 0
    counter = iter(range(n))
    endpoint = url.rstrip("/") + ("/v1/chat/completions" if kind == "provider" else "/execute")

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def provider_call(i: int) -> bool:
            body = {"model": "bench-model", "messages": [{"role": "user", "content": f"What is 2 + 2? (case {i})"}]}
            async with session.post(endpoint, json=body) as resp:
                data = await resp.json()
                text = data["choices"][0]["message"]["content"]
                usage = data["usage"]
                return resp.status == 200 and bool(text) and usage["completion_tokens"] > 0

        async def engine_call(i: int) -> bool:
            body = {"message": f"What is 2 + 2? (case {i})", "task_id": f"bench-{i}"}
            headers = {"Accept": "text/event-stream"}
            text: list[str] = []
            async with session.post(endpoint, json=body, headers=headers) as resp:
                async for raw in resp.content:
                    line = raw.decode().rstrip("\r\n")
                    if line.startswith("data:"):
                        event = json.loads(line[5:])
                        if "text" in event:
                            text.append(event["text"])
            return resp.status == 200 and bool(text)

        call = provider_call if kind == "provider" else engine_call

        async def worker() -> None:
            nonlocal failures
            for i in counter:
                if not await call(i):
                    failures += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - t0
    return {"n": n, "concurrency": concurrency, "seconds": round(seconds, 4), "rps": round(n / seconds, 1), "failures": failures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--kind", choices=["provider", "engine"], default="provider")
    parser.add_argument("-n", type=int, default=10000)
    parser.add_argument("-c", "--concurrency", type=int, default=50)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.url, args.kind, args.n, args.concurrency))))


if __name__ == "__main__":
    main()
