"""The special-purpose address table on its own: every block refused whole, public unicast admitted, and never
more permissive than this interpreter's `ipaddress.is_global` (the table must not depend on it)."""

from __future__ import annotations

import ipaddress
import random

import pytest

from tickwheel.core.addresses import IPV4_SPECIAL, IPV6_SPECIAL, TRANSLATED, SpecialBlock, refusal_reason, special_block

OWN_BLOCKS = [block for block in IPV4_SPECIAL + IPV6_SPECIAL if block.network not in TRANSLATED]


@pytest.mark.parametrize("block", OWN_BLOCKS, ids=lambda block: str(block.network))
def test_every_address_of_a_special_block_is_refused(block: SpecialBlock):
    network = block.network
    for address in (network[0], network[-1], network[network.num_addresses // 2]):
        assert refusal_reason(address) is not None, address
        found = special_block(address)
        assert found is not None and found.network.prefixlen >= network.prefixlen


@pytest.mark.parametrize(
    "text",
    [
        "192.0.0.8", "192.0.0.9", "192.0.0.10", "192.0.0.171", "192.0.0.255", "192.0.2.1", "198.18.0.1",
        "198.19.255.255", "192.88.99.1", "fec0::1", "feff::1", "2001:db8::1", "3fff::1", "5f00::1", "100::1",
        "2001:2::1", "2001:10::1", "4000::1", "::2", "64:ff9b:1::a00:1", "64:ff9b:1::808:808",
    ],
)  # fmt: skip
def test_addresses_that_is_global_let_through_on_some_python_releases_are_refused(text: str):
    assert refusal_reason(ipaddress.ip_address(text)) is not None


@pytest.mark.parametrize(
    "text", ["8.8.8.8", "1.1.1.1", "192.0.3.1", "198.20.0.1", "100.128.0.1", "2606:4700:4700::1111", "2a00:1450::1"]
)
def test_ordinary_public_unicast_is_admitted(text: str):
    assert refusal_reason(ipaddress.ip_address(text)) is None


def test_the_rfc_8215_local_use_prefix_is_read_like_the_96_form():
    assert refusal_reason(ipaddress.ip_address("64:ff9b:1::a00:1")) == "private (embedded in 64:ff9b:1::a00:1)"
    assert refusal_reason(ipaddress.ip_address("64:ff9b:1::7f00:1")) == "loopback (embedded in 64:ff9b:1::7f00:1)"
    assert refusal_reason(ipaddress.ip_address("64:ff9b:1::808:808")) == "local-use IPv4/IPv6 translation (RFC 8215)"
    assert refusal_reason(ipaddress.ip_address("64:ff9b::808:808")) is None  # the well-known prefix is global


def test_the_most_specific_block_names_the_reason():
    assert refusal_reason(ipaddress.ip_address("169.254.169.254")) == "cloud metadata"
    assert refusal_reason(ipaddress.ip_address("169.254.1.1")) == "link-local"
    assert refusal_reason(ipaddress.ip_address("0.0.0.0")) == "unspecified"


def test_the_table_is_never_more_permissive_than_is_global():
    rng = random.Random(12)
    samples: list[ipaddress.IPv4Address | ipaddress.IPv6Address]
    samples = [ipaddress.IPv4Address(rng.getrandbits(32)) for _ in range(20_000)]
    samples += [ipaddress.IPv6Address(rng.getrandbits(128)) for _ in range(5_000)]
    for block in IPV4_SPECIAL + IPV6_SPECIAL:
        samples += [block.network[0] - 1 if int(block.network[0]) else block.network[0], block.network[-1]]
    admitted_but_not_global = [a for a in samples if refusal_reason(a) is None and not a.is_global]
    assert not admitted_but_not_global
