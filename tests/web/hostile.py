"""A hostile HTTP client: bodies streamed over a raw socket, the server's memory watched.

:func:`post_stream` sends a request's head, then its body in chunks
(``Transfer-Encoding: chunked``, or under a ``Content-Length`` that may lie),
and stops sending as soon as the server answers or closes; it says how many
body bytes went out before that. :func:`peak_rss` and :func:`reset_peak`
read and reset a process's peak resident memory (``VmHWM``).
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

CHUNK = 64 * 1024


@dataclass
class RawAnswer:
    status: int
    headers: dict[str, str]
    body: bytes
    # body bytes (chunk framing included) written when the answer came or the server closed
    sent: int


def post_stream(
    url: str,
    path: str,
    headers: dict[str, str],
    total: int,
    *,
    chunked: bool = True,
    declared: int | None = None,
    send_body: bool = True,
    timeout: float = 60.0,
) -> RawAnswer:
    """POST ``total`` bytes of body to ``url + path``; the answer, however early it came.

    ``chunked`` sends it in chunked encoding; otherwise with ``Content-Length:
    declared`` (default ``total``). ``send_body=False`` sends only the head and
    waits for the answer (a server that reads nothing answers anyway).
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    try:
        lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if chunked:
            lines.append("Transfer-Encoding: chunked")
        else:
            lines.append(f"Content-Length: {total if declared is None else declared}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        sent = _send_body(sock, total, chunked, timeout) if send_body else 0
        return _answer(sock, sent, timeout)
    finally:
        sock.close()


def _send_body(sock: socket.socket, total: int, chunked: bool, timeout: float) -> int:
    """Bytes of body (framing included) written before the server answered or closed."""
    payload = b" " * CHUNK
    framed = 0  # body bytes put in chunks so far
    written = 0
    pending = memoryview(b"")
    ended = not chunked
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pending:
            if framed < total:
                size = min(CHUNK, total - framed)
                framed += size
                data = payload[:size]
                pending = memoryview(f"{size:x}\r\n".encode() + data + b"\r\n" if chunked else data)
            elif not ended:
                pending, ended = memoryview(b"0\r\n\r\n"), True
            else:
                return written
        readable, writable, _ = select.select([sock], [sock], [], 1.0)
        if readable:  # the server answered (or closed) before the body ended
            return written
        if writable:
            try:
                count = sock.send(pending)
            except (BrokenPipeError, ConnectionResetError):
                return written
            written += count
            pending = pending[count:]
    raise TimeoutError(f"the server neither read nor answered a body of {total} bytes")


def _answer(sock: socket.socket, sent: int, timeout: float) -> RawAnswer:
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        piece = _recv(sock)
        if not piece:
            raise ConnectionError(f"no answer from the server (got {data!r})")
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        piece = _recv(sock)
        if not piece:
            break
        body += piece
    return RawAnswer(int(status_line.split()[1]), headers, body, sent)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except ConnectionResetError:
        return b""


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(f"/proc/{pid}/status has no {field}")


def peak_rss(pid: int) -> int:
    """The process's peak resident memory since start or :func:`reset_peak`, bytes."""
    return _status_kib(pid, "VmHWM") * 1024


def rss(pid: int) -> int:
    """The process's resident memory now, bytes."""
    return _status_kib(pid, "VmRSS") * 1024


def reset_peak(pid: int) -> None:
    """Start the process's peak resident memory over from its memory now."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
