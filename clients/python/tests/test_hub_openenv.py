"""medgym's OpenEnv hub package (deploy/openenv) checked as OpenEnv's hub would, with OpenEnv's own package (openenv
0.10.0, requirements/env-openenv.txt): `openenv validate --level static` passes; the layout is what its multi-mode
deployment check and `openenv push` expect (pyproject's server script, uv.lock, server/app.py's main, the README's
Space front matter; push's own staging moves the Dockerfile to the root and points FROM at a registry's copy of the
base); and the runtime level (the validator's own build of server/Dockerfile, its own collector playing
validation/runtime.json over /ws, its own graders and policy) passes against the container it builds from this
repository's images; the image, run, passes `openenv validate --url` at its root. Nothing is pushed or pulled.

The runtime level starts the container as OpenEnv's Docker provider does, with one change: the security options
bubblewrap needs (compose.yaml's sandbox-worker has the same), without which `medgym env serve` stops at start
naming bubblewrap. Skipped without openenv; the runtime test also without Docker or the hub image
(scripts/hub-image.sh). Run by scripts/test-hub.sh."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest

pytest.importorskip("openenv")
yaml = pytest.importorskip("yaml")

from openenv.cli._validation import get_deployment_modes, validate_multi_mode_deployment  # noqa: E402
from openenv.cli.commands.push import _prepare_staging_directory  # noqa: E402
from openenv.validation import Level, run_validation  # noqa: E402
from openenv.validation.providers import docker as docker_provider  # noqa: E402
from openenv.validation.types import CheckStatus, Verdict  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
PKG = ROOT / "deploy" / "openenv"
HUB_IMAGE = os.environ.get("MEDGYM_HUB_IMAGE", "medgym/env-hub:latest")


def openenv_cli() -> list[str]:
    exe = Path(sys.executable).with_name("openenv")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "openenv.cli"]


def test_static_level_passes():
    """`openenv validate deploy/openenv --level static`, the CLI a hub runs: exit 0, every check passed."""
    out = subprocess.run(
        [*openenv_cli(), "validate", str(PKG), "--level", "static", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["verdict"] == "pass", report
    assert {r["check_id"]: r["status"] for r in report["results"]} == {"static.manifest": "pass"}
    assert (
        report["manifest"]["name"] == "medgym" and report["manifest"]["execution"]["dockerfile"] == "server/Dockerfile"
    )


def test_layout_is_what_the_hub_expects():
    """The multi-mode deployment check finds nothing missing (every mode: docker, openenv serve, uv run, python
    -m); the manifest's port is the README card's app_port, the card is a Docker Space tagged openenv; uv.lock
    pins the openenv pyproject names."""
    ok, issues = validate_multi_mode_deployment(PKG)
    assert ok, issues
    assert get_deployment_modes(PKG) == {
        "docker": True,
        "openenv_serve": True,
        "uv_run": True,
        "python_module": True,
    }
    manifest = yaml.safe_load((PKG / "openenv.yaml").read_text())
    card = (PKG / "README.md").read_text()
    m = re.match(r"---\n(.*?)\n---\n", card, re.S)
    assert m, "README.md has no front matter"
    front = yaml.safe_load(m.group(1))
    assert front["sdk"] == "docker" and front["app_port"] == manifest["port"] == 8000 and "openenv" in front["tags"]
    assert "base_path" not in front  # no web interface: the Space's root is the API
    pyproject = tomllib.loads((PKG / "pyproject.toml").read_text())
    lock = tomllib.loads((PKG / "uv.lock").read_text())
    pinned = {p["name"]: p.get("version") for p in lock["package"]}
    assert pyproject["project"]["dependencies"] == ["openenv==0.10.0"] and pinned["openenv"] == "0.10.0"
    assert pinned[pyproject["project"]["name"]] == pyproject["project"]["version"]


def test_push_staging(tmp_path):
    """What `openenv push --no-interface --base-image REF` would upload, staged by push's own code: the Dockerfile
    at the root with FROM pointed at REF, no web interface switched on, the card and the launcher beside it."""
    ref = "registry.example/medgym/env-hub:0123456789abcdef"
    stage = tmp_path / "space"
    _prepare_staging_directory(PKG, "medgym", stage, [], base_image=ref, enable_interface=False)
    dockerfile = (stage / "Dockerfile").read_text()
    assert not (stage / "server" / "Dockerfile").exists()
    froms = [line for line in dockerfile.splitlines() if line.startswith("FROM")]
    assert froms == [f"FROM {ref}"] and "ENABLE_WEB_INTERFACE" not in dockerfile
    assert (stage / "README.md").read_text() == (PKG / "README.md").read_text()
    assert (stage / "server" / "app.py").exists() and (stage / "validation" / "runtime.json").exists()


def load_app():
    """server/app.py as `python -m server.app` imports it (the package folder on the path)."""
    sys.path.insert(0, str(PKG))
    try:
        from server import app
    finally:
        sys.path.remove(str(PKG))
    return app


def test_launcher_command():
    """server/app.py runs `medgym env serve` with the door at the root on 0.0.0.0:$PORT (--host and --port, as
    OpenEnv's `uv run server --port 8000`, override it): open without a token (--no-token), guarded with one
    (MEDGYM_ENV_TOKEN or its file, never on the command line); other arguments are passed on."""
    app = load_app()
    cmd = app.command(["--max-sessions", "8"], {"PORT": "8000"})
    assert cmd[1:3] == ["env", "serve"] and cmd[cmd.index("--addr") + 1] == "0.0.0.0:8000"
    assert "--openenv-root" in cmd and "--no-token" in cmd and cmd[-2:] == ["--max-sessions", "8"]
    assert cmd[cmd.index("--library") + 1] == "/library" and cmd[cmd.index("--data") + 1] == "/data"
    cmd = app.command(["--port", "9001", "--idle", "1m", "--host", "127.0.0.1"], {"PORT": "8000"})
    assert cmd[cmd.index("--addr") + 1] == "127.0.0.1:9001" and cmd[-2:] == ["--idle", "1m"]
    guarded = app.command([], {"PORT": "8000", "MEDGYM_ENV_TOKEN": "s3cret"})
    assert "--no-token" not in guarded and not any("s3cret" in a for a in guarded)
    assert "--no-token" not in app.command([], {"MEDGYM_ENV_TOKEN_FILE": "/run/secrets/token"})


def test_launcher_serves_without_docker(tmp_path):
    """The python-module deployment (`python -m server.app --port P`, what `uv run server` runs) on this host with
    bin/medgym and build/library: `openenv validate --url` of its root passes."""
    from openenv.cli._validation import validate_running_environment

    binary, library = ROOT / "bin" / "medgym", ROOT / "build" / "library"
    data = Path(os.environ.get("MEDGYM_DATA", ROOT.parent / "shared" / "data"))
    if not (binary.exists() and (library / "verifier").is_dir() and (data / "medcalcbench").is_dir()):
        pytest.skip("needs bin/medgym (make build), build/library (make library) and the data folder")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "MEDGYM_BIN": str(binary),
        "MEDGYM_LIBRARY": str(library),
        "MEDGYM_DATA": str(data),
        "MEDGYM_STATE": str(tmp_path / "medgym"),
    }
    for k in ("MEDGYM_ENV_TOKEN", "MEDGYM_ENV_TOKEN_FILE"):
        env.pop(k, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=PKG,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, proc)
        report = validate_running_environment(base)
        assert report["passed"], [c for c in report["criteria"] if not c["passed"]]
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def wait_healthy(base: str, proc: subprocess.Popen | None = None) -> None:
    """Waits for GET /health (the server's start: views, JetStream); a server that exits fails the test."""
    for _ in range(600):
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"{base}/health never answered 200")


# The options bubblewrap needs in a container: a user namespace (Docker's default seccomp and AppArmor profiles
# refuse unshare and mount) and a /proc it may mount (systempaths). No capability is added.
BWRAP_OPTS = [
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--security-opt",
    "systempaths=unconfined",
]


def docker_ready() -> str | None:
    if shutil.which("docker") is None:
        return "no docker client"
    if subprocess.run(["docker", "version"], capture_output=True, timeout=30).returncode != 0:
        return "no Docker engine answers"
    if subprocess.run(["docker", "image", "inspect", HUB_IMAGE], capture_output=True, timeout=30).returncode != 0:
        return f"{HUB_IMAGE} is missing (scripts/hub-image.sh)"
    return None


def test_runtime_level(monkeypatch, tmp_path):
    """`openenv validate deploy/openenv --level runtime` as run_validation does it, OpenEnv's Docker provider
    included: it snapshots the package, builds server/Dockerfile (FROM the local hub image: nothing is pulled),
    starts the container (read-only, every capability dropped, its own user, the declared CPU, memory and /tmp),
    waits for /health, plays validation/runtime.json over /ws (reset with an episode_id, a sandboxed code run, a
    wrong answer) and grades it: startup, the reward, the observations against /schema and the state contract
    pass. The one change: the subject's `docker create` gets BWRAP_OPTS. The network probe needs a helper image
    from a registry, so it is skipped here (a SKIP makes the verdict WARN: pass, exit 0)."""
    reason = docker_ready()
    if reason:
        pytest.skip(reason)
    real = docker_provider._command
    created: list[list[str]] = []

    def command(argv, timeout_s, max_bytes=docker_provider._MAX_OUTPUT):
        if argv[:2] == ["docker", "create"] and "--publish" in argv:  # the subject; helpers publish nothing
            argv = argv[:2] + BWRAP_OPTS + argv[2:]
            created.append(argv)
        return real(argv, timeout_s, max_bytes)

    monkeypatch.setattr(docker_provider, "_command", command)
    report = run_validation(PKG, max_level=Level.RUNTIME, artifacts_dir=tmp_path / "artifacts")
    results = {r.check_id: r for r in report.results}
    summary = {k: (r.status.value, r.evidence) for k, r in results.items()}
    assert created and "--cap-drop" in created[0] and "--read-only" in created[0], created
    for check in (
        "static.manifest",
        "runtime.startup",
        "runtime.reward_well_formed",
        "runtime.observation_schema",
        "runtime.state_contract",
    ):
        assert results[check].status is CheckStatus.PASS, summary
    assert results["runtime.network_policy"].status is CheckStatus.SKIP, summary
    assert report.verdict in (Verdict.PASS, Verdict.WARN), summary
    assert not any(r.status in (CheckStatus.FAIL, CheckStatus.ERROR) for r in report.results), summary
    # The episode as the collector recorded it: the code ran in the sandbox, the wrong answer scored 0, and the
    # state answered the reset's episode_id throughout.
    trace = json.loads((tmp_path / "artifacts" / "collector-trace.json").read_text())
    assert [e["operation"] for e in trace] == [
        "reset",
        "state",
        "step",
        "state",
        "step",
        "state",
    ]
    run, answer = trace[2]["response_json"]["data"], trace[4]["response_json"]["data"]
    assert run["observation"]["text"] == "2\n" and run["observation"]["info"]["exec_status"] == "ok" and not run["done"]
    assert answer["done"] and answer["reward"] == 0 and answer["observation"]["info"]["outcome"] == "incorrect"
    assert {e["response_json"]["data"]["episode_id"] for e in trace if e["operation"] == "state"} == {
        "medgym-runtime-probe"
    }


def test_image_serves_openenv_at_root(tmp_path):
    """The package's image, built as a Space builds it and run with the sandbox's options: `openenv validate --url`
    of its root passes (the simulation mode's endpoints, /health, /metadata, /schema, /mcp), and OpenEnv's
    GenericEnvClient given the bare host plays a code run, without a token."""
    reason = docker_ready()
    if reason:
        pytest.skip(reason)
    from openenv import GenericEnvClient
    from openenv.cli._validation import validate_running_environment

    image = subprocess.run(
        ["docker", "build", "-q", "-f", str(PKG / "server" / "Dockerfile"), str(PKG)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout.strip()
    name = f"medgym-hub-test-{os.getpid()}"
    subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--rm",
            "--name",
            name,
            *BWRAP_OPTS,
            "-p",
            "127.0.0.1::8000",
            image,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    try:
        port = (
            subprocess.run(
                ["docker", "port", name, "8000/tcp"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
            .stdout.split()[0]
            .rsplit(":", 1)[1]
        )
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base)
        report = validate_running_environment(base)
        assert report["passed"], [c for c in report["criteria"] if not c["passed"]]
        assert report["mode"] == "simulation"
        with GenericEnvClient(base_url=base).sync() as env:
            r = env.reset(task_id="npowerai-anova_power-0004", episode_id="root-check")
            assert not r.done and r.observation["tools"]
            r = env.step({"content": json.dumps({"action": "validate_code", "params": {"code": "print(6 * 7)"}})})
            assert r.observation["text"] == "42\n" and r.reward == 0 and not r.done
            assert env.state()["episode_id"] == "root-check"
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
