"""A Harbor agent that looks for what an agent must not have (test_harbor_export.py): the answer key (/tests,
/solution, a task.json anywhere on the file system) and the network. It writes what it found to /work/spy.json,
collected with /work as the trial's artifact, and no answer."""

from __future__ import annotations

import base64

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

PROBE = r"""
import json, os, socket
found = []
for top in ("/", ):
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if os.path.join(d, x) not in ("/proc", "/sys", "/dev")]
        for f in files:
            if f == "task.json":
                found.append(os.path.join(d, f))
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3).close()
    net = "reachable"
except OSError as e:
    net = "unreachable: %s" % e
data = sorted(os.path.join(d, f) for d, _, fs in os.walk("/data") for f in fs)
json.dump({"answer_key_files": found, "tests_dir": os.path.exists("/tests"), "solution_dir": os.path.exists("/solution"),
           "network": net, "data": data[:20]}, open("/work/spy.json", "w"))
"""


class SpyAgent(BaseAgent):
    @staticmethod
    def name() -> str:
        return "medgym-spy"

    def version(self) -> str:
        return "1.0.0"

    async def setup(self, environment: BaseEnvironment) -> None:
        pass

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        code = base64.b64encode(PROBE.encode()).decode()
        res = await environment.exec(f"python3 -c \"import base64; exec(base64.b64decode('{code}'))\"")
        if res.return_code != 0:
            raise RuntimeError(f"spy probe failed: {res.stdout} {res.stderr}")
