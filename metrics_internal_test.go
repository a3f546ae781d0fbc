package amigo

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPrometheusCoversStats gives every Stats field a value of its own and
// checks that each value appears in the Prometheus output: a counter added to
// Stats without a metric fails here.
func TestPrometheusCoversStats(t *testing.T) {
	var rd ctxReading
	v := reflect.ValueOf(&rd.stats).Elem()
	want := map[string]string{} // printed value -> field
	for i := 0; i < v.NumField(); i++ {
		f, n := v.Field(i), 1000+i
		switch {
		case f.Type() == reflect.TypeOf(time.Duration(0)):
			f.SetInt(int64(time.Duration(n) * time.Second))
		case f.CanUint():
			f.SetUint(uint64(n))
		case f.CanInt():
			f.SetInt(int64(n))
		default:
			t.Fatalf("Stats.%s: type %s not handled", v.Type().Field(i).Name, f.Type())
		}
		want[strconv.Itoa(n)] = v.Type().Field(i).Name
	}
	rd.unexpected = 999
	var buf bytes.Buffer
	writePrometheus(&buf, []clientSnapshot{{rank: 0, size: 2, adapters: map[string]int{"shm": 1}, ctx: []ctxReading{rd}}})
	seen := map[string]bool{}
	for _, line := range strings.Split(buf.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		seen[f[len(f)-1]] = true
	}
	for val, field := range want {
		if !seen[val] {
			t.Errorf("Stats.%s (set to %s) is in no Prometheus metric", field, val)
		}
	}
	if !seen["999"] {
		t.Error("the unexpected-bytes gauge is missing")
	}
}
