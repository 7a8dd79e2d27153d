"""Behind a reverse proxy: `tripletlab serve` takes a client's address from the proxy's
X-Forwarded-For when, and only when, ``TRIPLETLAB_FORWARDED_ALLOW_IPS`` names the proxy, so
each client behind it has a rate limit of its own."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.servers import Server, sqlite_url

CLIENTS = [f"198.51.100.{i}" for i in range(1, 7)]  # more than the burst of one address


def _limited_server(tmp_path: Path, forwarded_allow_ips: str) -> Server:
    return Server(
        sqlite_url(tmp_path),
        tmp_path / "data",
        env_extra={
            "TRIPLETLAB_WEB_WORKERS": "1",  # one process: one table of buckets
            "TRIPLETLAB_WORKER_RATE_ADDRESS": "0.001",  # no refill within the test
            "TRIPLETLAB_WORKER_BURST_ADDRESS": "3",
            "TRIPLETLAB_FORWARDED_ALLOW_IPS": forwarded_allow_ips,
        },
    ).start()


def _statuses(server: Server) -> list[int]:
    """One request per client, each named by the proxy (this test) in X-Forwarded-For."""
    with httpx.Client(base_url=server.base, timeout=30) as client:
        return [
            client.get("/api/w/no-such-study", headers={"X-Forwarded-For": address}).status_code
            for address in CLIENTS
        ]


@pytest.mark.parametrize(
    ("forwarded_allow_ips", "trusted"),
    [("127.0.0.1", True), ("*", True), ("192.0.2.9", False)],
)
def test_each_client_behind_a_trusted_proxy_has_its_own_rate_limit(
    tmp_path: Path, forwarded_allow_ips: str, trusted: bool
):
    server = _limited_server(tmp_path, forwarded_allow_ips)
    try:
        statuses = _statuses(server)
    finally:
        server.stop()
    if trusted:
        assert statuses == [404] * len(CLIENTS)  # every client within its own burst
    else:
        # The forwarded header of a sender that is not the named proxy is ignored: every
        # request is the proxy's own address, whose burst of 3 (part of it spent while the
        # test waited for the server to start) is soon gone.
        assert statuses[-3:] == [429, 429, 429]
