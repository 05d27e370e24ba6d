// Package schemas is a planted violation: the wire contract importing a
// third-party module.
package schemas

import _ "github.com/apache/arrow-go/v18/arrow"
