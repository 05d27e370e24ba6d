// Package verify holds the verifier's scoring rules: whether one code
// execution (or an explicit answer) solves a task, and what a finished
// episode's outcome and reward are. It is plain Go over schemas and tasks
// values: no bus, no I/O.
//
// # Modes
//
// Strict (the default) is medgym's rule set. Upstream reproduces
// MedAgentGym's per-dataset validate() exactly, bugs included, so the
// paper's numbers can be compared. Every Check carries VersionFor(mode),
// e.g. "1.0.0+strict.3f2a9c1d": the semver plus a hash of the rule source,
// so rows scored under different rules are never mixed silently.
//
// # Strict rules
//
// A run is accepted only if its status is "ok" with exit code 0; stderr is
// never read. The answer is the last non-empty line of stdout, trimmed, with
// one pair of surrounding quotes (' " `) removed; for list answers it is the
// whole stdout. It is then compared by the truth's AnswerType (when the type
// is empty: list if Values are set, number if the answer is a number, else
// string):
//
//   - number: one decimal number ("25.2", "-3", ".5", "2.5e-05"; no
//     thousands separators, hex, inf or nan), optionally followed by unit
//     text that starts with a letter, %, ° or ‰ ("25.2 kg/m^2", "12%", "90
//     mL/min/1.73 m²") and contains no further standalone number ("5 or 6",
//     "4/5" and "12:30" are rejected).
//     Accepted when inside [Lower, Upper] (inclusive; either bound may be
//     absent) when a bound is set, else when |got-want| ≤ rel·|want| + 1e-9
//     with rel = Tolerance, default 1e-6.
//   - integer: a number as above; MedCalc-Bench's round(answer) == truth with
//     Python's round (half to even: 2.5 → 2).
//   - date: MM/DD/YYYY (one-digit month/day allowed) or YYYY-MM-DD; the same
//     calendar day.
//   - tuple: (weeks, days), exact: "(4, 2)", "[4, 2]", "4, 2", "4 weeks, 2
//     days", "('4 weeks', '2 days')" (MedCalc-Bench's form); units optional
//     but, when present, week(s) then day(s).
//   - boolean: true/false, 1/0, yes/no, any case.
//   - string: equal after lower-casing, trimming and collapsing white space.
//   - list: gold in Truth.Values (else Truth.Answer parsed as a list). The
//     answer is a JSON or Python list/tuple literal (rows of sqlite's
//     fetchall like [(1,), (2,)] are unwrapped, and so are one-argument
//     constructors like np.int64(3)), or one value per line (a list literal
//     on the last line wins, else every line counts, progress output
//     included), or one comma-separated line.
//     Lengths must match; elements compare numerically with the tolerance
//     when both are plain numbers, else as normalised strings; in order when
//     Truth.Ordered, else as a multiset.
//   - predictions (AnswerPredictions): the answer is a CSV file the run
//     wrote (Truth.Extra["output_file"], default predictions.csv), returned
//     by the sandbox in ExecResult.Files. Its header names the id and
//     prediction columns (Extra "id_column", "prediction_column", matched
//     case-insensitively; optional "score_column"). Accuracy is over every
//     gold row of Truth.Values ("id=label"): a gold id with no or an
//     unparsable prediction is wrong, unknown ids are ignored, the first
//     row of a repeated id counts; labels compare with True/False as 1/0
//     and numbers numerically. AUROC (with a score column) is the
//     Mann-Whitney share of (positive, negative) gold pairs ranked right,
//     ties 0.5, pairs with a missing score 0; the positive label is
//     Extra["positive_label"] (default "1"). Accepted when accuracy ≥
//     Extra["min_accuracy"] and, if Extra["min_auroc"] is set, AUROC ≥ it.
//     An explicit answer text is never accepted for these tasks; Score
//     re-checks the file of the accepted turn, or of the last code turn
//     that returned files.
//   - output (BioCoder): the agent's function ran inside the task's
//     context (TaskView.Harness, spliced by the sandbox); the whole stdout
//     must equal the reference solution's run the same way (Truth.Answer,
//     from `medgym tasks reference-outputs`), CRLF and trailing white space
//     at the end aside. Nothing is accepted when the reference output is
//     missing, failed, or empty (a silent reference cannot tell a right
//     function from a silent one), nor from an answer text: an episode
//     that ends on the answer action or the turn limit is scored by
//     re-checking its last code run (as predictions tasks are), so these
//     tasks are solvable under end_on answer, the default.
//
// # Abstention (tasks that offer it: tasks.Truth.Abstention, EHRSQL 2024)
//
// The reserved answer schemas.AbstainAnswer ("null", any case, quotes
// allowed) abstains, in both modes and however it arrives: as the answer
// action's text, or as the last line printed by a checked code run (the
// only way in upstream-compatible runs, which have no answer action; a
// crashed run does not abstain in strict mode). On an unanswerable task
// (Truth.Unanswerable) an abstention is accepted and any other answer is
// rejected; on an answerable task the answer is checked as usual, and an
// abstention is accepted as final too (Check.Accepted ends an
// end-on-accepted episode), so whether an episode stops on an abstention
// never tells the agent whether its question was answerable. Score then
// tells the two apart (table below). On tasks that do not offer abstention
// "null" is an ordinary (wrong) answer.
//
// # Upstream rules
//
// The env_message is rebuilt as upstream does: stdout + ("\n" + stderr if
// any); on a failed run every "^" is removed; a timeout's message is
// "Process timed out after X.XXs (timeout limit: 120s)" with no program
// output. Per dataset (Truth.Extra["upstream_rule"] overrides the name):
//
//   - medcalcbench: float(answer) >= 0.95*float(pred) or float(answer) <=
//     1.05*float(pred), Python float() semantics; any float passes, a date
//     truth or non-float output fails.
//   - mimic_iii, eicu, treqs: first gold value only; raw substring, or after
//     True/False/None normalisation, ", " split and ".0" strip.
//   - npowerai: Extra["estimate_target"] == "size": int(pred) == answer;
//     otherwise 0.99·answer < float(pred) < 1.01·answer (exclusive).
//   - ehr_seqsql: always accepted, crashes included.
//   - ehrcon: "true" in lower(pred) → true, elif "false" → false; equal to
//     the truth.
//   - biodsbench: accepted iff the run exited cleanly.
//   - biocoder: env_message equals the reference run's env_message
//     (Extra["reference_message"], else Truth.Answer) exactly: with a
//     silent reference any silent program passes.
//   - any predictions task (EHRSHOT, MIMIC-Extract style): on a clean run
//     with the file present the step is accepted ("done"), with accuracy
//     over the *predicted* rows (int(pred) == int(gold), unknown ids wrong,
//     missing gold rows not counted: one right prediction scores 1.0); an
//     evaluation error is accepted with accuracy 0; no file is not done.
//
// Other datasets, and every task that offers abstention (MedAgentGym has
// none), fall back to the strict rules, and the verdict says so.
// Upstream ignores the status except where noted, so a crashed run whose
// traceback contains the answer can pass. In both modes a sandbox_error or
// info status is never accepted: it is not an execution of the agent's code.
//
// # Outcomes (Score)
//
//	termination     re-check                         outcome        reward
//	accepted        accepted turn re-checks correct  correct        1
//	accepted        re-check fails / no execution    incorrect      0
//	answered        final answer correct             correct        1
//	answered        final answer wrong               incorrect      0
//	turn_limit      final answer correct             correct        1
//	turn_limit      otherwise                        turn_limit     0
//	closed          nothing is graded                turn_limit     0
//	loop                                             loop           0
//	format_error                                     format_error   0
//	timeout                                          timeout        0
//	sandbox_error                                    sandbox_error  0
//	infra_failure                                    infra_failure  0, Excluded
//	anything else                                    infra_failure  0, Excluded
//
// On a task that offers abstention, correct and incorrect are refined by
// the scored answer (the re-checked execution's, or the final answer):
//
//	scored answer     task           outcome               reward
//	"null"            unanswerable   abstained_correctly   1
//	"null"            answerable     abstained_wrongly     0
//	anything else     unanswerable   incorrect             −WrongAnswerPenalty
//	wrong             answerable     incorrect             −WrongAnswerPenalty
//
// and every other non-excluded outcome there (turn_limit, loop, timeout,
// format_error, sandbox_error) also gets −WrongAnswerPenalty, so that with
// penalty c the mean reward is EHRSQL 2024's reliability score RS(c).
// WrongAnswerPenalty is 0 by default (rewards stay in {0, 1}); the
// verifier's --wrong-answer-penalty sets it.
//
// For "accepted", the re-checked execution is the last turn the worker
// flagged as accepted, else the last turn that ran code. Options.FormatReward,
// when non-zero, is added to every non-excluded episode whose turns all
// parsed (correctness + format, as in the paper's GRPO setup).
// Options.GradedML makes a predictions task's reward its re-checked
// accuracy (upstream's EHRSHOT reward) instead of 1/0; the outcome is
// unchanged.
package verify
