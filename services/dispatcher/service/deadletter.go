package service

import (
	"encoding/json"

	"github.com/medgym/medgym/schemas"
)

// DeadLetter is what the dispatcher reads from the dead-letter stream: the
// original payload, from which it recovers the episode.
type DeadLetter struct {
	Subject string
	Reason  string
	Request *schemas.EpisodeRequest
	Ref     *schemas.EpisodeRef
}

// UnmarshalJSON accepts the payload of any episode-pipeline message (a JSON
// object; the bus drops other bodies as junk before they get here).
func (d *DeadLetter) UnmarshalJSON(b []byte) error {
	var probe struct {
		RunID     string              `json:"run_id"`
		EpisodeID string              `json:"episode_id"`
		Ref       *schemas.EpisodeRef `json:"ref"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return err
	}
	switch {
	case probe.Ref != nil:
		d.Ref = probe.Ref
	case probe.RunID != "" && probe.EpisodeID != "":
		var req schemas.EpisodeRequest
		if err := json.Unmarshal(b, &req); err == nil && req.Validate() == nil {
			d.Request = &req
		} else {
			d.Ref = &schemas.EpisodeRef{RunID: probe.RunID, EpisodeID: probe.EpisodeID}
		}
	default:
		var res struct {
			Request schemas.EpisodeRequest `json:"request"`
		}
		if err := json.Unmarshal(b, &res); err == nil && res.Request.Validate() == nil {
			d.Request = &res.Request
		}
	}
	return nil
}

// Validate accepts every dead letter that decodes: one without a known
// episode is junk to the handler (bus.Junk), and the bus never dead-letters
// a dead letter again.
func (d DeadLetter) Validate() error { return nil }
