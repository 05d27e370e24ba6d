package replay

import (
	"reflect"
	"testing"

	"github.com/medgym/medgym/schemas/parquet"
)

func TestFlipsOf(t *testing.T) {
	ep := func(id, task string, before, after float64) Episode {
		out := func(r float64) string {
			if r == 1 {
				return "correct"
			}
			return "incorrect"
		}
		rec := parquet.Row{EpisodeID: id, TaskID: task, Dataset: "d", Reward: before, Outcome: out(before)}
		re := rec
		re.Reward, re.Outcome = after, out(after)
		return Episode{Recorded: rec, Rescored: re}
	}
	failed := ep("x", "t9", 0, 1)
	failed.Changes = []Change{{Field: "error"}}
	rep := Report{Episodes: []Episode{
		// t1: the correct episode becomes wrong and the wrong one right:
		// its pair reverses, the group's advantages change sign.
		ep("a", "t1", 1, 0), ep("b", "t1", 0, 1),
		// t2: a tie becomes a preference (a new pair).
		ep("c", "t2", 0, 1), ep("d", "t2", 0, 0),
		// t3: two preferences become ties (pairs gone); the unchanged
		// correct episodes lose their positive advantage (the mean is 1).
		ep("e", "t3", 1, 1), ep("f", "t3", 0, 1), ep("g", "t3", 1, 1),
		// t4: nothing changes; a single episode is no group.
		ep("h", "t4", 1, 1), ep("i", "t4", 0, 0), ep("j", "t5", 0, 1),
		failed,
	}}
	f := FlipsOf(rep)
	want := Flips{Up: 4, Down: 1, SFTIn: 4, SFTOut: 1, PairsReversed: 1, PairsNew: 1, PairsGone: 2, Groups: 3, GroupsSignFlip: 3}
	if got := f.Episodes; len(got) != 5 || got[0] != "a" || got[4] != "j" {
		t.Errorf("changed episodes %v", got)
	}
	f.Episodes = nil
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("flips %+v\nwant  %+v", f, want)
	}
}
