package cross

import (
	"testing"

	_ "github.com/medgym/medgym/services/dispatcher/internal/dispatch"
)

func TestNothing(t *testing.T) {}
