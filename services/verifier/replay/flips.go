package replay

import (
	"sort"

	"github.com/medgym/medgym/schemas"
)

// Flips says what a re-score changes for training: which episodes' rewards
// moved, and what that does to the examples the trainer builds from them.
type Flips struct {
	// Up and Down count episodes whose reward rose or fell.
	Up, Down int
	// SFTIn and SFTOut count episodes that became solved or stopped being
	// solved (schemas.Outcome.Solved, the test the trainer's SFT and
	// rejection-sampling exports keep an episode by): those sets gain or
	// lose them.
	SFTIn, SFTOut int
	// Preference pairs are two episodes of one task with different
	// rewards, the higher one preferred (DPO). Reversed counts pairs
	// whose preferred episode changed sides, New pairs that now differ and
	// did not, Gone pairs that differed and now tie.
	PairsReversed, PairsNew, PairsGone int
	// Groups counts tasks (dataset, split, task id, as the trainer groups
	// them) with two or more episodes (a GRPO group) in
	// which some reward changed, so the group's advantages change;
	// GroupsSignFlip those in which some episode's advantage (its reward
	// against the group mean) changed sign.
	Groups, GroupsSignFlip int
	// Episodes lists the episodes whose reward changed, in report order.
	Episodes []string
}

// FlipsOf computes the flips of a re-score. Episodes that could not be
// re-scored are left out.
func FlipsOf(rep Report) Flips {
	var f Flips
	type ep struct{ before, after float64 }
	byTask := map[string][]ep{}
	var taskOrder []string
	for _, e := range rep.Episodes {
		if e.Failed() {
			continue
		}
		b, a := e.Recorded.Reward, e.Rescored.Reward
		if b != a {
			f.Episodes = append(f.Episodes, e.Recorded.EpisodeID)
			if a > b {
				f.Up++
			} else {
				f.Down++
			}
		}
		wasOK := schemas.Outcome(e.Recorded.Outcome).Solved()
		isOK := schemas.Outcome(e.Rescored.Outcome).Solved()
		switch {
		case isOK && !wasOK:
			f.SFTIn++
		case wasOK && !isOK:
			f.SFTOut++
		}
		key := e.Recorded.Dataset + "/" + e.Recorded.Split + "/" + e.Recorded.TaskID
		if _, seen := byTask[key]; !seen {
			taskOrder = append(taskOrder, key)
		}
		byTask[key] = append(byTask[key], ep{b, a})
	}
	sort.Strings(taskOrder)
	for _, k := range taskOrder {
		eps := byTask[k]
		if len(eps) < 2 {
			continue
		}
		changed := false
		var meanB, meanA float64
		for _, e := range eps {
			changed = changed || e.before != e.after
			meanB += e.before
			meanA += e.after
		}
		meanB /= float64(len(eps))
		meanA /= float64(len(eps))
		for i := range eps {
			for j := i + 1; j < len(eps); j++ {
				db := eps[i].before - eps[j].before
				da := eps[i].after - eps[j].after
				switch {
				case db == 0 && da != 0:
					f.PairsNew++
				case db != 0 && da == 0:
					f.PairsGone++
				case db*da < 0:
					f.PairsReversed++
				}
			}
		}
		if !changed {
			continue
		}
		f.Groups++
		for _, e := range eps {
			if sign(e.before-meanB) != sign(e.after-meanA) {
				f.GroupsSignFlip++
				break
			}
		}
	}
	return f
}

func sign(x float64) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}
