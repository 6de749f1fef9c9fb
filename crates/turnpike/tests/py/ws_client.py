"""A WebSocket client (python `websockets`) that talks through the gateway.

Usage: ws_client.py URL [HEADER=VALUE ...]
Checks the echo of a text message, a 1 MB binary message and 200 small messages, then closes;
prints "ok" on success. A refused handshake prints "refused <status>" and exits 2.
"""
import asyncio
import os
import sys

from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus


async def main():
    url = sys.argv[1]
    headers = [tuple(h.split("=", 1)) for h in sys.argv[2:]]
    try:
        async with connect(url, additional_headers=headers, max_size=None) as ws:
            first = await ws.recv()
            assert first.startswith("path:"), first
            await ws.send("hello through the gateway")
            assert await ws.recv() == "hello through the gateway"
            blob = os.urandom(1 << 20)
            await ws.send(blob)
            assert await ws.recv() == blob
            for i in range(200):
                await ws.send(f"m{i}")
            for i in range(200):
                assert await ws.recv() == f"m{i}"
            print("ok", first, flush=True)
    except InvalidStatus as e:
        print("refused", e.response.status_code, flush=True)
        sys.exit(2)


asyncio.run(main())
