"""What every framework adapter shares (medgym._adapt): which task a dataset row of `medgym export` names, the server
and the session options, and clear errors for rows and settings that name none. No server needed."""

import pytest

from medgym import _adapt


def test_task_id_from_each_export_shape():
    assert _adapt.task_id({"task_id": "medcalcbench-7", "env_class": "medgym"}) == "medcalcbench-7"  # prompts/
    verl_row = {"extra_info": {"task_id": "eicu-3", "interaction_kwargs": {"name": "medgym"}},
                "reward_model": {"style": "rule", "ground_truth": "medgym://eicu/test/eicu-3"}}
    assert _adapt.task_id(verl_row) == "eicu-3"
    assert _adapt.task_id({"reward_model": {"ground_truth": "medgym://treqs/train/treqs-9"}}) == "treqs-9"
    assert _adapt.task_id({"label": "medgym://mimic_iii/test/mimic_iii-1"}) == "mimic_iii-1"  # OpenRLHF's label


@pytest.mark.parametrize("row, msg", [
    ({"prompt": []}, "names no task"),
    ({"label": "medgym://eicu/eicu-3"}, "malformed task reference"),
    ({"reward_model": {"ground_truth": "medgym://a//c"}}, "malformed task reference"),
])
def test_rows_without_a_task_are_refused(row, msg):
    with pytest.raises(ValueError, match=msg):
        _adapt.task_id(row)


def test_server_url_and_options(monkeypatch):
    monkeypatch.delenv("MEDGYM_URL", raising=False)
    with pytest.raises(ValueError, match="no server URL"):
        _adapt.base_url({})
    monkeypatch.setenv("MEDGYM_URL", "http://127.0.0.1:1")
    assert _adapt.base_url(None) == "http://127.0.0.1:1"
    assert _adapt.base_url({"base_url": "http://h:2"}) == "http://h:2"
    monkeypatch.setenv("MEDGYM_OPTIONS", '{"max_turns": 3, "end_on": "answer", "bogus": 1}')
    # later sources win; keys the API does not take (a row's task_id, dataset, ...) are not sent
    assert _adapt.options({"max_turns": 7, "task_id": "x", "seed": None}) == {"max_turns": 7, "end_on": "answer"}
    monkeypatch.setenv("MEDGYM_OPTIONS", "[1]")
    with pytest.raises(ValueError, match="JSON object"):
        _adapt.options()


# --- packaging: what installing and importing medgym does -----------------------------------------------------------

import json  # noqa: E402
import pickle  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

PKG = Path(__file__).resolve().parents[1]
OPENAPI = PKG.parents[1] / "services" / "env" / "openapi.json"


def test_option_keys_are_the_documents():
    """_adapt.OPTION_KEYS is every property of the API's Options schema, in its order: an option added to (or dropped
    from) services/env/openapi.json fails here until the adapters pass it on."""
    props = list(json.loads(OPENAPI.read_text())["components"]["schemas"]["Options"]["properties"])
    assert list(_adapt.OPTION_KEYS) == props


def test_every_option_reaches_the_session():
    every = {k: f"v-{k}" for k in _adapt.OPTION_KEYS}
    assert _adapt.options(every, {"task_id": "x", "dataset": "d"}) == every


def test_import_has_no_side_effects():
    """`import medgym` imports httpx and nothing else: no framework, no registration."""
    code = "import sys, medgym; print(json.dumps(sorted(m for m in ('gymnasium', 'datasets', 'torch', 'verl', 'verifiers', 'skyrl_gym', 'openrlhf') if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(PKG), "PATH": "/usr/bin:/bin"})
    assert json.loads(out.stdout) == []


def test_one_version_and_typed():
    import medgym
    from medgym import _version

    assert medgym.__version__ == _version.__version__
    pyproject = (PKG / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "medgym._version.__version__" in pyproject
    assert "\nversion =" not in pyproject.split("[tool.setuptools.dynamic]")[0]
    assert (PKG / "medgym" / "py.typed").is_file() and 'medgym = ["py.typed"]' in pyproject
    dep = next(line for line in pyproject.splitlines() if line.startswith("dependencies"))
    assert "httpx>=" in dep and "==" not in dep


def test_connection_error_renamed():
    import medgym
    from medgym import errors

    assert "ConnectionError" not in medgym.__all__ and "MedGymConnectionError" in medgym.__all__
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        old = medgym.ConnectionError
    assert old is errors.MedGymConnectionError and old is not ConnectionError
    assert any(issubclass(x.category, DeprecationWarning) for x in w)
    ns: dict = {}
    exec("from medgym import *", ns)  # noqa: S102
    assert "ConnectionError" not in ns


# --- verl's reward function, without a server --------------------------------------------------------------------------

def test_turn_score_carries_its_session_across_processes():
    from medgym._reward import TurnScore, session_of

    s = pickle.loads(pickle.dumps(TurnScore(0.0, "abc123")))
    assert s == 0.0 and isinstance(s, float) and s.session_id == "abc123"
    assert session_of({"turn_scores": [TurnScore(0.0, "s1"), TurnScore(1.0, "s1")]}) == "s1"
    assert session_of({"turn_scores": [0.5]}) is None  # another interaction's plain floats name no session
    assert session_of({"interaction_kwargs": {"name": "medgym", "session_id": "s2"}}) == "s2"
    assert session_of({"medgym_session_id": "s3"}) == "s3"


def test_compute_score_without_a_session(monkeypatch):
    from medgym._reward import compute_score

    monkeypatch.setenv("MEDGYM_URL", "http://127.0.0.1:1")  # never called
    row = {"interaction_kwargs": {"name": "medgym", "task_id": "treqs-1"}, "turn_scores": []}
    # verl cut the rollout before its first reply reached medgym: nothing was played, nothing to read
    assert compute_score("medgym/treqs", "text", "medgym://treqs/train/treqs-1", row) == 0.0
    with pytest.raises(ValueError, match="not medgym's"):
        compute_score("openai/gsm8k", "42", "42", {})
