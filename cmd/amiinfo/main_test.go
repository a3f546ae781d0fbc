package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The probe's peer process is this test binary run again.
func TestMain(m *testing.M) {
	if v := os.Getenv(probeEnv); v != "" {
		os.Exit(peer(v))
	}
	os.Exit(m.Run())
}

func TestText(t *testing.T) {
	t.Setenv("AMIGO_SHM_RDMA", "copy")
	var out, errb bytes.Buffer
	if code := run(nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{"AMIGO_TRANSPORT", "AMIGO_SHM_CMA", "# adapters", "shm\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if !strings.Contains(s, "AMIGO_SHM_RDMA             copy       environment") {
		t.Errorf("the environment's value is not shown:\n%s", s)
	}
	// CI's machine, and this one, let ranks map each other's segments and
	// wake each other.
	for _, p := range []string{"memfd", "segment-map", "futex-shared"} {
		if !strings.Contains(s, p+strings.Repeat(" ", 26-len(p))+" yes") {
			t.Errorf("probe %s did not succeed:\n%s", p, s)
		}
	}
}

func TestJSON(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Settings) == 0 || len(r.Probes) < 4 || r.Adapters[0] != "loop" {
		t.Fatalf("report %+v", r)
	}
	t.Setenv("AMIGO_SHM_RDMA", "teleport")
	if code := run(nil, &out, &errb); code != 1 || !strings.Contains(out.String(), "invalid") {
		t.Fatalf("an invalid setting: exit %d", code)
	}
}
