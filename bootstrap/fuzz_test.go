package bootstrap

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FuzzClient drives a whole client, PMI-1 or PMI-2, against a launcher
// whose replies come from the fuzzer: the input's first byte picks the
// protocol, the rest is split at '|' into one reply per request. Whatever
// the replies, the client must not panic and must finish in bounded time.
func FuzzClient(f *testing.F) {
	hydra1 := []string{
		"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
		"cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
		"cmd=my_kvsname kvsname=kvs_2657_0\n",
		"cmd=get_result rc=0 msg=success value=(vector,(0,1,2))\n",
		"cmd=put_result rc=0 msg=success\n",
		"cmd=barrier_out\n",
		"cmd=get_result rc=0 msg=success value=1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
		"cmd=put_result rc=0 msg=success\n",
		"cmd=barrier_out\n",
		"cmd=get_result rc=0 msg=success value=1:aGVsbG8\n",
		"cmd=finalize_ack\n",
	}
	slurm2 := []string{
		"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n",
		"114   cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=1;size=4;appnum=-1;debugged=FALSE;pmiverbose=FALSE;",
		"38    cmd=job-getid-response;rc=0;jobid=2.0;",
		"68    cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,4));",
		"28    cmd=kvs-fence-response;rc=0;",
		"85    cmd=kvs-get-response;rc=0;found=TRUE;value=1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA;",
		"26    cmd=kvs-put-response;rc=0;",
		"28    cmd=kvs-fence-response;rc=0;",
		"50    cmd=kvs-get-response;rc=0;found=TRUE;value=1:aGVsbG8;",
		"27    cmd=finalize-response;rc=0;",
	}
	f.Add([]byte("1" + strings.Join(hydra1, "|")))
	f.Add([]byte("2" + strings.Join(slurm2, "|")))
	f.Add([]byte("2" + strings.Join(slurm2[:3], "|") + "|999999"))
	f.Add([]byte("1cmd=response_to_init rc=0\n|cmd=maxes keylen_max=16 vallen_max=16\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 1 || len(in) > 1<<16 {
			return
		}
		v2 := in[0] == '2'
		replies := bytes.Split(in[1:], []byte("|"))
		var mu sync.Mutex
		next := 0
		_, fd := startFake(t, v2, func(string) string {
			mu.Lock()
			defer mu.Unlock()
			if next >= len(replies) {
				return ""
			}
			next++
			return string(replies[next-1])
		})
		env := map[string]string{"PMI_FD": strconv.Itoa(fd), "PMI_RANK": "1", "PMI_SIZE": "4", "AMIGO_PMI": "1"}
		if v2 {
			env["AMIGO_PMI"] = "2"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		j, err := OpenConfig(ctx, Config{Getenv: envMap(env), RequestTimeout: 30 * time.Millisecond, FenceTimeout: 30 * time.Millisecond})
		if err == nil {
			j.Rank()
			j.Node(j.Size() - 1)
			if j.Put("k", []byte("hello")) == nil && j.Fence(ctx) == nil {
				j.Get(ctx, 0, "k")
			}
			j.Close()
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("client took %v", d)
		}
	})
}
