// Package agent is the agent protocol, the policy-side text contract shared by
// everything that drives a model through a task (the llm-worker, the
// environment server): it builds the chat prompt for a task (upstream MedAgentGym's structure, with the
// action count and the data location right) and parses a model's reply into
// a schemas.Action.
//
// The parser accepts everything upstream's parse_llm_response accepts
// (```json fences, chatter around the object, </think> blocks, """triple
// quoted""" code) and more: raw control characters inside strings, trailing
// commas, invalid backslash escapes (regexes like "\d"), braces inside code
// and two objects in one reply (the first valid action wins). Think blocks
// are removed before any object is searched for, so braces in reasoning never
// break parsing (upstream slices braces first).
//
// What a model may send is bounded here too: CapReply caps a reply at
// MaxReplyBytes (a longer one is a format error kept as head and tail),
// MaxConversationBytes bounds the conversation sent per request, and
// Parse's work is linear in the reply.
//
// Everything here is a pure function: no I/O, no logging. There is exactly
// one prompt builder and one action parser in medgym, and they are here; the
// episode state machine that uses them is agent/episode.
package agent
