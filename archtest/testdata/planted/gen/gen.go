// Package gen is a planted violation: a service package that reaches
// SQLite through another package.
package gen

import _ "github.com/medgym/medgym/services/planted/gen/loader"
