package schemas

import (
	"strings"
	"testing"
)

func TestLabelSetsValidate(t *testing.T) {
	o := DefaultOptions()
	o.LabelSets = []string{"medcalcbench@v1.0", "treqs@source", "ehrsql2024@medgym-1_b"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "medcalcbench", "@v1", "medcalcbench@", "medcalcbench@.hidden", "a.b@v1",
		"medcalcbench@v1/../../x", "medcalcbench@" + strings.Repeat("v", 65), "medcalcbench@v1@v2"} {
		o.LabelSets = []string{bad}
		if err := o.Validate(); err == nil {
			t.Errorf("label set %q accepted", bad)
		}
	}
	o.LabelSets = make([]string, MaxLabelSets+1)
	for i := range o.LabelSets {
		o.LabelSets[i] = "medcalcbench@v1.0"
	}
	if err := o.Validate(); err == nil {
		t.Error("too many label sets accepted")
	}
}
