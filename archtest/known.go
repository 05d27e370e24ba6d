package archtest

// KnownViolations are the violations main still has, each with the issue
// that removes it. The test fails when one is gone: delete it here then.
var KnownViolations = []Violation{
	// trainer/internal/testenv composes the whole pipeline for the
	// trainer's integration tests; it moves to the systemtest module
	// (issue 14 item 4), and with it the trainer's requires.
	{RuleCrossService, Prefix + "services/trainer/internal/testenv", Prefix + "services/dispatcher/service"},
	{RuleCrossService, Prefix + "services/trainer/internal/testenv", Prefix + "services/llm-worker/fakellm"},
	{RuleCrossService, Prefix + "services/trainer/internal/testenv", Prefix + "services/llm-worker/service"},
	{RuleCrossService, Prefix + "services/trainer/internal/testenv", Prefix + "services/sandbox-worker/service"},
	{RuleCrossService, Prefix + "services/trainer/internal/testenv", Prefix + "services/verifier/service"},
	{RuleTrainerMod, Prefix + "services/trainer", Prefix + "services/dispatcher"},
	{RuleTrainerMod, Prefix + "services/trainer", Prefix + "services/llm-worker"},
	{RuleTrainerMod, Prefix + "services/trainer", Prefix + "services/sandbox-worker"},
	{RuleTrainerMod, Prefix + "services/trainer", Prefix + "services/verifier"},
}
