"""An api-server as a managed service's is: far away and behind TLS. A process that listens on 127.0.0.1, holds
each byte for half a round trip each way (a new connection waits one whole round trip first, as the TCP
handshake would), and ends TLS with a certificate of its own before it hands the requests to the api-server, so
that the TLS handshake pays its round trips too.

    python bench/far_api.py --listen 8443 --to 8080 --rtt-ms 20 --cert cert.pem --key key.pem

Only loopback is used; what it models is the time of the round trips, not the loss or bandwidth of a network.
``serve_far`` starts it from a benchmark (``api_walk.py --rtt-ms``) with a certificate made for 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", type=int, required=True, help="the port of 127.0.0.1 the client connects to")
    parser.add_argument("--to", type=int, required=True, help="the api-server's port on 127.0.0.1 (plain http)")
    parser.add_argument("--rtt-ms", type=float, required=True, help="the round trip the client sees")
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    args = parser.parse_args(argv)
    asyncio.run(_serve(args.listen, args.to, args.rtt_ms / 1000, args.cert, args.key))
    return 0


async def _serve(listen: int, to: int, rtt: float, cert: Path, key: Path) -> None:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)

    async def terminate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await asyncio.open_connection("127.0.0.1", to)
        await _both_ways((reader, writer), upstream, 0.0)

    inner = await asyncio.start_server(terminate, "127.0.0.1", 0, ssl=tls)
    inner_port = inner.sockets[0].getsockname()[1]

    async def delay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(rtt)  # the TCP handshake
        upstream = await asyncio.open_connection("127.0.0.1", inner_port)
        await _both_ways((reader, writer), upstream, rtt / 2)

    outer = await asyncio.start_server(delay, "127.0.0.1", listen)
    async with inner, outer:
        await asyncio.gather(inner.serve_forever(), outer.serve_forever())


Ends = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _both_ways(near: Ends, far: Ends, d: float) -> None:
    await asyncio.gather(_carry(near[0], far[1], d), _carry(far[0], near[1], d), return_exceptions=True)
    for _, writer in (near, far):
        writer.close()


async def _carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Each chunk delivered ``delay`` after it was read, in order, without holding up the ones read after it."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                writer.write_eof() if writer.can_write_eof() else writer.close()
                return
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            writer.write(data)
            await writer.drain()

    delivering = asyncio.ensure_future(deliver())
    try:
        while True:
            data = await reader.read(65536)
            queue.put_nowait((time.monotonic() + delay, data))
            if not data:
                break
        await delivering
    except (ConnectionError, OSError):
        delivering.cancel()


def certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key: the client's CA bundle is the certificate itself."""
    cert, key = folder / "far-api.pem", folder / "far-api.key"
    subject = ["-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert), *subject],
        check=True,
        capture_output=True,
    )
    return cert, key


def serve_far(folder: Path, listen: int, to: int, rtt_ms: float) -> tuple[subprocess.Popen[bytes], Path]:
    """This module as a process in front of the api-server on port ``to``; returns it and the CA bundle."""
    cert, key = certificate(folder)
    argv = [sys.executable, __file__, "--listen", str(listen), "--to", str(to), "--rtt-ms", str(rtt_ms)]
    proc = subprocess.Popen([*argv, "--cert", str(cert), "--key", str(key)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", listen), timeout=1).close()
            return proc, cert
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the far api-server's proxy did not start")


if __name__ == "__main__":
    sys.exit(main())
