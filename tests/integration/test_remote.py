"""The remote runtime (--triton-url) against a server this session did not start: `pytest-triton-llm serve` in a
subprocess, then the suites pointed at its URLs, directly and through a real reverse proxy (nginx from Debian)
that demands a bearer token on the gRPC, HTTP and metrics endpoints."""

import json
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pytest_triton_llm.stack.runtimes.ports import free_ports

from ..conftest import ROOT, TINY_LOCK, need_tool, processes_mentioning, run_child
from .serving import start_serving

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def hostport(url: str) -> str:
    return url.split("://", 1)[1].removesuffix("/metrics")


@pytest.fixture(scope="module")
def served(request):
    """A deployment of the tiny engine served by `pytest-triton-llm serve` (stopped by SIGTERM at the end, nothing
    left): what is new here is how the suites reach a server, not what it answers."""
    proc, urls, repository = start_serving(request.param, lock=TINY_LOCK)
    yield urls
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert processes_mentioning(str(repository)) == []


def run_suites(tmp_path: Path, markers: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The suites against the remote server, through the ensemble, one request at a time: what is new here is how
    they reach a server they did not start. The BLS entry and the tests that only add load (concurrent requests and
    streams, 60 of the 199 s this took on 2 cores, 2026-12-03) run the same client code again; the suites' own runs
    cover them on the default deployments. The server's engine has random weights, which a remote server's report
    cannot know: the tests that need trained ones (known answers) are left out by their marker."""
    report = tmp_path / "report.json"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "suites"),
        "-m",
        f"({markers}) and not triton_llm_trained_weights",
        "-k",
        "not tensorrt_llm_bls and not concurrent",
        "-p",
        "no:cacheprovider",
        "-q",
        "--triton-llm-report",
        str(report),
        "--junitxml",
        str(tmp_path / "junit.xml"),
        f"--basetemp={tmp_path / 'basetemp'}",
        *args,
    ]
    done = run_child(argv, cwd=tmp_path, timeout=1700)  # no lock here: none needed
    return done, json.loads(report.read_text()) if report.exists() else {}


@pytest.mark.parametrize("served", ["tiny:inflight"], indirect=True)
def test_the_suites_pass_against_a_running_server_given_by_url(served, tmp_path):
    done, report = run_suites(
        tmp_path,
        "(functional or streaming or early_stop) and not properties",
        "--triton-url",
        served["grpc"],
        "--triton-http-url",
        served["http"],
        "--triton-metrics-url",
        served["metrics"],
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert report["summary"].get("failed", 0) == 0 and report["summary"].get("error", 0) == 0
    assert report["summary"]["passed"] >= 25, report["summary"]
    assert report["run"]["options"]["runtime"] == "remote"
    url = f"grpc://{hostport(served['grpc'])}"
    assert (report["server"]["origin"], report["server"]["url"], report["server"]["version"]) == ("remote", url, "2.51.0")
    assert "remote:inflight" in report["deployments"]
    assert f"server: remote {url}, Triton 2.51.0" in done.stdout  # pytest's header and the summary say remote


NGINX = """daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{}}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  server {{
    listen 127.0.0.1:{grpc_port} http2;
    location / {{
      if ($http_authorization != "Bearer {token}") {{ return 401; }}
      grpc_pass grpc://{grpc}; grpc_read_timeout 600s; grpc_send_timeout 600s;
    }}
  }}
  server {{
    listen 127.0.0.1:{http_port};
    location / {{
      if ($http_authorization != "Bearer {token}") {{ return 401; }}
      proxy_pass http://{http}; proxy_http_version 1.1; proxy_buffering off; proxy_read_timeout 600s;
    }}
  }}
  server {{
    listen 127.0.0.1:{metrics_port};
    location / {{
      if ($http_authorization != "Bearer {token}") {{ return 401; }}
      proxy_pass http://{metrics};
    }}
  }}
}}
"""


@pytest.fixture
def proxy(served, tmp_path):
    """nginx in front of the served deployment: every endpoint answers 401 without the bearer token."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        need_tool("no nginx here; .ci/run installs Debian's nginx-light")
    token = secrets.token_hex(16)
    grpc_port, http_port, metrics_port = free_ports(3)
    conf = tmp_path / "nginx" / "nginx.conf"
    conf.parent.mkdir()
    conf.write_text(
        NGINX.format(
            tmp=conf.parent,
            token=token,
            grpc_port=grpc_port,
            http_port=http_port,
            metrics_port=metrics_port,
            grpc=hostport(served["grpc"]),
            http=hostport(served["http"]),
            metrics=hostport(served["metrics"]),
        )
    )
    proc = subprocess.Popen([nginx, "-c", str(conf), "-p", str(conf.parent)], stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{http_port}/v2"
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1)  # noqa: S310
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"nginx did not come up: {proc.stderr.read()}")
    yield {
        "token": token,
        "grpc": f"grpc://127.0.0.1:{grpc_port}",
        "http": f"http://127.0.0.1:{http_port}",
        "metrics": f"http://127.0.0.1:{metrics_port}",
    }
    proc.terminate()
    proc.wait(timeout=30)


@pytest.mark.parametrize("served", ["tiny:v1"], indirect=True)
def test_behind_a_proxy_that_wants_a_token_the_header_gets_through_and_is_written_nowhere(proxy, tmp_path):
    endpoints = ["--triton-url", proxy["grpc"], "--triton-http-url", proxy["http"], "--triton-metrics-url", proxy["metrics"]]
    (tmp_path / "without").mkdir()
    refused, _ = run_suites(tmp_path / "without", "functional and not properties", *endpoints)
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert [line for line in refused.stderr.splitlines() if line.strip()] == [
        f"ERROR: --triton-url {proxy['grpc']}: {proxy['http']}/v2 answered HTTP 401: the server wants credentials; "
        "pass them with --triton-header 'Authorization: Bearer ...'"
    ]
    (tmp_path / "with").mkdir()
    done, report = run_suites(
        tmp_path / "with",
        "functional and not properties",
        *endpoints,
        "--triton-header",
        f"Authorization: Bearer {proxy['token']}",
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    # the functional suite through the ensemble: 19 tests on the tiny V1 deployment (those that need trained weights
    # are left out), none failed
    assert report["summary"].get("failed", 0) == 0 and report["summary"]["passed"] >= 19, report["summary"]
    assert proxy["token"] not in done.stdout + done.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and proxy["token"].encode() in p.read_bytes()]
    assert written == [tmp_path / "nginx" / "nginx.conf"]  # the proxy's own config, nothing the harness wrote
