package amigo

import (
	"fmt"
	"strings"
	"time"

	"github.com/amigo-hpc/amigo/transport/ofi"
)

// OFIConfig tunes the libfabric adapter (package transport/ofi), which
// carries traffic between hosts over a fabric's provider: verbs;ofi_rxm
// (InfiniBand, RoCE), cxi (Slingshot), efa, psm2 or opx (Omni-Path),
// tcp;ofi_rxm, shm. It exists only in builds with the tag ofi; without it,
// AMIGO_TRANSPORT=ofi is refused with that reason. Every field is
// overridden by the AMIGO_OFI_* variable named in its comment.
type OFIConfig struct {
	// Provider names the libfabric provider as fi_info does
	// (AMIGO_OFI_PROVIDER). Empty: with AMIGO_TRANSPORT=ofi, tcp;ofi_rxm;
	// with auto, the first provider of this machine that meets amigo's
	// needs and is not plain TCP or shared memory, if any.
	Provider string
	// Addr is the local address the endpoints bind to, for providers that
	// address by IP (AMIGO_OFI_ADDR). Empty: the local address of the
	// route to the launcher, where the rank was launched over the network.
	Addr string
	// Timeout bounds how long a link may wait for its peer before the peer
	// counts as dead (AMIGO_OFI_TIMEOUT, default 10s).
	Timeout time.Duration
	// CgoCalls makes every call into libfabric through cgo, where the
	// adapter otherwise makes the message path's two calls on a stack of
	// its own (ofi.Options.CgoCalls; AMIGO_OFI_CGOCALLS=1).
	CgoCalls bool
}

func init() {
	settings = append(settings,
		setting{
			name: "AMIGO_OFI_PROVIDER", doc: "libfabric, provider (e.g. tcp;ofi_rxm, shm, verbs;ofi_rxm, cxi, efa)",
			get: func(c *Config) string { return c.OFI.Provider },
			set: func(c *Config, v string) error { c.OFI.Provider = strings.TrimSpace(v); return nil },
		},
		setting{
			name: "AMIGO_OFI_ADDR", doc: "libfabric, local address of IP-addressed providers' endpoints",
			get: func(c *Config) string { return c.OFI.Addr },
			set: func(c *Config, v string) error { c.OFI.Addr = strings.TrimSpace(v); return nil },
		},
		setting{
			name: "AMIGO_OFI_TIMEOUT", doc: "libfabric, wait for a peer after which it is dead",
			get: func(c *Config) string { return c.OFI.Timeout.String() },
			set: func(c *Config, v string) error {
				d, err := time.ParseDuration(strings.TrimSpace(v))
				c.OFI.Timeout = d
				return err
			},
		},
		setting{
			name: "AMIGO_OFI_CGOCALLS", doc: "libfabric, 1: every call through cgo (0: the message path's on the adapter's own stack)",
			get: func(c *Config) string {
				if c.OFI.CgoCalls {
					return "1"
				}
				return "0"
			},
			set: func(c *Config, v string) error {
				switch strings.TrimSpace(v) {
				case "0":
					c.OFI.CgoCalls = false
				case "1":
					c.OFI.CgoCalls = true
				default:
					return fmt.Errorf("want 0 or 1")
				}
				return nil
			},
		},
	)
	resolvers = append(resolvers, resolveOFI)
}

// resolveOFI refuses AMIGO_TRANSPORT=ofi in a build without the adapter.
func resolveOFI(c *Config) error {
	if c.Transport == "ofi" && !ofi.Compiled {
		return fmt.Errorf("amigo: Transport ofi: %w", ofi.ErrNotCompiled)
	}
	if c.OFI.Timeout < 0 {
		return fmt.Errorf("amigo: OFI.Timeout %v: want 0 (default) or more", c.OFI.Timeout)
	}
	return nil
}
