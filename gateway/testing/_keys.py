"""Key pairs in PEM, for tests and harnesses that sign bundles or tokens."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa


def pem_pair(
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | None = None,
) -> tuple[bytes, bytes]:
    """Return a key pair as PEM: the private key (PKCS#8, unencrypted) and its public key.

    Args:
        private: the RSA or EC key to encode; a new 2048-bit RSA key when None.

    Returns:
        ``(private_pem, public_pem)``, the public key as SubjectPublicKeyInfo.
    """
    key = private if private is not None else rsa.generate_private_key(65537, 2048)
    return (
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


def write_rsa_key_pair(folder: Path, name: str) -> tuple[Path, Path]:
    """Write a new RSA key pair (see :func:`pem_pair`) into ``folder``.

    Returns:
        The paths ``folder/<name>.pem`` (private) and ``folder/<name>.pub.pem`` (public).
    """
    private_pem, public_pem = pem_pair()
    private_path, public_path = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    private_path.write_bytes(private_pem)
    public_path.write_bytes(public_pem)
    return private_path, public_path
