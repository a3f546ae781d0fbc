package bootstrap

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/amigo-hpc/amigo/bootstrap/internal/pmiwire"
)

// LostRanks returns the ranks of j that its launcher reports lost: amirun
// --keep-going publishes each rank it lost (exited in failure, killed, or
// gone without finalize) while the others go on. It asks the launcher each
// time; a launcher that publishes nothing (Hydra, Slurm, a job of this
// process) gives none.
func LostRanks(ctx context.Context, j Job) ([]int, error) {
	pj, ok := j.(*pmiJob)
	if !ok {
		return nil, nil
	}
	if err := pj.lock(ctx); err != nil {
		return nil, err
	}
	defer pj.unlock()
	v, ok, err := pj.c.get(ctx, pmiwire.LostKey)
	if err != nil || !ok || v == "" {
		return nil, err
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		r, err := strconv.Atoi(f)
		if err != nil || r < 0 || r >= pj.c.Size() {
			return out, fmt.Errorf("%w: %s %q", ErrProtocol, pmiwire.LostKey, v)
		}
		out = append(out, r)
	}
	return out, nil
}
