//go:build !ofi

package ofi

import "errors"

// Compiled reports whether this build has the adapter: false, the build
// did not have the tag ofi.
const Compiled = false

// ErrNotCompiled reports a use of the adapter in a build without it.
var ErrNotCompiled = errors.New("ofi: the libfabric adapter is not compiled in (build with -tags ofi)")
