//go:build ofi

package ofi

/*
#cgo LDFLAGS: -lfabric
#include "amigo_ofi.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
)

// Compiled reports whether this build has the adapter (the build tag ofi).
const Compiled = true

// fiError is an error a libfabric call returned.
type fiError struct {
	call string
	code int
}

func (e *fiError) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.call, C.GoString(C.amigo_strerror(C.int(e.code))), e.code)
}

// errAgain is -FI_EAGAIN: the provider has no room now; retry after
// reading completions.
const errAgain = -C.FI_EAGAIN

func fiErr(call string, rc C.ssize_t) error {
	if rc >= 0 {
		return nil
	}
	return &fiError{call: call, code: int(-rc)}
}

// ErrProvider reports a provider that lacks what the adapter needs.
var ErrProvider = errors.New("ofi: provider unsuitable")

// Provider describes one provider's reliable-datagram endpoints as
// fi_getinfo reports them.
type Provider struct {
	Name   string // e.g. "tcp;ofi_rxm"
	Fabric string
	Domain string
	Caps   string // capabilities, fi_tostr
	MRMode string // FI_MR_* bits the provider asks the application to honour
	Order  string // message ordering of transmits
	Inject int    // largest message sent without a completion
	// Usable says whether amigo's requirements (messages, RMA, ordered
	// sends, managed resources) are met.
	Usable bool
}

type infoView struct{ p *C.struct_fi_info }

func (i infoView) provider() Provider {
	return Provider{
		Name:   C.GoString(C.amigo_prov(i.p)),
		Fabric: C.GoString(C.amigo_fabric_name(i.p)),
		Domain: C.GoString(C.amigo_domain_name(i.p)),
		Caps:   tostr(uint64(C.amigo_caps(i.p)), C.FI_TYPE_CAPS),
		MRMode: tostr(uint64(C.amigo_mr_mode(i.p)), C.FI_TYPE_MR_MODE),
		Order:  tostr(uint64(C.amigo_tx_order(i.p)), C.FI_TYPE_MSG_ORDER),
		Inject: int(C.amigo_inject_size(i.p)),
	}
}

func tostr(v uint64, t C.int) string {
	s := C.amigo_tostr(C.uint64_t(v), t)
	if s == nil {
		return ""
	}
	return strings.TrimSpace(C.GoString(s))
}

// Providers lists every provider with reliable-datagram endpoints on this
// machine, once per provider and domain, and says which meet amigo's
// requirements.
func Providers() ([]Provider, error) {
	var all *C.struct_fi_info
	if rc := C.amigo_listinfo(&all); rc != 0 {
		if rc == -C.FI_ENODATA {
			return nil, nil
		}
		return nil, fiErr("fi_getinfo", C.ssize_t(rc))
	}
	defer C.fi_freeinfo(all)
	var out []Provider
	seen := map[string]bool{}
	for i := all; i != nil; i = C.amigo_next(i) {
		p := infoView{i}.provider()
		if seen[p.Name+"/"+p.Domain] {
			continue
		}
		seen[p.Name+"/"+p.Domain] = true
		out = append(out, p)
	}
	for k := range out {
		var good *C.struct_fi_info
		info, err := getinfo(out[k].Name, "", true)
		if err == nil {
			good = info
			out[k].Usable = true
			C.fi_freeinfo(good)
		}
	}
	return out, nil
}

// ErrNotCompiled reports a use of the adapter in a build without it; this
// build has it.
var ErrNotCompiled = errors.New("ofi: the libfabric adapter is not compiled in (build with -tags ofi)")
