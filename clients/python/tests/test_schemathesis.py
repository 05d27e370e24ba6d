"""A bounded property-based run of schemathesis against the live server's /openapi.json: every operation, generated
valid and invalid requests, every response checked against the document (status codes, content type, schema), no
5xx for any input, and a stateful phase along the document's links."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# Findings of this run on the server as of the merge of envsrv's "SERVES" (reported to the lead): each is a
# (operation, schemathesis check code) pair; the test fails on any finding not listed here, so a new server bug
# fails it. Remove an entry when the server is fixed.
#   GET /v1/tasks ST201: a split (or dataset) longer than the document's maxLength 256 is answered 200, not 400.
#   POST /v1/sessions ST202: options.episode_timeout_sec 43.0 (a JSON Schema integer) is refused: Go decodes
#     numbers with a fraction part into int fields as an error.
#   POST /v1/sessions/{session_id}/step ST202: "exactly one of content and tool_calls" is only in the description;
#     the schema lets both through and the server answers 400 (the document should say it with oneOf/not).
KNOWN_SERVER_FINDINGS = {
    ("GET /v1/tasks", "ST201"),
    ("POST /v1/sessions", "ST202"),
    ("POST /v1/sessions/{session_id}/step", "ST202"),
}


def test_schemathesis(server, tmp_path):
    st = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    assert st, "schemathesis is not installed (requirements/env-base.txt)"
    examples = os.environ.get("MEDGYM_SCHEMATHESIS_EXAMPLES", "50")
    cmd = [
        st, "run", f"{server.url}/openapi.json",
        "--checks", "all",
        "--max-examples", examples,
        "--seed", "15",
        "--workers", "1",  # hypothesis 6.170's lambda-source cache is not thread safe: runtime errors with 2
        "--request-timeout", "60",
        "--suppress-health-check", "all",
        "--report", "junit", "--report-dir", str(tmp_path),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "NO_COLOR": "1"})
    print(out.stdout[-20000:])
    print(out.stderr[-5000:])
    reports = list(tmp_path.glob("junit-*.xml"))
    assert len(reports) == 1, f"schemathesis wrote no JUnit report (exit {out.returncode})"
    findings, errors = set(), []
    for case in ET.parse(reports[0]).getroot().iter("testcase"):
        for f in case.findall("failure"):
            findings.add((case.get("name"), f.get("message")))
        for e in case.findall("error"):
            errors.append(f"{case.get('name')}: {(e.text or '')[:500]}")
    assert not errors, "schemathesis could not run some operations:\n" + "\n".join(errors)
    new = findings - KNOWN_SERVER_FINDINGS
    assert not new, f"schemathesis found new server failures: {sorted(new)} (see its report above)"
    if findings:
        print(f"known server findings still present: {sorted(findings)}")
    assert out.returncode in (0, 1), f"schemathesis exited {out.returncode}"
