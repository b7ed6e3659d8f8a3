"""The IANA special-purpose address registries as a table of our own, and what the egress guard makes of it.

Why a table: `ipaddress.is_global` / `is_private` change between Python patch releases (3.11.7 lets
192.0.0.8-192.0.0.255 and fec0::/10 through; later releases refuse them), so a guard built on them moves with the
interpreter. This table is the registries as of 2025 (iana.org/assignments/iana-ipv4-special-registry and
iana-ipv6-special-registry), plus multicast, the deprecated site-local block and the cloud metadata addresses.

The guard refuses every address in a block of this table, including the few blocks IANA marks globally
reachable (anycast PCP/TURN/DNS-SD servers, AS112, AMT, ORCHIDv2, drone remote ID): none of them is a webhook
receiver. The exceptions are the translation prefixes (`TRANSLATED`): an address there stands for the IPv4
address it embeds, and that address is decided instead. IPv6 outside 2000::/3 (global unicast) is refused as a
whole, which covers every reserved or unassigned block the registry does not list. Pure; no I/O.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class SpecialBlock:
    """One row of the registry: the block, its name and the RFC that reserved it."""

    network: Network
    name: str
    rfc: str


def _blocks(*rows: tuple[str, str, str]) -> tuple[SpecialBlock, ...]:
    return tuple(SpecialBlock(ipaddress.ip_network(cidr), name, rfc) for cidr, name, rfc in rows)


IPV4_SPECIAL = _blocks(
    ("0.0.0.0/8", "this network", "RFC 791"),
    ("0.0.0.0/32", "unspecified", "RFC 1122"),
    ("10.0.0.0/8", "private", "RFC 1918"),
    ("100.64.0.0/10", "carrier-grade NAT", "RFC 6598"),
    ("127.0.0.0/8", "loopback", "RFC 1122"),
    ("169.254.0.0/16", "link-local", "RFC 3927"),
    ("169.254.169.254/32", "cloud metadata", "-"),
    ("172.16.0.0/12", "private", "RFC 1918"),
    ("192.0.0.0/24", "IETF protocol assignments", "RFC 6890"),
    ("192.0.0.0/29", "IPv4 service continuity prefix", "RFC 7335"),
    ("192.0.0.8/32", "IPv4 dummy address", "RFC 7600"),
    ("192.0.0.9/32", "port control protocol anycast", "RFC 7723"),
    ("192.0.0.10/32", "traversal using relays around NAT anycast", "RFC 8155"),
    ("192.0.0.170/31", "NAT64/DNS64 discovery", "RFC 8880"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737"),
    ("192.31.196.0/24", "AS112-v4", "RFC 7535"),
    ("192.52.193.0/24", "AMT", "RFC 7450"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast", "RFC 7526"),
    ("192.168.0.0/16", "private", "RFC 1918"),
    ("192.175.48.0/24", "direct delegation AS112 service", "RFC 7534"),
    ("198.18.0.0/15", "benchmarking", "RFC 2544"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737"),
    ("224.0.0.0/4", "multicast", "RFC 5771"),
    ("240.0.0.0/4", "reserved", "RFC 1112"),
    ("255.255.255.255/32", "limited broadcast", "RFC 919"),
)

IPV6_SPECIAL = _blocks(
    ("::/128", "unspecified", "RFC 4291"),
    ("::1/128", "loopback", "RFC 4291"),
    ("::ffff:0:0/96", "IPv4-mapped", "RFC 4291"),
    ("::/96", "IPv4-compatible (deprecated)", "RFC 4291"),
    ("64:ff9b::/96", "IPv4/IPv6 translation", "RFC 6052"),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation", "RFC 8215"),
    ("100::/64", "discard-only", "RFC 6666"),
    ("100:0:0:1::/64", "dummy IPv6 prefix", "RFC 9780"),
    ("2001::/23", "IETF protocol assignments", "RFC 2928"),
    ("2001::/32", "Teredo", "RFC 4380"),
    ("2001:1::1/128", "port control protocol anycast", "RFC 7723"),
    ("2001:1::2/128", "traversal using relays around NAT anycast", "RFC 8155"),
    ("2001:1::3/128", "DNS-SD service registration protocol anycast", "RFC 9665"),
    ("2001:2::/48", "benchmarking", "RFC 5180"),
    ("2001:3::/32", "AMT", "RFC 7450"),
    ("2001:4:112::/48", "AS112-v6", "RFC 7535"),
    ("2001:10::/28", "deprecated ORCHID", "RFC 4843"),
    ("2001:20::/28", "ORCHIDv2", "RFC 7343"),
    ("2001:30::/28", "drone remote ID protocol entity tags", "RFC 9374"),
    ("2001:db8::/32", "documentation", "RFC 3849"),
    ("2002::/16", "6to4", "RFC 3056"),
    ("2620:4f:8000::/48", "direct delegation AS112 service", "RFC 7534"),
    ("3fff::/20", "documentation", "RFC 9637"),
    ("5f00::/16", "segment routing SIDs", "RFC 9602"),
    ("fc00::/7", "unique-local", "RFC 4193"),
    ("fd00:ec2::254/128", "cloud metadata", "-"),
    ("fe80::/10", "link-local", "RFC 4291"),
    ("fec0::/10", "site-local (deprecated)", "RFC 3879"),
    ("ff00::/8", "multicast", "RFC 4291"),
)

GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
# Blocks whose addresses stand for the IPv4 address they embed: the embedded address is decided instead.
TRANSLATED = frozenset(
    ipaddress.ip_network(cidr)
    for cidr in ("::ffff:0:0/96", "::/96", "64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "2001::/32")
)
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


def special_block(address: Address) -> SpecialBlock | None:
    """The most specific registry block holding `address`, or None."""
    table = IPV4_SPECIAL if address.version == 4 else IPV6_SPECIAL
    holding = [block for block in table if address in block.network]
    return max(holding, key=lambda block: block.network.prefixlen, default=None)


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address in a translation block stands for (mapped, compatible, NAT64 /96 and
    the RFC 8215 local-use /48 read the same way, 6to4, Teredo), or None outside them."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in block for block in TRANSLATED) and int(address) > 1:  # ::/96 holds :: and ::1 too
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal_reason(address: Address) -> str | None:
    """Why `address` may not be a target (ignoring any allowlist), or None when it is ordinary public unicast."""
    inner = embedded_ipv4(address)
    if inner is not None:
        reason = refusal_reason(inner)
        if reason is not None:
            return f"{reason} (embedded in {address})"
        # The local-use prefix reaches the operator's own translator, whose layout (RFC 6052 /48 to /96) we
        # cannot know: the /96 reading above catches the common case, the rest is refused unless allowlisted.
        return "local-use IPv4/IPv6 translation (RFC 8215)" if address in NAT64_LOCAL else None
    block = special_block(address)
    if block is not None:
        return block.name
    if address.version == 6 and address not in GLOBAL_UNICAST:
        return "outside IPv6 global unicast (2000::/3)"
    return None
