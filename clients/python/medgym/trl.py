"""TRL adapter: medgym as the environment of ``trl.GRPOTrainer(environment_factory=...)`` (trl 1.16).

    from trl import GRPOConfig, GRPOTrainer
    from medgym.trl import MedGymToolEnv, prompt_dataset

    client = medgym.Client(URL)
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, args=GRPOConfig(...),
        train_dataset=prompt_dataset(client, [t["id"] for t in client.tasks(dataset="treqs", split="train", limit=64)],
                                     dataset="treqs", split="train"),
        # the tools the server offers for TREQS (no terminal), the tool-calling prompt
        environment_factory=MedGymToolEnv.factory(URL, dataset="treqs", split="train"),
    )

How TRL drives it (trl/trainer/grpo_trainer.py, 1.16.0): the trainer makes one environment per rollout from the
factory (instances are pooled and reused), calls ``reset(**row)`` with the dataset row before generating, exposes
the environment's public methods (all but ``reset`` and ``get_reward``) as tools in the prompt, parses the model's
tool calls itself (the chat template's response parser), calls the matching method and feeds its return value back
as the tool message, until the model answers without a tool call; then it calls ``get_reward()`` once per rollout
and logs it under the environment class's name (``rewards/MedGymToolEnv/mean``).

Mapping of medgym's actions: **one tool per action** (``validate_code``, ``debug``, ``terminal``,
``request_info``, ``answer``), each method sending the call to the server as an OpenAI ``tool_calls`` entry, which
the server maps one-to-one onto medgym's action and parses with medgym's own parser. Why not one raw
``act(content)`` tool: TRL already parses tool calls into typed arguments, so a raw tool would make the model write
medgym's JSON action inside a JSON string argument (code escaped twice, the commonest way small models break JSON),
and its schema would tell the model nothing about the actions; per-action tools carry the same schemas as the
server's ``tools`` (a test compares them), and a reply's text is never re-parsed on the client. The server stays the
only parser and the only judge: a malformed call comes back as medgym's observation, not a client error.

The prompt: the sessions run under ``prompt_mode: tools`` (the default of this environment and of
:func:`prompt_dataset`): the system prompt describes the tools and asks for one call per reply instead of medgym's
JSON reply format, and the tools TRL registers are only the task's permitted actions (TREQS tasks permit no
``terminal``): :meth:`MedGymToolEnv.factory` with ``dataset`` (or ``actions``) makes the environment class with
exactly the tools the server offers, and ``reset`` refuses a session whose tools are not the registered ones. A call
of an action the task does not permit is refused by the server as in JSON mode.

Token data: TRL's ``environment_factory`` calls the tools with their arguments only; the token ids and logprobs TRL
holds (``_tool_call_loop``'s completion ids) never reach the environment, so these sessions store no token ids (use
a client that generates itself, or OpenRLHF's or verl's adapter, for token-exact rows).

Every rollout is one server session: ``reset`` opens it (ending the previous one of this instance, if the trainer
left it open), ``get_reward`` ends it if the model stopped before the episode was done (the session is then scored
and stored), so each rollout is one stored row and the reward TRL logs is the verifier's.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from .client import Client, Session

ACTIONS = ("validate_code", "debug", "terminal", "request_info", "answer")


class MedGymToolEnv:
    """One medgym episode per rollout, for ``GRPOTrainer(environment_factory=MedGymToolEnv.factory(url, dataset=...))``.

    The dataset rows must carry ``task_id`` (and ``prompt``: the task's messages, see :func:`prompt_dataset`); a row
    may carry ``options`` (a dict of session options) too.
    """

    def __init__(self, client: Client, options: dict[str, Any] | None = None) -> None:
        self._client = client
        self._options = {"prompt_mode": "tools", **(options or {})}
        self._session: Session | None = None
        self._ended: dict[str, Any] | None = None

    @classmethod
    def factory(
        cls,
        base_url: str,
        *,
        token: str | None = None,
        options: dict[str, Any] | None = None,
        actions: list[str] | tuple[str, ...] | None = None,
        dataset: str | None = None,
        split: str | None = None,
    ) -> Callable[[], "MedGymToolEnv"]:
        """A zero-argument factory (what ``environment_factory`` takes); the environments share one Client. Their
        tools are ``actions``, else the tools the server offers for ``dataset``'s tasks (:func:`tool_names`), else
        all five."""
        client = Client(base_url, token=token)
        if actions is None and dataset is not None:
            actions = tool_names(client, dataset, split=split, options=options)
        env = cls.with_actions(actions) if actions is not None else cls
        connect = cls._connector(base_url, token, client)
        return lambda: env(connect(), options)

    @classmethod
    def _connector(cls, base_url: str, token: str | None, client: Client) -> Callable[[], Any]:
        """What each environment the factory makes gets as its client: here the factory's shared Client."""
        return lambda: client

    @classmethod
    def with_actions(cls, actions: list[str] | tuple[str, ...]) -> type["MedGymToolEnv"]:
        """This environment with only ``actions`` as tools (TRL registers every public method of the class)."""
        unknown = [a for a in actions if a not in ACTIONS]
        if unknown or not actions:
            raise ValueError(f"MedGymToolEnv: actions {list(actions)}: want a non-empty subset of {list(ACTIONS)}")
        # TRL lists the class's functions (inspect.getmembers(..., isfunction)): an action set to None is no tool. The
        # subclass keeps the name TRL logs the reward under.
        hidden: dict[str, Any] = {name: None for name in ACTIONS if name not in actions}
        return type(cls.__name__, (cls,), hidden)

    # TRL's hooks ----------------------------------------------------------------------------------------------

    def reset(self, **row: Any) -> str | None:
        """Open a session for the row's task. The prompt the model sees is the row's ``prompt``: when the row has one,
        it must be the session's (medgym's messages for the task), or this raises; nothing is appended to it."""
        self._finish()
        task_id = row.get("task_id")
        if not task_id:
            raise ValueError(f"MedGymToolEnv: a dataset row needs a task_id (got columns {sorted(row)})")
        opts = dict(self._options)
        opts.update(row.get("options") or {})
        self._session = self._client.session(task_id, dataset=row.get("dataset"), split=row.get("split"), **opts)
        self._ended = None
        offered = sorted(t["function"]["name"] for t in self._session.tools)
        registered = sorted(a for a in ACTIONS if callable(getattr(type(self), a, None)))
        if offered != registered:
            self._finish()
            raise ValueError(
                f"MedGymToolEnv: the session of {task_id} offers the tools {offered}, the environment registers "
                f"{registered}: make it with MedGymToolEnv.factory(url, dataset=...) or MedGymToolEnv.with_actions(...)"
            )
        prompt = row.get("prompt")
        if isinstance(prompt, list) and _plain(prompt) != _plain(self._session.messages):
            raise ValueError(
                f"MedGymToolEnv: the dataset's prompt of {task_id} is not the server's (medgym's prompt for the task "
                "under these options): build the dataset with prompt_dataset() or medgym's prompt-only export"
            )
        return None

    def get_reward(self) -> float:
        """The episode's reward (the verifier's score); ends the session first if the model stopped early."""
        return float(self._finish())

    # medgym's actions as tools (their docstrings are the tools' schemas: keep the Google style) -----------------

    def validate_code(self, code: str) -> str:
        """Run Python code in the task's sandbox and check its output.

        Args:
            code: The Python code to run; what it prints is the answer that is checked.

        Returns:
            The execution's output, or the checker's verdict.
        """
        return self._act("validate_code", {"code": code})

    def debug(self, code: str, error_msg: str) -> str:
        """Ask for help with code that failed.

        Args:
            code: The code that failed.
            error_msg: The error message it produced.

        Returns:
            Advice on the error.
        """
        return self._act("debug", {"code": code, "error_msg": error_msg})

    def terminal(self, cmd: str) -> str:
        """Run a shell command in the task's sandbox.

        Args:
            cmd: The command line to run.

        Returns:
            The command's output.
        """
        return self._act("terminal", {"cmd": cmd})

    def request_info(self, data_path: str, info_type: str, keyterm: str) -> str:
        """Look up information about the task's data.

        Args:
            data_path: The path of the data file or database.
            info_type: What to look up, e.g. column_names or column_values.
            keyterm: The term to look for.

        Returns:
            The information found.
        """
        return self._act("request_info", {"data_path": data_path, "info_type": info_type, "keyterm": keyterm})

    def answer(self, answer: str) -> str:
        """Give the final answer to the task.

        Args:
            answer: The answer.

        Returns:
            The verdict.
        """
        return self._act("answer", {"answer": answer})

    # Internals --------------------------------------------------------------------------------------------------

    def _act(self, name: str, arguments: dict[str, Any]) -> str:
        s = self._session
        if s is None:
            raise RuntimeError("MedGymToolEnv: a tool was called before reset()")
        if s.done or self._ended is not None:
            return "The episode is over: reply without calling a tool."
        call = {
            "id": f"call_{s.turn}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        r = s.step(tool_calls=[call])
        return r.observation

    def _finish(self) -> float:
        """End the current session (if open and not done) and return its reward; 0 when there was none."""
        s = self._session
        if s is None:
            return 0.0
        if self._ended is None:
            # DELETE scores and stores an unfinished episode; after done it answers the stored result.
            self._ended = s.close()
        return float(self._ended["reward"])


class MedGymOpenEnvToolEnv(MedGymToolEnv):
    """:class:`MedGymToolEnv` through the server's OpenEnv door (``/openenv``), with OpenEnv's own client (the
    ``openenv`` package's ``GenericEnvClient``): the way TRL's OpenEnv guide plugs an OpenEnv environment into
    ``GRPOTrainer(environment_factory=...)``, a class whose ``reset`` resets the OpenEnv environment and whose tools
    step it::

        environment_factory=MedGymOpenEnvToolEnv.factory("http://127.0.0.1:8700", dataset="treqs", split="train")

    Each instance holds one OpenEnv connection per episode: ``reset`` opens it (OpenEnv's ``reset`` with the row's
    ``task_id``, ``dataset``, ``split`` and the session options), each tool is OpenEnv's ``step`` with the call as
    ``tool_calls`` (the door's step body), and ``get_reward`` ends the episode with OpenEnv's ``close`` (the door ends
    an unfinished session as scored and stored) and reads the reward the server stored for it (``DELETE
    /v1/sessions/{id}``: the one call OpenEnv's client has no counterpart for)."""

    def __init__(self, door: "_OpenEnvDoor", options: dict[str, Any] | None = None) -> None:
        super().__init__(door, options)  # type: ignore[arg-type]

    @classmethod
    def _connector(cls, base_url: str, token: str | None, client: Client) -> Callable[[], Any]:
        """Each environment gets its own door to ``base_url``'s /openenv (:meth:`MedGymToolEnv.factory` passes
        ``base_url``, the server's; the tools are chosen there from the server's prompt metadata: no session)."""
        return lambda: _OpenEnvDoor(base_url, token)


class _OpenEnvDoor:
    """What :class:`MedGymToolEnv` asks of its client (``session``), over OpenEnv's client and the /openenv door."""

    def __init__(self, base_url: str, token: str | None) -> None:
        self.base_url, self.token = base_url.rstrip("/"), token

    def session(self, task_id: str, *, dataset: str | None = None, split: str | None = None,
                **options: Any) -> "_OpenEnvSession":
        from openenv import GenericEnvClient

        if self.token:
            raise ValueError("MedGymOpenEnvToolEnv: OpenEnv's client sends no bearer token; use MedGymToolEnv")
        env = GenericEnvClient(base_url=self.base_url + "/openenv").sync().connect()
        try:
            r = env.reset(task_id=task_id, dataset=dataset, split=split, options=options)
        except BaseException:
            env.close()
            raise
        return _OpenEnvSession(env, r.observation, Client(self.base_url))


class _OpenEnvSession:
    """One medgym session over an OpenEnv connection: ``tools``, ``messages``, ``turn``, ``done``, ``step``,
    ``close`` as :class:`medgym.Session` has them."""

    def __init__(self, env: Any, observation: dict[str, Any], client: Client) -> None:
        self.env, self.client = env, client
        self.id: str = observation["session_id"]
        self.tools: list[dict[str, Any]] = list(observation.get("tools") or [])
        self.messages: list[dict[str, Any]] = list(observation.get("messages") or [])
        self.turn: int = int(observation.get("turn") or 0)
        self.done = False
        self.reward = 0.0

    def step(self, *, tool_calls: list[dict[str, Any]]) -> Any:
        r = self.env.step({"tool_calls": tool_calls})
        obs = r.observation
        self.turn = int(obs.get("turn", self.turn + 1))
        self.done = bool(r.done or obs.get("truncated"))
        self.reward = float(r.reward or 0.0)
        return _Observation(str(obs.get("text") or ""))

    def close(self) -> dict[str, Any]:
        """End the episode: OpenEnv's close (the door ends an unfinished session, scored and stored), then the
        stored result (``DELETE /v1/sessions/{id}``, which answers an ended session's stored reward and outcome, and
        ends it first should the close not have reached the server yet)."""
        try:
            self.env.close()
        finally:
            with self.client as c:
                return c.close_session(self.id)


class _Observation:
    def __init__(self, observation: str) -> None:
        self.observation = observation


def _plain(messages: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    return [(m.get("role"), m.get("content")) for m in messages]


def prompt_dataset(
    client: Client,
    task_ids: list[str],
    *,
    dataset: str | None = None,
    split: str | None = None,
    options: dict[str, Any] | None = None,
    run_id: str = "prompts",
) -> Any:
    """A ``datasets.Dataset`` for GRPOTrainer: one row per task with ``prompt`` (the task's messages exactly as the
    server builds them under ``options``), ``task_id``, ``dataset`` and ``split``.

    Each prompt comes from ``GET /v1/tasks/{id}/prompt`` (the same prompt builder as a session; no session is opened
    and nothing is stored). Of ``options`` only ``end_on`` (whether the answer action is offered) and ``prompt_mode``
    (default tools, as :class:`MedGymToolEnv`'s sessions) are used; ``run_id`` is unused.
    """
    import datasets

    opts = options or {}
    rows = []
    for tid in task_ids:
        p = client.prompt(tid, dataset=dataset, split=split, end_on=opts.get("end_on"),
                          prompt_mode=opts.get("prompt_mode", "tools"))
        rows.append(
            {
                "prompt": [{"role": m["role"], "content": m["content"]} for m in p["messages"]],
                "task_id": tid,
                "dataset": p["task"].get("dataset", dataset),
                "split": p["task"].get("split", split),
            }
        )
    if not rows:
        raise ValueError("prompt_dataset: no task ids given")
    return datasets.Dataset.from_list(rows)


def tool_names(
    client: Client, dataset: str, *, split: str | None = None, options: dict[str, Any] | None = None
) -> list[str]:
    """The tools the server offers for the tasks of ``dataset`` (and ``split``) under ``options``: their permitted
    actions, in the server's order (one dataset's tasks permit the same ones)."""
    opts = {"prompt_mode": "tools", **(options or {})}
    tasks = client.tasks(dataset=dataset, split=split, limit=1)
    if not tasks:
        raise ValueError(f"medgym: no task of dataset {dataset!r} (split {split!r})")
    t = tasks[0]
    p = client.prompt(t["id"], dataset=dataset, split=t.get("split", split), end_on=opts.get("end_on"),
                      prompt_mode=opts["prompt_mode"])
    return [tool["function"]["name"] for tool in p["tools"]]


__all__ = ["ACTIONS", "MedGymOpenEnvToolEnv", "MedGymToolEnv", "prompt_dataset", "tool_names"]
