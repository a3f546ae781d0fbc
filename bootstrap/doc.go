// Package bootstrap makes a process a member of a job: it learns its rank
// and the job's size from the launcher that started it, shares small values
// (endpoint addresses) with the other ranks through the launcher's
// key-value space (KVS), and learns which ranks share its host.
//
// It speaks the Process Management Interface that cluster launchers
// already serve — MPICH's Hydra (mpiexec.hydra), Slurm (srun --mpi=pmi2),
// and amigo's own amirun — in pure Go, with no C library:
//
//	job, err := bootstrap.Open(ctx)   // PMI-1, PMI-2 or singleton, from the environment
//	job.Put("addr", myAddress)        // visible to all after the fence
//	job.Fence(ctx)                    // collective
//	peer, err := job.Get(ctx, r, "addr")
//	sameHost := job.Node(r) == job.Node(job.Rank())
//	defer job.Close()                 // finalize
//
// NewLocal gives the same interface to ranks that are goroutines of one
// process, for tests and in-process worlds.
//
// # Choosing the protocol
//
// Open reads the environment the launcher set:
//
//  1. AMIGO_PMI=1|2|singleton forces a choice.
//  2. Neither PMI_FD nor PMI_PORT set: a singleton job, rank 0 of 1.
//  3. PMI_JOBID set (Slurm): PMI-2. Otherwise PMI-1, which Hydra, Slurm's
//     pmi2 plugin and amirun all serve.
//  4. PMI_FD names an inherited socket; else PMI_PORT (host:port) is dialled
//     and PMI_ID says who we are.
//
// # The PMI-1 flow (one text line per message, key=value pairs split by blanks)
//
//  1. With PMI_PORT only: send "cmd=initack pmiid=ID"; the launcher answers
//     "cmd=initack" and then "cmd=set size=N", "cmd=set rank=R",
//     "cmd=set debug=D". With PMI_FD, rank and size come from PMI_RANK and
//     PMI_SIZE.
//  2. "cmd=init pmi_version=1 pmi_subversion=1" → "cmd=response_to_init ... rc=0".
//  3. "cmd=get_maxes" → "cmd=maxes kvsname_max=.. keylen_max=.. vallen_max=..".
//  4. "cmd=get_my_kvsname" → "cmd=my_kvsname kvsname=NAME".
//  5. "cmd=get kvsname=NAME key=PMI_process_mapping": Hydra and Slurm keep
//     the host layout in the KVS.
//  6. Puts: "cmd=put kvsname=NAME key=K value=V" → "cmd=put_result rc=0".
//  7. Fence: "cmd=barrier_in" → "cmd=barrier_out" once every rank is in.
//  8. Gets: "cmd=get kvsname=NAME key=K" → "cmd=get_result rc=0 value=V";
//     a missing key is any non-zero rc (Hydra -1, Slurm 1).
//  9. "cmd=finalize" → "cmd=finalize_ack"; or "cmd=abort exitcode=C", which
//     gets no reply: the launcher kills the job.
//
// # The PMI-2 flow (length-prefixed frames)
//
//  1. Send "cmd=init pmi_version=2 pmi_subversion=0\n" in a single write
//     and wait for "cmd=response_to_init ... rc=0" before anything else:
//     Slurm's server dies if the init line is split or followed too soon.
//  2. Every later message is a 6-character decimal length, padded with
//     blanks on either side (Hydra pads left, Slurm right; both are
//     accepted), then "cmd=NAME;key=value;...;". Values cannot hold ';'.
//  3. "cmd=fullinit;pmijobid=J;pmirank=R;threaded=FALSE;" (all three, as
//     Slurm requires) → rank and size.
//  4. "cmd=job-getid;" → the job id used by kvs-get.
//  5. "cmd=info-getjobattr;key=PMI_process_mapping;" → the host layout.
//  6. "cmd=kvs-put;key=K;value=V;", "cmd=kvs-fence;",
//     "cmd=kvs-get;jobid=J;srcid=-1;key=K;" → "found=TRUE;value=V;" or
//     "found=FALSE;".
//  7. "cmd=finalize;", or "cmd=abort;isworldabort=TRUE;msg=...;" (no reply).
//
// Every reply must name the request ("<cmd>-response") and carry rc=0.
// Slurm does not answer commands it does not know.
//
// # After the handshake
//
//  1. PMI_process_mapping, e.g. "(vector,(0,2,2))" (nodes 0 and 1, two
//     ranks each), gives Node(r); a mapping describing fewer ranks than the
//     job repeats, as in MPICH. Without it, each rank puts its host identity
//     (hostname and kernel boot id) and Node numbers distinct identities.
//  2. The job secret comes from AMIGO_JOB_SECRET (hex, set by amirun), or
//     rank 0 puts 32 random bytes for the others to get.
//  3. If either had to travel through the KVS, Open fences once; under
//     amirun, Open costs no fence.
//
// # Keys and values
//
// A user key (1 to 40 characters of A-Z a-z 0-9 _ . -) put by rank r is
// stored as "key/r". Values are base64url without padding (no blank, ';'
// or '='), prefixed with their part count ("3:..."), and split across
// "key/r/1", "key/r/2", ... when longer than the launcher's value limit
// (vallen_max; 1024 for PMI-2), up to 64 parts: about 40 KiB with Hydra and
// Slurm. Longer values and keys fail with ErrValueTooLong before anything
// is sent.
//
// # Bounded waits
//
// Every read from the launcher has a deadline: Config.RequestTimeout
// (AMIGO_PMI_TIMEOUT, default 30s) for ordinary requests, FenceTimeout
// (AMIGO_PMI_FENCE_TIMEOUT, default 5m) for fences, and never later than
// the context's deadline; cancelling the context ends the wait. A launcher
// that closes the connection, even in the middle of a fence, gives
// ErrLauncherGone at once; a malformed reply gives ErrProtocol. After any
// such error the connection's state is unknown, so every later call on the
// Job fails with the same error.
package bootstrap
