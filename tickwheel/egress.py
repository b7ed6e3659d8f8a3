"""Egress policy: which addresses a tenant's target may reach.

A target host is resolved once, every resolved address is checked, and the connection goes to the address that was
checked (`EgressResolver` hands the worker's HTTP client, `worker.http1`, only checked addresses), so a DNS answer
cannot change between the check and the connect. Refused unless the operator allowlist
(`settings.worker.egress_allow`, CIDRs) admits them: every block of the IANA special-purpose registries (our own
table, `tickwheel.core.addresses`, not `ipaddress.is_global`, which differs between Python patch releases),
multicast, IPv6 outside 2000::/3, and the IPv6 forms that embed an IPv4 address (IPv4-mapped, IPv4-compatible,
NAT64 64:ff9b::/96 and the RFC 8215 local-use 64:ff9b:1::/48, 6to4 2002::/16, Teredo) when the embedded address is
refused. Numeric host spellings that the C resolver accepts (`0177.0.0.1`, `2130706433`, `127.1`, `0x7f.1`) are
read as the IPv4 address they mean before the check.

The classification (`refusal_reason`, `numeric_ipv4`, `EgressPolicy.check_address`) is pure and needs no network.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from tickwheel.core.addresses import Address, Network, embedded_ipv4, refusal_reason
from tickwheel.errors import EgressRefused

__all__ = [
    "EgressPolicy",
    "EgressResolver",
    "UnresolvedHost",
    "literal_address",
    "numeric_ipv4",
    "parsed_url",
    "refusal_reason",
]


class UnresolvedHost(OSError):
    """A target's name did not resolve: the host was never reached."""


def numeric_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a numeric host means under inet_aton rules (1 to 4 parts, decimal, 0-octal or 0x-hex,
    the last part filling the remaining bytes), or None when `host` is not such a number."""
    parts = host.rstrip(".").split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = [_inet_aton_part(part) for part in parts]
    if any(v is None for v in values):
        return None
    numbers = [v for v in values if v is not None]
    last_bits = 8 * (5 - len(numbers))
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 1 << last_bits:
        return None
    value = 0
    for n in numbers[:-1]:
        value = value << 8 | n
    return ipaddress.IPv4Address(value << last_bits | numbers[-1])


def _inet_aton_part(part: str) -> int | None:
    text = part.lower()
    try:
        if text.startswith("0x"):
            return int(text[2:], 16)
        if len(text) > 1 and text.startswith("0"):
            return int(text[1:], 8)
        return int(text, 10) if text.isdigit() else None
    except ValueError:
        return None


# The four below are pure and asked per run of a target with the same few host strings (each parse was ~3 % of a
# worker's samples at 300 runs/s): kept per spelling, as many spellings as HOSTS_KEPT.
HOSTS_KEPT = 4096


@functools.lru_cache(maxsize=HOSTS_KEPT)
def literal_address(host: str) -> Address | None:
    """The address a URL host spells literally (IPv6 with or without brackets, or any numeric IPv4 form)."""
    text = host.strip("[]").split("%")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return numeric_ipv4(host)


@functools.lru_cache(maxsize=HOSTS_KEPT)
def canonical_host(host: str) -> str:
    """The one spelling of a host that keys limits: `EXAMPLE.com.` and `example.com` are `example.com`, and an
    address in any spelling (`[::FFFF:8.8.8.8]`, `134744072`) is its compressed form."""
    address = literal_address(host)
    return str(address) if address is not None else host.strip().rstrip(".").lower()


@functools.lru_cache(maxsize=HOSTS_KEPT)
def parsed_url(text: str) -> URL:
    """A target's URL, parsed once per spelling (yarl's URLs are immutable)."""
    return URL(text)


@functools.lru_cache(maxsize=HOSTS_KEPT)
def canonical_authority(url: str) -> str:
    """The one spelling of an HTTP target's host and port, which keys its breakers and limits: two services on
    one host (`10.0.0.5:8080`, `10.0.0.5:9090`) are two targets, and one failing cannot hold back the other;
    `https://EXAMPLE.com.` and `https://example.com:443/x` are `example.com:443`."""
    parsed = parsed_url(url)
    host = canonical_host(parsed.host or "-")
    return f"[{host}]:{parsed.port}" if ":" in host else f"{host}:{parsed.port}"


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """The refusal rules plus the operator allowlist (CIDRs that are admitted whatever they are)."""

    allow: tuple[Network, ...] = ()

    @classmethod
    def from_cidrs(cls, cidrs: Iterable[str]) -> EgressPolicy:
        return cls(tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs if c.strip()))

    def allowed(self, address: Address) -> bool:
        inner = embedded_ipv4(address)
        return any(address in net or (inner is not None and inner in net) for net in self.allow)

    def check_address(self, address: Address, host: str) -> None:
        """Raise EgressRefused unless `address` (resolved from `host`) may be called."""
        if self.allowed(address):
            return
        reason = refusal_reason(address)
        if reason:
            raise EgressRefused(f"target {host} resolves to {address}: {reason} addresses are not allowed")

    def check_literal(self, host: str) -> Address | None:
        """Check a host that is an address literal; returns it (None when `host` is a name to resolve)."""
        address = literal_address(host)
        if address is not None:
            self.check_address(address, host)
        return address


class EgressResolver(AbstractResolver):
    """A resolver (aiohttp's interface) that resolves once and returns only addresses the policy admits; the
    worker's HTTP client connects to exactly these, keeping the URL's host for the Host header and TLS SNI."""

    def __init__(self, policy: EgressPolicy):
        self.policy = policy

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        literal = self.policy.check_literal(host)
        if literal is not None:
            return [_result(host, str(literal), port, _family(literal))]
        infos = await _getaddrinfo(host, port)
        if not infos:
            raise EgressRefused(f"target {host} did not resolve")
        results: list[ResolveResult] = []
        for fam, _, _, _, sockaddr in infos:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
            self.policy.check_address(address, host)  # one refused address refuses the host: no retry roulette
            results.append(_result(host, str(address), port, fam))
        return results

    async def close(self) -> None:
        return None


async def _getaddrinfo(host: str, port: int) -> list[Any]:
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG)
    except socket.gaierror as exc:
        raise UnresolvedHost(f"cannot resolve {host}: {exc}") from exc
    seen: set[str] = set()
    unique = []
    for info in infos:
        address = str(info[4][0])
        if address not in seen:
            seen.add(address)
            unique.append(info)
    return unique


def _family(address: Address) -> socket.AddressFamily:
    return socket.AF_INET if address.version == 4 else socket.AF_INET6


def _result(host: str, address: str, port: int, family: int) -> ResolveResult:
    return ResolveResult(hostname=host, host=address, port=port, family=family, proto=0, flags=socket.AI_NUMERICHOST)
