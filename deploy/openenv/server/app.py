"""medgym's OpenEnv server: a launcher of `medgym env serve`, the Go binary of the image server/Dockerfile builds.

It replaces itself with the server (no Python stays in between), which serves OpenEnv's protocol at the root
(--openenv-root: /ws, /reset, /step, /state, /schema, /metadata, /health, /mcp) beside medgym's own /v1 API, on
0.0.0.0:$PORT (8000, openenv.yaml's port). With MEDGYM_ENV_TOKEN or MEDGYM_ENV_TOKEN_FILE set (a Space secret) every
session-bearing request needs that bearer token; without one it serves open (--no-token), as a public Space whose
OpenEnv clients send none. --host and --port set the address; other arguments are passed on (e.g. --max-sessions 64).

    python -m server.app [--port 8000] [medgym env serve flags]     # or: uv run --project . server --port 8000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys


def command(argv: list[str], environ: dict[str, str]) -> list[str]:
    """The `medgym env serve` command line this launcher runs. --host and --port (OpenEnv's `server --port 8000`)
    make its --addr; every other argument is passed on."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--host", default=environ.get("HOST", "0.0.0.0"))
    parser.add_argument("--port", default=environ.get("PORT", "8000"))
    ours, rest = parser.parse_known_args(argv)
    binary = environ.get("MEDGYM_BIN") or shutil.which("medgym") or "medgym"
    state = environ.get("MEDGYM_STATE", "/tmp/medgym")
    cmd = [
        binary,
        "env",
        "serve",
        "--addr",
        f"{ours.host}:{ours.port}",
        "--openenv-root",
        "--library",
        environ.get("MEDGYM_LIBRARY", "/library"),
        "--data",
        environ.get("MEDGYM_DATA", "/data"),
        "--state",
        os.path.join(state, "state"),
        "--store",
        environ.get("MEDGYM_STORE", os.path.join(state, "runs")),
    ]
    if not (environ.get("MEDGYM_ENV_TOKEN") or environ.get("MEDGYM_ENV_TOKEN_FILE")):
        cmd.append("--no-token")
    return cmd + rest


def main() -> None:
    cmd = command(sys.argv[1:], dict(os.environ))
    os.makedirs(os.environ.get("MEDGYM_STATE", "/tmp/medgym"), mode=0o700, exist_ok=True)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
