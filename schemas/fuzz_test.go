package schemas_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/medgym/medgym/schemas"
)

// roundTrip decodes data as T; a message that decodes must encode, and
// its encoding must decode to the same encoding again (the wire form is
// stable: what a service re-publishes is what it received).
func roundTrip[T schemas.Validator](t *testing.T, data []byte) {
	v, err := schemas.Decode[T](data)
	if err != nil {
		return
	}
	enc, err := schemas.Encode(v)
	if err != nil {
		t.Fatalf("%T decoded but does not encode: %v\ninput %q", v, err, data)
	}
	w, err := schemas.Decode[T](enc)
	if err != nil {
		t.Fatalf("%T: its own encoding does not decode: %v\nencoding %q", v, err, enc)
	}
	again, err := schemas.Encode(w)
	if err != nil || !bytes.Equal(enc, again) {
		t.Fatalf("%T: encoding unstable (%v)\nfirst  %q\nsecond %q", v, err, enc, again)
	}
}

// FuzzDecode feeds every wire message type the same bytes: no input
// panics a decoder, and whatever decodes and validates survives an encode
// and decode unchanged. Seeded with the golden wire files.
func FuzzDecode(f *testing.F) {
	golden, _ := filepath.Glob(filepath.Join("testdata", "*", "*.json"))
	for _, p := range golden {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip[schemas.TaskView](t, data)
		roundTrip[schemas.PolicySpec](t, data)
		roundTrip[schemas.EpisodeOptions](t, data)
		roundTrip[schemas.EpisodeRequest](t, data)
		roundTrip[schemas.EpisodeRef](t, data)
		roundTrip[schemas.ActionRequest](t, data)
		roundTrip[schemas.Observation](t, data)
		roundTrip[schemas.EpisodeState](t, data)
		roundTrip[schemas.EpisodeResult](t, data)
		roundTrip[schemas.Score](t, data)
		roundTrip[schemas.RunSpec](t, data)
		roundTrip[schemas.PolicyVersion](t, data)
	})
}
