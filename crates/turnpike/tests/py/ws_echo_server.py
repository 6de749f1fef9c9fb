"""A WebSocket echo server (python `websockets`) for the gateway tests.

Prints its port on the first line of stdout, then serves until killed. Every text or binary
message is sent back; the path the client asked for is sent first as "path:<path>".
"""
import asyncio
import sys

from websockets.asyncio.server import serve


async def echo(ws):
    await ws.send("path:" + ws.request.path)
    async for message in ws:
        await ws.send(message)


async def main():
    async with serve(echo, "127.0.0.1", 0, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        print(port, flush=True)
        await asyncio.Future()


asyncio.run(main())
