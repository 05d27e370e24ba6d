package dispatch

import (
	"slices"
	"strings"
)

// DefaultMaxInFlightTotal is the episodes a dispatcher keeps in flight
// across all the runs it drives when Config.MaxInFlightTotal is 0.
const DefaultMaxInFlightTotal = 1024

// fairShares divides total in-flight slots among runs asking for
// demands[run] slots each, max-min fair: no run gets more than it asks
// for, and the slots the smaller demands leave are split equally among
// the larger ones (the remainder of the split goes to the runs first in
// (demand, id) order, so the shares are deterministic). A run that asks
// for slots gets at least one, even when there are more such runs than
// slots: every run advances.
func fairShares(total int, demands map[string]int) map[string]int {
	ids := make([]string, 0, len(demands))
	for id := range demands {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if demands[a] != demands[b] {
			return demands[a] - demands[b]
		}
		return strings.Compare(a, b)
	})
	shares := make(map[string]int, len(ids))
	left := total
	for k, id := range ids {
		want := max(demands[id], 0)
		rest := len(ids) - k
		equal := left / rest
		if left%rest != 0 {
			equal++ // the first runs above the water line take the remainder
		}
		give := min(want, equal)
		if want > 0 {
			give = max(give, 1)
		}
		shares[id] = give
		left = max(left-give, 0)
	}
	return shares
}

// admission records the run's demand (the in-flight slots it could use
// now: its own max_in_flight, at most its unscored episodes) and returns
// how many of its episodes may be in flight: its demand without a
// dispatcher-wide bound, else its fair share of MaxInFlightTotal among the
// runs this dispatcher drives. A run's share shrinks when another run
// starts (it publishes nothing more until its episodes in flight drop
// below it) and grows when one ends (ending wakes the others), so a small
// run submitted after a large one waits behind at most MaxInFlightTotal of
// the large run's requests, whatever the large run's own max_in_flight.
func (d *Dispatcher) admission(rs *runState, demand int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	rs.demand = demand
	if d.cfg.MaxInFlightTotal < 0 {
		return demand
	}
	demands := make(map[string]int, len(d.active))
	for id, r := range d.active {
		demands[id] = r.demand
	}
	demands[rs.plan.Spec.RunID] = demand // a run stepped by the tests may be unregistered
	return fairShares(d.cfg.MaxInFlightTotal, demands)[rs.plan.Spec.RunID]
}

// wakeAll wakes every run loop this dispatcher drives (a run ended: the
// others' shares grow).
func (d *Dispatcher) wakeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, rs := range d.active {
		select {
		case rs.wake <- struct{}{}:
		default:
		}
	}
}
