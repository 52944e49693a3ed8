"""``distill ui``'s defaults: loopback only, read-only (no server started here)."""

from __future__ import annotations

from streams.cli.ui_cmd import DEFAULT_PORT, _is_loopback, browser_url, command


def test_it_binds_loopback_and_is_read_only_unless_told_otherwise() -> None:
    defaults = {p.name: p.default for p in command.params}
    assert defaults["host"] == "127.0.0.1" and defaults["port"] == DEFAULT_PORT
    assert defaults["allow_writes"] is False


def test_only_loopback_addresses_count_as_local() -> None:
    assert all(_is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "127.0.0.2"))
    assert not any(_is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.5", "example.com"))
    assert browser_url("::1", 8765, "/ops") == "http://[::1]:8765/ops"
