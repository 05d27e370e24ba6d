package bus

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// Environment variables a service reads its NATS credentials from. Secrets
// never travel on the command line (where ps and /proc show them): the
// variables hold a user name, a password, or paths to secret files.
const (
	EnvNATSCreds        = "MEDGYM_NATS_CREDS"         // path of a .creds file (user JWT + nkey seed, from nsc)
	EnvNATSNKey         = "MEDGYM_NATS_NKEY"          // path of an nkey seed file (nk -gen user)
	EnvNATSUser         = "MEDGYM_NATS_USER"          // user name (with a password)
	EnvNATSPassword     = "MEDGYM_NATS_PASSWORD"      // password
	EnvNATSPasswordFile = "MEDGYM_NATS_PASSWORD_FILE" // path of a file holding the password (a container secret)
)

// Auth is how a service authenticates to NATS: at most one of a creds
// file, an nkey seed file, or a user and password. The zero value connects
// without credentials (the embedded server, or a server without
// authorisation).
type Auth struct {
	CredsFile string
	NKeyFile  string
	User      string
	Password  string
}

// AuthFromEnv reads Auth from the MEDGYM_NATS_* variables (see EnvNATSCreds
// and the others), reading MEDGYM_NATS_PASSWORD_FILE when it is set.
func AuthFromEnv(getenv func(string) string) (Auth, error) {
	a := Auth{CredsFile: getenv(EnvNATSCreds), NKeyFile: getenv(EnvNATSNKey), User: getenv(EnvNATSUser), Password: getenv(EnvNATSPassword)}
	if f := getenv(EnvNATSPasswordFile); f != "" {
		if a.Password != "" {
			return Auth{}, fmt.Errorf("NATS auth: set %s or %s, not both", EnvNATSPassword, EnvNATSPasswordFile)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return Auth{}, fmt.Errorf("NATS auth: %s: %w", EnvNATSPasswordFile, err)
		}
		a.Password = strings.TrimRight(string(b), "\r\n")
	}
	return a, a.Validate()
}

// Validate checks that at most one method is configured, completely.
func (a Auth) Validate() error {
	methods := 0
	for _, set := range []bool{a.CredsFile != "", a.NKeyFile != "", a.User != "" || a.Password != ""} {
		if set {
			methods++
		}
	}
	switch {
	case methods > 1:
		return fmt.Errorf("NATS auth: use one of %s, %s or %s+%s", EnvNATSCreds, EnvNATSNKey, EnvNATSUser, EnvNATSPassword)
	case a.User != "" && a.Password == "":
		return fmt.Errorf("NATS auth: user %q has no password (%s or %s)", a.User, EnvNATSPassword, EnvNATSPasswordFile)
	case a.User == "" && a.Password != "":
		return fmt.Errorf("NATS auth: a password without a user (%s)", EnvNATSUser)
	}
	return nil
}

// String describes the method for logs, never the secret.
func (a Auth) String() string {
	switch {
	case a.CredsFile != "":
		return "creds file " + a.CredsFile
	case a.NKeyFile != "":
		return "nkey seed file " + a.NKeyFile
	case a.User != "":
		return "user " + a.User + " with password"
	}
	return "none"
}

func (a Auth) options() ([]nats.Option, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	switch {
	case a.CredsFile != "":
		if _, err := os.Stat(a.CredsFile); err != nil {
			return nil, fmt.Errorf("NATS auth: creds file: %w", err)
		}
		return []nats.Option{nats.UserCredentials(a.CredsFile)}, nil
	case a.NKeyFile != "":
		opt, err := nats.NkeyOptionFromSeed(a.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("NATS auth: nkey seed file: %w", err)
		}
		return []nats.Option{opt}, nil
	case a.User != "":
		return []nats.Option{nats.UserInfo(a.User, a.Password)}, nil
	}
	return nil, nil
}

// WithAuth authenticates with a (see AuthFromEnv).
func WithAuth(a Auth) ConnectOption { return func(c *connectConfig) { c.auth = a } }

// isPermissionViolation reports whether err is the server refusing a
// publish or subscribe this user is not allowed.
func isPermissionViolation(err error) bool {
	return errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(fmt.Sprint(err)), "permissions violation")
}

// isOrderedCleanup reports whether err is the refusal of a consumer delete:
// an ordered consumer deletes its previous consumer when it resets (after
// an outage), which deploy/nats does not allow the roles that follow runs
// (a consumer's name is not its user's, so they could delete each other's);
// the server removes it once inactive.
func isOrderedCleanup(err error) bool {
	m := refusedSubject.FindStringSubmatch(err.Error())
	return m != nil && strings.HasPrefix(m[1], "$JS.API.CONSUMER.DELETE.")
}
