"""The unmodified E2B SDKs pointed at berth the way that lasts: E2B_DOMAIN alone, over TLS, with the API at
https://api.<domain> and every sandbox port at https://<port>-<id>.<domain> (berth's certificate authority
trusted through SSL_CERT_FILE; the names resolved by a DNS server of the test's own)."""
import os
import time

import httpx
from e2b import Sandbox
from e2b_code_interpreter import Sandbox as CodeSandbox


def test_commands_files_ports_and_code_by_domain():
    assert "E2B_API_URL" not in os.environ and "E2B_SANDBOX_URL" not in os.environ
    sb = Sandbox.create("base")
    try:
        assert sb.commands.run("echo over tls").stdout == "over tls\n"
        sb.files.write("site/t.txt", "served over tls")
        assert sb.files.read("site/t.txt") == "served over tls"
        assert sb.is_running()
        assert sb.sandbox_id in [s.sandbox_id for s in Sandbox.list().next_items()]
        sb.commands.run("cd /home/user/site && python3 -m http.server 8001 --bind 127.0.0.1", background=True)
        url = f"https://{sb.get_host(8001)}/t.txt"
        deadline, got = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            try:
                got = httpx.get(url, verify=os.environ["SSL_CERT_FILE"], timeout=10)
                if got.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        assert got is not None and got.text == "served over tls", got
    finally:
        assert sb.kill()
    ci = CodeSandbox.create()
    try:
        ci.run_code("x = 1")
        assert ci.run_code("x + 1").text == "2"
    finally:
        ci.kill()
