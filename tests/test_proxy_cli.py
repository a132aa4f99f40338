"""`ctxwin proxy` as served: where it may listen, and the auth token over a real socket."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from ctxwin.cli.main import app
from ctxwin.errors import InputError
from ctxwin.proxy.config import ProxyConfig
from ctxwin.proxy.serve import (
    TOKEN_ENV,
    Listen,
    check_serving,
    config_from_json,
    config_json,
    is_loopback,
    parse_listen,
)
from ctxwin.testing import FakeProvider, ForcedResponse
from proxy_procs import free_port, running_proxy

TOKEN = "s3cret-token-for-the-test"
ANTHROPIC_HEADERS = {"x-api-key": "provider-key", "anthropic-version": "2023-06-01"}
HELLO = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}]}


def nothing_listens(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]", "192.0.2.10", "proxy.example.com"])
def test_a_non_loopback_address_without_a_token_is_refused(host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    port = free_port()
    result = CliRunner().invoke(app, ["proxy", "--upstream", "http://127.0.0.1:9", "--listen", f"{host}:{port}"])
    assert result.exit_code == 2, result.output
    assert "refusing to listen" in result.output and "--auth-token" in result.output
    assert "Traceback" not in result.output
    assert nothing_listens(port)


@pytest.mark.parametrize(("args", "words"), [
    (["--workers", "2"], "--postgres"),
    (["--workers", "0"], "out of range"),
    (["--store", "x", "--postgres", "host=127.0.0.1"], "choose one"),
    (["--listen", "127.0.0.1"], "HOST:PORT"),
    (["--listen", "127.0.0.1:70000"], "out of range"),
])
def test_serving_that_cannot_work_is_refused_with_what_to_do(args: list[str], words: str) -> None:
    result = CliRunner().invoke(app, ["proxy", "--upstream", "http://127.0.0.1:9", *args])
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


def test_an_upstream_that_is_not_a_url_is_refused() -> None:
    result = CliRunner().invoke(app, ["proxy", "--upstream", "api.anthropic.com"])
    assert result.exit_code == 2 and "http(s) URL" in result.output


def test_loopback_is_recognized() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.8.9.10", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""))
    assert parse_listen("[::1]:8080") == Listen("::1", 8080)
    assert parse_listen(":8080") == Listen("127.0.0.1", 8080)
    with pytest.raises(InputError):
        check_serving(ProxyConfig("http://u"), Listen("0.0.0.0", 1), 1)
    check_serving(ProxyConfig("http://u", auth_token="a-token-of-16-ch"), Listen("0.0.0.0", 1), 1)  # 16 characters


def test_the_config_reaches_workers_intact(tmp_path: Path) -> None:
    config = ProxyConfig("http://127.0.0.1:1", policy="pi", store_dir=tmp_path, auth_token="t", passthrough=True,
                         recall_tool=False, window=50_000)
    assert config_from_json(config_json(config)) == config
    with pytest.raises(InputError):
        config_from_json(json.dumps({"upstream": "http://u", "unknown": 1}))


def test_the_token_is_checked_on_every_request_over_a_real_socket(tmp_path: Path) -> None:
    with FakeProvider() as fake, \
         running_proxy(fake.anthropic_base_url, tmp=tmp_path, host="0.0.0.0", env={TOKEN_ENV: TOKEN}) as proxy:
        # Listening on every interface is allowed with a token, and the token is not on the command line.
        assert TOKEN not in Path(f"/proc/{proxy.process.pid}/cmdline").read_bytes().decode()
        with httpx.Client(base_url=proxy.url, timeout=30) as client:
            refused = [
                client.post("/v1/messages", json=HELLO, headers=ANTHROPIC_HEADERS),
                client.post("/v1/messages", json=HELLO, headers={**ANTHROPIC_HEADERS, "x-ctxwin-token": "wrong"}),
                client.post("/v1/messages", json=HELLO, headers={**ANTHROPIC_HEADERS, "x-ctxwin-token": TOKEN[:-1]}),
            ]
            for answer in refused:
                assert answer.status_code == 401
                error = answer.json()
                assert error["type"] == "error" and error["error"]["type"] == "authentication_error"
            chat = client.post("/v1/chat/completions", headers={"authorization": "Bearer wrong"},
                               json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
            assert chat.status_code == 401 and set(chat.json()["error"]) >= {"message", "type"}
            assert fake.requests == []  # nothing refused reached the provider

            accepted = client.post("/v1/messages", json=HELLO, headers={**ANTHROPIC_HEADERS, "x-ctxwin-token": TOKEN})
            assert accepted.status_code == 200, accepted.text
            assert accepted.json()["type"] == "message"
            forwarded = fake.requests[-1]
            assert forwarded.headers.get("x-api-key") == "provider-key"  # the caller's own key goes through
            assert TOKEN not in json.dumps(forwarded.headers)  # ctxwin's token does not
    assert TOKEN not in proxy.output()


def test_an_address_in_use_is_refused_before_serving() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["proxy", "--upstream", "http://127.0.0.1:9", "--listen", f"127.0.0.1:{port}"])
    assert result.exit_code == 2, result.output
    assert "cannot listen on 127.0.0.1" in result.output and "--listen" in result.output
    assert "ctxwin proxy on" not in result.output  # no banner for a proxy that is not serving


def test_the_limits_the_error_hints_name_are_flags(tmp_path: Path) -> None:
    """A 413 says "raise --max-body-bytes", a 504 "raise --upstream-timeout": both are flags of
    `ctxwin proxy`, and they take effect."""
    with FakeProvider() as fake, running_proxy(fake.anthropic_base_url, "--max-body-bytes", "2000",
                                               "--upstream-timeout", "0.5", tmp=tmp_path) as proxy:
        big = {**HELLO, "messages": [{"role": "user", "content": "x" * 3000}]}
        refused = httpx.post(f"{proxy.url}/v1/messages", json=big, headers=ANTHROPIC_HEADERS, timeout=30)
        fake.force(ForcedResponse(delay=2.0))
        late = httpx.post(f"{proxy.url}/v1/messages", json=HELLO, headers=ANTHROPIC_HEADERS, timeout=30)
    assert refused.status_code == 413 and "--max-body-bytes" in refused.json()["error"]["message"]
    assert late.status_code == 504 and "--upstream-timeout" in late.json()["error"]["message"]
