"""The egress classifier, without network: every refused form, the allowlist, and public addresses."""

from __future__ import annotations

import ipaddress

import pytest

from tickwheel.egress import (
    EgressPolicy,
    canonical_authority,
    canonical_host,
    literal_address,
    numeric_ipv4,
    refusal_reason,
)
from tickwheel.errors import EgressRefused

REFUSED_LITERALS = [
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "169.254.1.1",
    "100.64.0.1",
    "100.127.255.254",
    "0.0.0.0",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd00:ec2::254",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::127.0.0.1",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::a00:1",
    "2002:7f00:1::1",
    "2002:a9fe:a9fe::",
    "0177.0.0.1",
    "2130706433",
    "127.1",
    "0x7f.1",
    "0x7f000001",
    "017700000001",
    "10.0x1",
    "[::1]",
    "[::ffff:7f00:1]",
    "127.0.0.1.",  # stricter than inet_aton, which refuses it, while a resolver may read it as a name
]

PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:808:808::1", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("host", REFUSED_LITERALS)
def test_each_private_loopback_metadata_or_odd_literal_form_is_refused(host: str) -> None:
    with pytest.raises(EgressRefused):
        EgressPolicy().check_literal(host)


@pytest.mark.parametrize("host", PUBLIC)
def test_public_addresses_and_their_embeddings_pass(host: str) -> None:
    assert EgressPolicy().check_literal(host) == ipaddress.ip_address(host)


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("0177.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("10.1.258", "10.1.1.2"),
        ("0", "0.0.0.0"),
    ],
)
def test_numeric_hosts_are_read_the_way_inet_aton_reads_them(text: str, address: str) -> None:
    assert numeric_ipv4(text) == ipaddress.IPv4Address(address)


@pytest.mark.parametrize("text", ["example.com", "256.1.1.1", "1.2.3.4.5", "0x", "08.1.1.1", "1.2.3.256", "a.b"])
def test_names_and_out_of_range_numbers_are_not_numeric_hosts(text: str) -> None:
    assert numeric_ipv4(text) is None


def test_names_are_left_to_the_resolver() -> None:
    assert literal_address("sink.example.com") is None
    assert EgressPolicy().check_literal("sink.example.com") is None


def test_reasons_name_the_kind_of_address() -> None:
    assert refusal_reason(ipaddress.ip_address("169.254.169.254")) == "cloud metadata"
    assert refusal_reason(ipaddress.ip_address("100.64.0.1")) == "carrier-grade NAT"
    assert refusal_reason(ipaddress.ip_address("127.0.0.1")) == "loopback"
    assert "embedded in 64:ff9b::a9fe:a9fe" in (refusal_reason(ipaddress.ip_address("64:ff9b::a9fe:a9fe")) or "")


def test_the_allowlist_admits_only_its_cidrs_in_any_spelling() -> None:
    policy = EgressPolicy.from_cidrs(["127.0.0.1/32"])
    for host in ("127.0.0.1", "127.1", "2130706433", "::ffff:127.0.0.1"):
        assert policy.check_literal(host) is not None
    for host in ("127.0.0.2", "10.0.0.1", "169.254.169.254", "::1"):
        with pytest.raises(EgressRefused):
            policy.check_literal(host)


@pytest.mark.parametrize(
    "text",
    ["0x", "0x7f.1", "0177.1", "1.2.3.4", "1.2.65535", "1.16777215", "4294967295", "4294967296", "00", "0x0.0x0.0.1",
     "1..2", "09", "0xg", "-1", ""],
)  # fmt: skip
def test_numeric_hosts_match_the_c_library_inet_aton(text: str) -> None:
    import socket

    try:
        expected = ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        expected = None
    assert numeric_ipv4(text) == expected


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("EXAMPLE.com", "example.com"),
        ("example.com.", "example.com"),
        ("Example.COM.", "example.com"),
        ("134744072", "8.8.8.8"),
        ("[2606:4700:4700:0::1111]", "2606:4700:4700::1111"),
        ("::FFFF:8.8.8.8", "::ffff:808:808"),
    ],
)
def test_every_spelling_of_a_host_has_one_canonical_form(spelling: str, canonical: str) -> None:
    assert canonical_host(spelling) == canonical


@pytest.mark.parametrize(
    ("url", "authority"),
    [
        ("https://EXAMPLE.com./hook", "example.com:443"),
        ("https://example.com:443/other?q=1", "example.com:443"),
        ("http://example.com/", "example.com:80"),
        ("http://example.com:8080/", "example.com:8080"),
        ("http://127.0.0.1:9090/x", "127.0.0.1:9090"),
        ("https://[::FFFF:8.8.8.8]/", "[::ffff:808:808]:443"),
    ],
)
def test_every_spelling_of_a_target_has_one_authority_and_ports_tell_services_apart(url: str, authority: str) -> None:
    assert canonical_authority(url) == authority
