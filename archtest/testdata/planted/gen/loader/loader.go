// Package loader is a planted violation: a service package importing
// SQLite.
package loader

import _ "modernc.org/sqlite"
