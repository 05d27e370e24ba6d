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
