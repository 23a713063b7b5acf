"""free_port, wait_until_healthy, pem_pair and write_rsa_key_pair (gateway.testing)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.hashes import SHA256

from gateway.testing import free_port, pem_pair, wait_until_healthy, write_rsa_key_pair

# A server whose /healthz answers 200 and whose other paths answer 404.
SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_free_port_can_be_bound_on_loopback() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert 0 < port < 65536


def test_waiting_returns_once_the_health_path_answers_200() -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", process, timeout=60)
        with pytest.raises(RuntimeError, match=r"^/other did not answer 200 within 0\.5 s"):
            wait_until_healthy(f"http://127.0.0.1:{port}", process, timeout=0.5, path="/other")
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_waiting_on_a_process_that_exits_fails_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-c", "import sys; print('bad config'); sys.exit(3)"],
            stdout=output,
        )
    process.wait(timeout=30)
    with pytest.raises(RuntimeError, match=r"exited with 3 before /healthz answered\nbad config"):
        wait_until_healthy(f"http://127.0.0.1:{free_port()}", process, log=log)


def test_a_pem_pair_holds_a_private_key_and_its_public_key() -> None:
    private_pem, public_pem = pem_pair()
    private = serialization.load_pem_private_key(private_pem, password=None)
    public = serialization.load_pem_public_key(public_pem)
    assert isinstance(private, rsa.RSAPrivateKey)
    assert isinstance(public, rsa.RSAPublicKey)
    assert private.key_size == 2048
    signature = private.sign(b"m", padding.PKCS1v15(), SHA256())
    public.verify(signature, b"m", padding.PKCS1v15(), SHA256())  # raises if not its pair
    assert pem_pair(private) == (private_pem, public_pem)


def test_a_pem_pair_of_an_ec_key_holds_that_key_and_its_public_key() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    private_pem, public_pem = pem_pair(key)
    private = serialization.load_pem_private_key(private_pem, password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.private_numbers() == key.private_numbers()
    public = serialization.load_pem_public_key(public_pem)
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert public.public_numbers() == key.public_key().public_numbers()


def test_a_written_key_pair_is_two_pem_files_named_for_it(tmp_path: Path) -> None:
    private_path, public_path = write_rsa_key_pair(tmp_path, "signer")
    assert (private_path, public_path) == (tmp_path / "signer.pem", tmp_path / "signer.pub.pem")
    private = serialization.load_pem_private_key(private_path.read_bytes(), password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    assert pem_pair(private)[1] == public_path.read_bytes()
