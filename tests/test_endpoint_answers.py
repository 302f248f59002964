"""What a failing endpoint's message says: a server that answers with a web page is named as such (not
"cannot be reached"), and a long error of the server (a gateway's 429) is cut at a word, never mid-word."""

from __future__ import annotations

import http.server
import json

import openai
import pytest

from pytest_agentbench.core.errors import ConfigError
from pytest_agentbench.core.options import Settings
from pytest_agentbench.core.text import clipped
from pytest_agentbench.models.client import describe_error
from pytest_agentbench.models.preflight import preflight

from helpers.serving import serve_in_background

PAGE = b"<!DOCTYPE html><html><head><title>Welcome</title></head><body>a web site</body></html>"


GATEWAY_429 = (
    "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached for requests. "
    + "Limit 3, used 3, requested 1. " * 40
    + "No fallback model group found for original model_group=primary. Add a fallbacks entry for this model group."
)


class WebSite(http.server.BaseHTTPRequestHandler):
    """A web server: every GET answers 200 with an HTML page; a POST gets a gateway's long 429."""

    def do_GET(self):  # noqa: N802 (http.server naming)
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def do_POST(self):  # noqa: N802 - a gateway's 429, its words long
        body = json.dumps({"error": {"message": GATEWAY_429, "type": "rate_limit_error", "code": "429"}}).encode()
        self.send_response(429)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def web_site():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), WebSite)
    serve_in_background(server, "web-site")
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_server_answering_html_is_named_not_an_api_not_unreachable(web_site, tmp_path):
    settings = Settings(
        {
            "model": "gpt-x",
            "model_base_url": web_site,
            "model_api_key": "sk-x",
            "model_protocol": "chat",
            "model_timeout": 60.0,
            "cache_dir": str(tmp_path),
            "model_preflight": "on",
        }
    )
    with pytest.raises(ConfigError) as error:
        preflight(settings)
    text = str(error.value)
    assert f"{web_site} answered with HTML (not JSON) to GET {web_site}/models" in text, text
    assert "probably not an OpenAI-compatible API base URL" in text and "/v1" in text
    assert "cannot be reached" not in text


def test_a_long_rate_limit_message_is_cut_at_a_word(web_site):
    client = openai.OpenAI(base_url=f"{web_site}/v1", api_key="sk-x", max_retries=0)
    with pytest.raises(openai.RateLimitError) as error:
        client.chat.completions.create(model="primary", messages=[{"role": "user", "content": "hi"}])
    text = describe_error(error.value)
    assert text.startswith("HTTP 429: Error code: 429 - litellm.RateLimitError") and text.endswith("...")
    kept = text.removeprefix("HTTP 429: ").removesuffix("...")
    said = str(error.value)
    assert said.startswith(kept) and said[len(kept)] in " .,;:"  # the cut falls between words
    assert clipped("Add a fallbacks entry for this model group.", 30) == "Add a fallbacks entry for..."
    assert clipped("short enough", 30) == "short enough"
