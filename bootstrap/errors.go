package bootstrap

import "errors"

// Errors that callers can test for with errors.Is. Every error returned by
// this package wraps one of these or a context error, and says which launcher
// operation failed.
var (
	// ErrNotFound: no rank put the key, or the put is not yet fenced.
	ErrNotFound = errors.New("bootstrap: key not found")
	// ErrValueTooLong: a value does not fit in the launcher's KVS even when
	// split across keys, or a key is too long for it.
	ErrValueTooLong = errors.New("bootstrap: value or key over the launcher's limit")
	// ErrProtocol: the launcher sent something malformed or unexpected, or
	// answered with an error code.
	ErrProtocol = errors.New("bootstrap: PMI protocol error")
	// ErrLauncherGone: the launcher closed the PMI connection (it died, or
	// it is tearing the job down).
	ErrLauncherGone = errors.New("bootstrap: launcher closed the PMI connection")
	// ErrTimeout: a bounded wait for the launcher expired.
	ErrTimeout = errors.New("bootstrap: timed out waiting for the launcher")
	// ErrClosed: the Job was closed (or aborted) before or during the call.
	ErrClosed = errors.New("bootstrap: job closed")
	// ErrEnv: the launcher's environment variables are inconsistent.
	ErrEnv = errors.New("bootstrap: bad PMI environment")
)
