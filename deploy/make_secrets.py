"""Make the deployment's secrets in deploy/secrets/: the audit chain key and one API key.

Run once before ``docker compose up``: ``python3 deploy/make_secrets.py [subject] [role]``.
Prints the new API key (only its SHA-256 is kept); never overwrites an existing secret.
The folder is git-ignored and private to you; the files are readable by the container's
user, which is how Compose mounts file secrets.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "secrets"


def _write(path: Path, text: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        print(f"{path} exists: kept", file=sys.stderr)
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return True


def main(argv: list[str]) -> int:
    """Make the secrets that do not exist yet."""
    subject = argv[0] if argv else "operator"
    role = argv[1] if len(argv) > 1 else "reader"
    FOLDER.mkdir(mode=0o700, exist_ok=True)
    _write(FOLDER / "audit.key", secrets.token_hex(32) + "\n")
    api_key = "gw-" + secrets.token_urlsafe(32)
    digest = hashlib.sha256(api_key.encode("utf-8")).hexdigest()
    entry = (
        "[[api_keys]]\n"
        f'sha256 = "{digest}"\n'
        f"context = {{ subject = {json.dumps(subject)}, roles = [{json.dumps(role)}], "
        'tenant = "acme" }\n'
    )
    if _write(FOLDER / "api_keys.toml", entry):
        print(f"API key for {subject}: {api_key}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
