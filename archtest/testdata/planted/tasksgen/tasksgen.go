// Package tasksgen is a planted violation: a service package importing
// the task generators.
package tasksgen

import _ "github.com/medgym/medgym/tasks/generate"
