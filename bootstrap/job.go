package bootstrap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"
)

// Job is this process's membership in a launched job: its rank, the job's
// size, a key-value space shared by the ranks, and the launcher's knowledge
// of which ranks share a host. The methods are safe for concurrent use;
// requests to the launcher are carried out one at a time.
type Job interface {
	// Rank is this process's rank, 0 <= Rank() < Size().
	Rank() int
	// Size is the number of ranks in the job.
	Size() int
	// Put stores value under key for this rank. It is visible to every
	// rank, this one included, after the next Fence. A key may be put once
	// per rank and job. Keys are 1 to 40 characters of [A-Za-z0-9_.-];
	// values may be any bytes, up to the launcher's limit (about 40 KiB
	// with Hydra and Slurm), else ErrValueTooLong.
	Put(key string, value []byte) error
	// Fence waits until every rank has called Fence, and makes all puts
	// made before it visible. It is collective: every rank must call it
	// the same number of times.
	Fence(ctx context.Context) error
	// Get returns the value that rank put under key before the last Fence,
	// or an error wrapping ErrNotFound.
	Get(ctx context.Context, rank int, key string) ([]byte, error)
	// Node returns the index of the host that rank runs on: two ranks with
	// the same Node share a host (and so can share memory). Node numbers
	// are small integers from 0; Node of an out-of-range rank is -1.
	Node(rank int) int
	// Secret is the job's shared secret, the same bytes on every rank: from
	// the launcher (amirun sets AMIGO_JOB_SECRET) or else made by rank 0
	// and distributed through the KVS when the job opened. The caller must
	// not modify it.
	Secret() []byte
	// Abort asks the launcher to kill every rank of the job, reporting
	// code and msg. It does not exit this process; call os.Exit after it.
	Abort(code int, msg string) error
	// Close tells the launcher this rank is done with PMI (finalize). A
	// call in progress on another goroutine fails with ErrClosed.
	Close() error
}

// Config tunes Open. The zero value is ready to use; each field can be
// overridden by the AMIGO_* environment variable named in its comment.
type Config struct {
	// PMI selects the protocol: "" or "auto" (PMI-2 when PMI_JOBID is
	// set, as Slurm does; otherwise PMI-1, which Hydra, Slurm and amirun
	// all serve), "1", "2", or "singleton" (ignore any launcher).
	// AMIGO_PMI.
	PMI string
	// RequestTimeout bounds every exchange with the launcher except a
	// fence. Zero means 30s. AMIGO_PMI_TIMEOUT (a Go duration).
	RequestTimeout time.Duration
	// FenceTimeout bounds a fence, which waits for the slowest rank.
	// Zero means 5m. AMIGO_PMI_FENCE_TIMEOUT.
	FenceTimeout time.Duration
	// Getenv reads the environment; nil means os.Getenv. Tests use it.
	Getenv func(string) string
}

// Defaults for Config's zero values.
const (
	DefaultRequestTimeout = 30 * time.Second
	DefaultFenceTimeout   = 5 * time.Minute
)

// SecretEnv names the variable through which a launcher hands the job
// secret to every rank, hex-encoded.
const SecretEnv = "AMIGO_JOB_SECRET"

// MaxSize is the largest job this package accepts from a launcher: a
// bound on what a broken launcher can make it allocate.
const MaxSize = 1 << 20

// SecretLen is the length of a secret that rank 0 generates.
const SecretLen = 32

// resolve fills in defaults and applies environment overrides.
func (c Config) resolve() (Config, error) {
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if v := c.Getenv("AMIGO_PMI"); v != "" {
		c.PMI = v
	}
	switch c.PMI {
	case "", "auto", "1", "2", "singleton":
	default:
		return c, fmt.Errorf("%w: AMIGO_PMI=%q: want auto, 1, 2 or singleton", ErrEnv, c.PMI)
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
		def  time.Duration
	}{{"AMIGO_PMI_TIMEOUT", &c.RequestTimeout, DefaultRequestTimeout}, {"AMIGO_PMI_FENCE_TIMEOUT", &c.FenceTimeout, DefaultFenceTimeout}} {
		if v := c.Getenv(d.name); v != "" {
			t, err := time.ParseDuration(v)
			if err != nil || t <= 0 {
				return c, fmt.Errorf("%w: %s=%q is not a positive duration", ErrEnv, d.name, v)
			}
			*d.dst = t
		}
		if *d.dst <= 0 {
			*d.dst = d.def
		}
	}
	return c, nil
}

// Open joins the job this process was launched into, choosing the protocol
// from the environment: PMI_FD or PMI_PORT mean a PMI launcher (Hydra,
// Slurm, amirun); neither means a singleton job of size 1. See Config.
func Open(ctx context.Context) (Job, error) { return OpenConfig(ctx, Config{}) }

// OpenConfig is Open with explicit settings.
func OpenConfig(ctx context.Context, cfg Config) (Job, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	env := cfg.Getenv
	secret, err := envSecret(env)
	if err != nil {
		return nil, err
	}
	fd, port := env("PMI_FD"), env("PMI_PORT")
	if cfg.PMI == "singleton" || (fd == "" && port == "" && (cfg.PMI == "" || cfg.PMI == "auto")) {
		return newSingleton(secret), nil
	}
	if fd == "" && port == "" {
		return nil, fmt.Errorf("%w: AMIGO_PMI=%s but neither PMI_FD nor PMI_PORT is set", ErrEnv, cfg.PMI)
	}
	version := cfg.PMI
	if version == "" || version == "auto" {
		version = "1"
		if env("PMI_JOBID") != "" {
			version = "2"
		}
	}
	var w *wireConn
	if fd != "" {
		w, err = dialFD(fd)
	} else {
		w, err = dialPort(ctx, port, cfg.RequestTimeout)
	}
	if err != nil {
		return nil, err
	}
	var c pmiClient
	if version == "2" {
		c, err = openPMI2(ctx, w, &cfg, env)
	} else {
		c, err = openPMI1(ctx, w, &cfg, env, fd == "")
	}
	if err != nil {
		w.close()
		return nil, fmt.Errorf("bootstrap: PMI-%s handshake: %w", version, err)
	}
	j := newPMIJob(c, &cfg, "pmi"+version)
	if err := j.setup(ctx, secret); err != nil {
		w.close()
		return nil, fmt.Errorf("bootstrap: PMI-%s job setup (rank %d of %d): %w", version, c.Rank(), c.Size(), err)
	}
	return j, nil
}

func envSecret(env func(string) string) ([]byte, error) {
	v := env(SecretEnv)
	if v == "" {
		return nil, nil
	}
	b, err := hex.DecodeString(strings.TrimSpace(v))
	if err != nil || len(b) < 16 || len(b) > 1024 {
		return nil, fmt.Errorf("%w: %s is not 16 to 1024 hex-encoded bytes", ErrEnv, SecretEnv)
	}
	return b, nil
}

// NewSecret returns SecretLen random bytes.
func NewSecret() []byte {
	b := make([]byte, SecretLen)
	rand.Read(b) // never fails on Linux (crypto/rand panics rather than return short)
	return b
}

// hostIdentity names this host: the hostname plus the kernel's boot id, so
// that two machines with the same name still differ.
func hostIdentity() string {
	h, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return h + "/" + strings.TrimSpace(string(boot))
}
