package bus

import (
	"cmp"
	"fmt"
	"strings"
)

// InboxPrefix is the prefix of the inboxes (the reply subjects of
// requests, pull requests and ordered consumers' deliveries) of a
// connection that logs in as user: _INBOX.<user>. deploy/nats lets each
// user subscribe to its own (_INBOX.<user>.>) only, so no user reads the
// answers to another's requests (docs/adr/0036).
func InboxPrefix(user string) string { return "_INBOX." + user }

// WithRole names the role this connection plays: a user of deploy/nats
// (dispatcher, llm-worker, sandbox-worker, verifier, env-server, client,
// trainer). A connection whose credentials name no user (an nkey or a
// creds file) takes its inbox prefix from it (InboxPrefix); a password
// login takes it from its user name.
func WithRole(role string) ConnectOption { return func(c *connectConfig) { c.role = role } }

// inboxOwner is the token of this connection's inbox prefix: the user it
// logs in as, or else its role; "" keeps nats.go's default (_INBOX.<NUID>:
// no credentials, or an nkey login that names no role, as admin's).
func (c connectConfig) inboxOwner() (string, error) {
	owner := cmp.Or(c.auth.User, c.role)
	if owner != "" && (strings.ContainsAny(owner, ".*> \t\r\n") || owner != strings.TrimSpace(owner)) {
		return "", fmt.Errorf("NATS user %q cannot name an inbox prefix (_INBOX.<user>): use a user name without '.', '*', '>' or spaces", owner)
	}
	return owner, nil
}
