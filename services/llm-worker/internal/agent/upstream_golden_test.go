package agent

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/medgym/medgym/tasks"
)

// upstreamPermitted is each upstream dataset's permitted_actions, in the
// order upstream's prompt lists them (shared/notes/upstream.md §2.1).
var upstreamPermitted = map[string][]string{
	"mimic_iii": {"request_info", "validate_code", "debug"}, "eicu": {"request_info", "validate_code", "debug"},
	"treqs": {"request_info", "validate_code", "debug"}, "ehr_seqsql": {"request_info", "validate_code", "debug"},
	"ehrcon":       {"request_info", "validate_code", "debug", "terminal"},
	"medcalcbench": {"validate_code", "debug", "terminal"}, "medagentbench": {"validate_code", "debug", "terminal"},
	"biocoder": {"validate_code", "debug", "terminal"}, "biodsbench": {"validate_code", "debug", "terminal"},
	"ehrshot": {"validate_code", "debug", "terminal"}, "mimic_extract": {"validate_code", "debug", "terminal"},
	"npowerai": {"validate_code", "debug", "terminal"},
}

// upstreamParams is each action's parameter set, exactly as upstream's
// parser requires it (§2.1, wire format).
var upstreamParams = map[string][]string{
	"request_info": {"data_path", "info_type", "keyterm"}, "validate_code": {"code"},
	"debug": {"code", "error_msg"}, "terminal": {"cmd"},
}

// upstreamFixes are the documented differences of medgym's first user
// message from upstream's goal (README, §4/§5): the patient note that
// upstream leaves out of MedCalcBench's prompt, and the read-only mount
// point of a task's data.
var upstreamFixes = map[string]string{
	"medcalcbench": "patient note (upstream stores it in self.context but never shows it)",
}

