"""Pinned host keys looked up by name (transport/known_hosts.py): parsed once per file
version, hashed names matched as OpenSSH does, pins appended or replaced without loading the
file through paramiko's quadratic reader."""

import base64
import hashlib
import hmac
import os
import time

import pytest

from edgekit.transport.known_hosts import parse, pin_line, pinned

pytestmark = pytest.mark.unit

KEY_A = ("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
KEY_B = ("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB")


def hashed_name(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def test_keys_are_found_by_name_port_form_included_and_comments_skipped():
    keys = parse("# a comment\n"
                 f"[127.0.0.11]:2222 {KEY_A[0]} {KEY_A[1]}\n"
                 f"pi.local,192.0.2.10 {KEY_B[0]} {KEY_B[1]} a comment\n"
                 "@revoked * ssh-rsa AAAA\n"
                 "garbage\n")
    assert keys.lookup("[127.0.0.11]:2222") == (KEY_A,)
    assert keys.lookup("192.0.2.10") == keys.lookup("pi.local") == (KEY_B,)
    assert keys.lookup("127.0.0.11") == ()


def test_a_hashed_name_matches_only_its_host():
    keys = parse(f"{hashed_name('192.0.2.7')} {KEY_A[0]} {KEY_A[1]}\n")
    assert keys.lookup("192.0.2.7") == (KEY_A,)
    assert keys.lookup("192.0.2.8") == ()


def test_the_file_is_parsed_again_only_after_it_changed(tmp_path):
    path = tmp_path / "known_hosts"
    pin_line(path, "a", *KEY_A)
    first = pinned(path)
    assert pinned(path) is first           # unchanged: the same parse
    pin_line(path, "b", *KEY_B)
    assert pinned(path).lookup("b") == (KEY_B,) and pinned(path).lookup("a") == (KEY_A,)


def test_pinning_again_adds_nothing_and_replace_keeps_the_other_hosts(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text(f"a,c {KEY_A[0]} {KEY_A[1]}\nb {KEY_B[0]} {KEY_B[1]}")   # no final newline
    pin_line(path, "b", *KEY_B)
    assert path.read_text().count(KEY_B[1]) == 1
    pin_line(path, "a", *KEY_B, replace=True)
    keys = parse(path.read_text())
    assert keys.lookup("a") == (KEY_B,) and keys.lookup("c") == (KEY_A,)
    assert keys.lookup("b") == (KEY_B,)
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_ten_thousand_pinned_keys_parse_in_linear_time(tmp_path):
    path = tmp_path / "known_hosts"
    blob = KEY_A[1]
    path.write_text("".join(f"[10.0.{i // 250}.{i % 250}]:22 ssh-ed25519 {blob}\n"
                            for i in range(10_000)))
    started = time.perf_counter()
    keys = pinned(path)
    parsed = time.perf_counter() - started
    assert keys.lookup("[10.0.39.249]:22") == (KEY_A,)
    # paramiko's reader took 61 s for this file; one linear pass takes milliseconds
    assert parsed < 2.0, parsed
