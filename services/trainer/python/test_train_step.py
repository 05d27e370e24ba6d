"""Unit tests of train_step.py's data handling: fitting conversations into
--max-len without losing the question, and the per-mode recipes. Run by
`go test` (step_test.go) with the project venv, or directly:
python3 -m unittest discover -s services/trainer/python -p 'test_*.py'
"""

import argparse
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import train_step  # noqa: E402

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata")


def conversation(obs_len):
    msgs = [{"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "QUESTION: what is the creatinine clearance?"}]
    for i in range(3):
        msgs.append({"role": "assistant", "content": "ACTION %d" % i})
        msgs.append({"role": "user", "content": ("observation %d " % i) + "x" * obs_len})
    msgs.append({"role": "assistant", "content": "FINAL"})
    return msgs, [1 if m["role"] == "assistant" else 0 for m in msgs]


class FitTest(unittest.TestCase):
    def setUp(self):
        self.be = train_step.TinyBackend(argparse.Namespace(init=""))

    def test_short_conversation_is_untouched(self):
        msgs, mask = conversation(10)
        fit = train_step.Fitter(self.be, 8192)
        self.assertEqual(fit("a", msgs, mask), self.be.encode(msgs, mask))
        self.assertEqual((fit.elided, fit.dropped), (0, 0))

    def test_keeps_system_task_and_every_action(self):
        msgs, mask = conversation(400)
        full, _ = self.be.encode(msgs, mask)
        fit = train_step.Fitter(self.be, len(full) - 500)
        ids, lm = fit("a", msgs, mask)
        self.assertLessEqual(len(ids), len(full) - 500)
        text = bytes(i for i in ids if i < 256).decode()
        for keep in ("You are a careful agent.", "QUESTION: what is the creatinine clearance?",
                     "ACTION 0", "ACTION 1", "ACTION 2", "FINAL", train_step.ELIDED):
            self.assertIn(keep, text)
        self.assertNotIn("observation 0", text)  # the oldest observation went first
        self.assertIn("observation 2", text)
        self.assertEqual(fit.elided, 2)
        self.assertEqual(fit.dropped, 0)
        trained = bytes(i for i, k in zip(ids, lm) if k and i < 256).decode()
        self.assertEqual(trained, "ACTION 0\nACTION 1\nACTION 2\nFINAL\n")

    def test_drops_what_cannot_fit_and_never_cuts_the_head(self):
        msgs, mask = conversation(400)
        fit = train_step.Fitter(self.be, 40)  # less than the system prompt and task
        self.assertIsNone(fit("a", msgs, mask))
        self.assertEqual(fit.dropped, 1)
        self.assertEqual(fit.stats()["dropped"], 1)

    def test_step_counts_dropped_records(self):
        tr = train_step.Trainer(argparse.Namespace(backend="tiny", model="", init="", seed=0))
        recs = train_step.read_jsonl(os.path.join(TESTDATA, "toy_sft.jsonl"))
        m = tr.step("sft", recs, {"steps": 1, "max_len": 60})
        self.assertEqual(m["length"]["dropped"] + m.get("trained_records", 0), len(recs))
        self.assertGreater(m["length"]["dropped"], 0)


class RecipeTest(unittest.TestCase):
    def test_paper_defaults(self):
        self.assertEqual(train_step.recipe("hf", "sft", {})["lr"], 1e-4)
        d = train_step.recipe("hf", "dpo", {})
        self.assertEqual((d["lr"], d["beta"]), (5e-6, 0.1))
        g = train_step.recipe("hf", "grpo", {})
        self.assertEqual((g["lr"], g["kl_coef"]), (1e-5, 1e-3))
        self.assertEqual(g["max_len"], train_step.DEFAULT_MAX_LEN)

    def test_overrides_win_and_are_recorded(self):
        tr = train_step.Trainer(argparse.Namespace(backend="tiny", model="", init="", seed=0))
        recs = train_step.read_jsonl(os.path.join(TESTDATA, "toy_dpo.jsonl"))
        m = tr.step("dpo", recs, {"steps": 2, "beta": 0.3, "lr": None})
        self.assertEqual(m["recipe"]["beta"], 0.3)
        self.assertEqual(m["recipe"]["steps"], 2)
        self.assertEqual(m["recipe"]["lr"], train_step.RECIPES["tiny"]["dpo"]["lr"])
        self.assertEqual(m["steps"], 2)


class MicroBatchTest(unittest.TestCase):
    """Gradient accumulation: one sequence per forward/backward follows the
    whole-batch loss curve, so each micro-batch's share is normalised by
    whole-batch counts (a per-chunk mean would not sum to the batch loss)."""

    def curve(self, mode, agg, mb):
        import torch
        torch.manual_seed(0)
        tr = train_step.Trainer(argparse.Namespace(backend="tiny", model="", init="", seed=0))
        recs = train_step.read_jsonl(os.path.join(TESTDATA, "toy_%s.jsonl" % mode))
        return tr.step(mode, recs, {"steps": 4, "agg": agg, "micro_batch": mb}, evaluate=False)["loss"]

    def test_micro_batches_equal_the_whole_batch(self):
        for mode, agg in (("sft", "token"), ("dpo", "token"), ("grpo", "token"), ("grpo", "seq")):
            with self.subTest(mode=mode, agg=agg):
                whole, micro = self.curve(mode, agg, 0), self.curve(mode, agg, 1)
                self.assertEqual(len(whole), 4)
                for w, m in zip(whole, micro):
                    self.assertLessEqual(abs(w - m), 1e-4 * max(1.0, abs(w)), (whole, micro))
                self.assertNotEqual(whole[0], whole[3])


if __name__ == "__main__":
    unittest.main()