// TestUpstreamPromptGolden renders the prompt of one task of each upstream
// dataset (the tasks/testdata/upstream fixtures, loaded as --tasks-dir
// loads them) in upstream mode and checks it against upstream's structure:
// instruction, the action header, one numbered block per permitted action
// in upstream's order with upstream's parameter names, the code
// requirements, then the response format (one JSON template per action,
// joined by "or", upstream's closing rules), no answer action; the first
// user message is the goal plus only the documented fixes.
func TestUpstreamPromptGolden(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "..", "tasks", "testdata", "upstream")
	for _, ds := range tasks.UpstreamDatasets() {
		t.Run(ds, func(t *testing.T) {
			ts, err := tasks.LoadUpstream(t.Context(), tasks.Source{Dataset: ds, Split: "test", TasksDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			task := ts[0].View
			msgs := BuildMessages(task, PromptOptions{Upstream: true, AllowAnswer: true})
			if len(msgs) != 2 || msgs[0].Role != "system" || msgs[1].Role != "user" {
				t.Fatalf("roles %+v", msgs)
			}
			sys, goal := msgs[0].Content, msgs[1].Content
			want := upstreamPermitted[ds]

			// Sections, in order.
			at := func(s string) int {
				i := strings.Index(sys, s)
				if i < 0 {
					t.Fatalf("system prompt lacks %q:\n%s", s, sys)
				}
				return i
			}
			order := []int{at(strings.TrimSpace(task.Instruction)), at("You are allowed to take exactly three different actions:\n")}
			for i, a := range want {
				order = append(order, at("\n"+string(rune('1'+i))+". "+a+": "))
			}
			order = append(order, at("\nCode requirements:\n"), at("\nResponse format requirements, strictly one of the following:\n"))
			if !slices.IsSorted(order) || order[0] != 0 {
				t.Fatalf("sections out of order %v:\n%s", order, sys)
			}
			if strings.Contains(sys, "\n"+string(rune('1'+len(want)))+". ") {
				t.Fatalf("more than upstream's %d actions:\n%s", len(want), sys)
			}
			// Code requirements: request information first (EHR sets), `answer`, self-contained.
			req := sys[at("\nCode requirements:\n"):at("\nResponse format requirements")]
			for _, p := range []string{"variable named `answer`", "self-contained"} {
				if !strings.Contains(req, p) {
					t.Errorf("code requirements lack %q", p)
				}
			}
			if slices.Contains(want, "request_info") != strings.Contains(req, "Request all the information") {
				t.Errorf("code requirements and request_info disagree:\n%s", req)
			}
			// Response format: one template per action, joined by "or", then the closing rules.
			fmtPart := sys[at("\nResponse format requirements, strictly one of the following:\n")+len("\nResponse format requirements, strictly one of the following:\n"):]
			closing := "\nMust be valid JSON format.\nNo additional text or formatting allowed."
			if !strings.HasSuffix(fmtPart, closing) {
				t.Fatalf("format rules do not close with upstream's lines:\n%s", fmtPart)
			}
			templates := strings.Split(strings.TrimSuffix(fmtPart, closing), "\nor\n")
			if len(templates) != len(want) {
				t.Fatalf("%d templates, want %d:\n%s", len(templates), len(want), fmtPart)
			}
			for i, tpl := range templates {
				var m map[string]json.RawMessage
				if err := json.Unmarshal([]byte(tpl), &m); err != nil {
					t.Fatalf("template %q is not JSON: %v", tpl, err)
				}
				var name string
				var params map[string]json.RawMessage
				if len(m) != 2 || json.Unmarshal(m["action"], &name) != nil || json.Unmarshal(m["params"], &params) != nil {
					t.Fatalf("template %q: keys must be exactly action and params", tpl)
				}
				if name != want[i] || !slices.Equal(slices.Sorted(maps.Keys(params)), slices.Sorted(slices.Values(upstreamParams[name]))) {
					t.Errorf("template %d: %s %v, want %s %v", i, name, slices.Sorted(maps.Keys(params)), want[i], upstreamParams[want[i]])
				}
				// Each action block names upstream's parameters.
				block := sys[at("\n"+string(rune('1'+i))+". "+name+": "):]
				block = block[:strings.Index(block[1:], "\n   Feedback")+1]
				for _, p := range upstreamParams[name] {
					if !strings.Contains(block, p+" (") {
						t.Errorf("action %s block lacks parameter %s:\n%s", name, p, block)
					}
				}
			}
			if strings.Contains(sys, `"answer"`) || strings.Contains(sys, "answer action") {
				t.Errorf("upstream mode offers medgym's answer action:\n%s", sys)
			}

			// First user message: the goal, then only the documented fixes.
			if !strings.HasPrefix(goal, strings.TrimSpace(task.Question)) {
				t.Fatalf("goal does not open with the question: %q", goal)
			}
			rest := strings.TrimPrefix(goal, strings.TrimSpace(task.Question))
			if task.Context != "" {
				if upstreamFixes[ds] == "" {
					t.Errorf("%s: context in the goal is not a documented fix", ds)
				}
				ctx := "\n\nContext:\n" + strings.TrimSpace(task.Context)
				if !strings.HasPrefix(rest, ctx) {
					t.Fatalf("goal context %q", rest)
				}
				rest = strings.TrimPrefix(rest, ctx)
			} else if upstreamFixes[ds] != "" {
				t.Errorf("%s: documented fix %q missing", ds, upstreamFixes[ds])
			}
			if len(task.Resources) > 0 {
				mount := "\n\nThe data for this task is mounted read-only at:\n"
				for _, r := range task.Resources {
					mount += "- " + DataPath(r) + "\n"
				}
				mount += "Read the data from there; do not modify it."
				if rest != mount {
					t.Fatalf("goal data location %q, want %q", rest, mount)
				}
			} else if rest != "" {
				t.Fatalf("goal has undocumented text %q", rest)
			}
		})
	}
	if len(upstreamPermitted) != len(tasks.UpstreamDatasets()) {
		t.Errorf("golden table covers %d datasets, upstream has %d", len(upstreamPermitted), len(tasks.UpstreamDatasets()))
	}
}
