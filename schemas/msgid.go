package schemas

// The message ids below are the ones whose every publisher must agree,
// byte for byte: the stream's duplicate window drops a message only when
// its id equals an earlier one's.

// RunMsgID is the Nats-Msg-Id of a run's RunSubmitted message: one per
// run id, so a spec resubmitted within the duplicate window (a retried
// `medgym run`, the trainer's loop) is dropped rather than planned twice.
func RunMsgID(runID string) string { return MsgID("run", runID) }

// ResultMsgID is the Nats-Msg-Id of an episode's EpisodeCompleted
// message. The llm-worker (an episode played to its end) and the
// dispatcher (an episode given up as a dead letter) both publish it, and
// the first one wins: an episode has one result.
func ResultMsgID(episodeID string) string { return MsgID(episodeID, "result") }
