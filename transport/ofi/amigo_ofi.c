//go:build ofi

#include "amigo_ofi.h"

// Every buffer crosses this boundary as a uintptr_t: memory the adapter
// mapped itself (rings, receive buffers, headers) or Go memory pinned with
// runtime.Pinner for as long as the provider may touch it.

#define AMIGO_FI_VERSION FI_VERSION(1, 17)

// amigo_hints returns the hints of an amigo endpoint: reliable datagrams,
// messages and RMA, sends delivered in order (FI_ORDER_SAS), the provider
// managing resources (FI_RM_ENABLED: a send to a receiver without a posted
// buffer waits, it is not dropped), and the memory-registration modes the
// adapter honours.
struct fi_info *amigo_hints(const char *prov, int multi) {
	struct fi_info *h = fi_allocinfo();
	if (!h) return NULL;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	if (multi) h->caps |= FI_MULTI_RECV;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->tx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->msg_order = FI_ORDER_SAS;
	h->domain_attr->resource_mgmt = FI_RM_ENABLED;
	h->domain_attr->threading = FI_THREAD_SAFE;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	h->domain_attr->av_type = FI_AV_TABLE;
	if (prov && prov[0]) {
		h->fabric_attr->prov_name = strdup(prov);
	}
	return h;
}

int amigo_getinfo(const char *prov, const char *node, int multi, struct fi_info **out) {
	struct fi_info *h = amigo_hints(prov, multi);
	if (!h) return -FI_ENOMEM;
	int rc = node && node[0] ? fi_getinfo(AMIGO_FI_VERSION, node, NULL, FI_SOURCE, h, out)
	                         : fi_getinfo(AMIGO_FI_VERSION, NULL, NULL, 0, h, out);
	fi_freeinfo(h);
	return rc;
}

// amigo_listinfo lists every provider's RDM endpoints, without amigo's
// requirements, for amiinfo.
int amigo_listinfo(struct fi_info **out) {
	struct fi_info *h = fi_allocinfo();
	if (!h) return -FI_ENOMEM;
	h->ep_attr->type = FI_EP_RDM;
	h->mode = ~0ULL;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	int rc = fi_getinfo(AMIGO_FI_VERSION, NULL, NULL, 0, h, out);
	fi_freeinfo(h);
	return rc;
}

const char *amigo_prov(struct fi_info *i) { return i->fabric_attr->prov_name; }
const char *amigo_fabric_name(struct fi_info *i) { return i->fabric_attr->name; }
const char *amigo_domain_name(struct fi_info *i) { return i->domain_attr->name; }
uint64_t amigo_caps(struct fi_info *i) { return i->caps; }
uint64_t amigo_mr_mode(struct fi_info *i) { return (uint64_t)i->domain_attr->mr_mode; }
uint64_t amigo_mode(struct fi_info *i) { return i->mode; }
size_t amigo_inject_size(struct fi_info *i) { return i->tx_attr->inject_size; }
size_t amigo_tx_size(struct fi_info *i) { return i->tx_attr->size; }
size_t amigo_rx_size(struct fi_info *i) { return i->rx_attr->size; }
uint64_t amigo_tx_order(struct fi_info *i) { return i->tx_attr->msg_order; }
int amigo_progress(struct fi_info *i) { return (int)i->domain_attr->data_progress; }
size_t amigo_max_msg(struct fi_info *i) { return i->ep_attr->max_msg_size; }
size_t amigo_mr_key_size(struct fi_info *i) { return i->domain_attr->mr_key_size; }
struct fi_info *amigo_next(struct fi_info *i) { return i->next; }

int amigo_open(struct fi_info *info, struct fid_fabric **fab, struct fid_domain **dom, struct fid_av **av) {
	int rc = fi_fabric(info->fabric_attr, fab, NULL);
	if (rc) return rc;
	rc = fi_domain(*fab, info, dom, NULL);
	if (rc) { fi_close(&(*fab)->fid); return rc; }
	struct fi_av_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.type = FI_AV_TABLE;
	rc = fi_av_open(*dom, &attr, av, NULL);
	if (rc) { fi_close(&(*dom)->fid); fi_close(&(*fab)->fid); return rc; }
	return 0;
}

int amigo_cq_open(struct fid_domain *dom, size_t size, int wantfd, struct fid_cq **cq, int *fd) {
	struct fi_cq_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.format = FI_CQ_FORMAT_DATA;
	attr.size = size;
	*fd = -1;
	if (wantfd) {
		attr.wait_obj = FI_WAIT_FD;
		if (fi_cq_open(dom, &attr, cq, NULL) == 0) {
			int w = -1;
			if (fi_control(&(*cq)->fid, FI_GETWAIT, &w) == 0 && w >= 0) {
				*fd = w;
				return 0;
			}
			fi_close(&(*cq)->fid);
		}
	}
	attr.wait_obj = FI_WAIT_NONE;
	return fi_cq_open(dom, &attr, cq, NULL);
}

int amigo_ep_open(struct fid_domain *dom, struct fi_info *info, struct fid_av *av,
		struct fid_cq *txcq, struct fid_cq *rxcq, size_t min_multi, struct fid_ep **ep) {
	int rc = fi_endpoint(dom, info, ep, NULL);
	if (rc) return rc;
	if ((rc = fi_ep_bind(*ep, &av->fid, 0)) ||
	    (rc = fi_ep_bind(*ep, &txcq->fid, FI_TRANSMIT)) ||
	    (rc = fi_ep_bind(*ep, &rxcq->fid, FI_RECV)) ||
	    (rc = fi_enable(*ep))) {
		fi_close(&(*ep)->fid);
		return rc;
	}
	// After fi_enable: some providers (ofi_rxm) keep the option in a
	// receive context that enabling makes.
	if (min_multi > 0 &&
	    (rc = fi_setopt(&(*ep)->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min_multi, sizeof min_multi))) {
		fi_close(&(*ep)->fid);
		return rc;
	}
	return 0;
}

int amigo_getname(struct fid_ep *ep, void *buf, size_t *len) {
	return fi_getname(&ep->fid, buf, len);
}

int amigo_av_insert(struct fid_av *av, const void *addr, fi_addr_t *out) {
	int n = fi_av_insert(av, addr, 1, out, 0, NULL);
	return n == 1 ? 0 : (n < 0 ? n : -FI_EINVAL);
}

int amigo_close(struct fid *f) { return fi_close(f); }
struct fid *amigo_fid_ep(struct fid_ep *e) { return &e->fid; }
struct fid *amigo_fid_cq(struct fid_cq *c) { return &c->fid; }
struct fid *amigo_fid_av(struct fid_av *a) { return &a->fid; }
struct fid *amigo_fid_domain(struct fid_domain *d) { return &d->fid; }
struct fid *amigo_fid_fabric(struct fid_fabric *f) { return &f->fid; }
struct fid *amigo_fid_mr(struct fid_mr *m) { return &m->fid; }

ssize_t amigo_recv(struct fid_ep *ep, uintptr_t buf, size_t len, uintptr_t desc, uintptr_t ctx) {
	return fi_recv(ep, (void *)buf, len, (void *)desc, FI_ADDR_UNSPEC, (void *)ctx);
}

// amigo_recv_multi posts buf as a multi-receive buffer (FI_MULTI_RECV):
// messages land in it one after the other until less than the endpoint's
// FI_OPT_MIN_MULTI_RECV is left, and the completion that says so carries
// the flag FI_MULTI_RECV.
ssize_t amigo_recv_multi(struct fid_ep *ep, uintptr_t buf, size_t len, uintptr_t desc, uintptr_t ctx) {
	struct iovec iov = {(void *)buf, len};
	void *d = (void *)desc;
	struct fi_msg msg = {.msg_iov = &iov, .desc = &d, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = (void *)ctx};
	return fi_recvmsg(ep, &msg, FI_MULTI_RECV);
}

// amigo_send sends a header and a payload as one message.
ssize_t amigo_send(struct fid_ep *ep, uintptr_t hdr, size_t hlen, uintptr_t hdesc,
		uintptr_t data, size_t dlen, uintptr_t ddesc, fi_addr_t dest, uintptr_t ctx) {
	struct iovec iov[2] = {{(void *)hdr, hlen}, {(void *)data, dlen}};
	void *desc[2] = {(void *)hdesc, (void *)ddesc};
	return fi_sendv(ep, iov, desc, dlen ? 2 : 1, dest, (void *)ctx);
}

// amigo_inject sends a header and a payload of at most the provider's
// inject size together, with no completion: the bytes are copied before it
// returns.
ssize_t amigo_inject(struct fid_ep *ep, uintptr_t hdr, size_t hlen, uintptr_t data, size_t dlen, fi_addr_t dest) {
	char buf[4096];
	if (hlen + dlen > sizeof buf) return -FI_EMSGSIZE;
	memcpy(buf, (void *)hdr, hlen);
	if (dlen) memcpy(buf + hlen, (void *)data, dlen);
	return fi_inject(ep, buf, hlen + dlen, dest);
}

// amigo_inject_packet is amigo_inject for a link's packet (a header of
// 16 bytes): the header's argument, bytes 8 to 15, carries ack, little
// endian (the packets of the peer's link this context took so far), in
// the copy only.
ssize_t amigo_inject_packet(uintptr_t ep, uintptr_t hdr, uintptr_t data, size_t dlen, uint64_t ack, fi_addr_t dest) {
	char buf[4096];
	if (16 + dlen > sizeof buf) return -FI_EMSGSIZE;
	memcpy(buf, (void *)hdr, 16);
	for (int i = 0; i < 8; i++) buf[8 + i] = (char)(ack >> (8 * i));
	if (dlen) memcpy(buf + 16, (void *)data, dlen);
	return fi_inject((struct fid_ep *)ep, buf, 16 + dlen, dest);
}

ssize_t amigo_rma(struct fid_ep *ep, int write, uintptr_t buf, size_t len, uintptr_t desc,
		fi_addr_t peer, uint64_t raddr, uint64_t key, uintptr_t ctx, uint64_t flags) {
	struct iovec iov = {(void *)buf, len};
	void *d = (void *)desc;
	struct fi_rma_iov rma = {raddr, len, key};
	struct fi_msg_rma msg;
	memset(&msg, 0, sizeof msg);
	msg.msg_iov = &iov;
	msg.desc = &d;
	msg.iov_count = 1;
	msg.addr = peer;
	msg.rma_iov = &rma;
	msg.rma_iov_count = 1;
	msg.context = (void *)ctx;
	if (write) return fi_writemsg(ep, &msg, flags | FI_COMPLETION);
	return fi_readmsg(ep, &msg, flags | FI_COMPLETION);
}

// The calls of the message path take the provider's objects as numbers
// (uintptr_t), like the buffers: cgo checks every pointer argument of a
// call, which costs on every poll.

ssize_t amigo_cq_read(uintptr_t cq, uintptr_t e, size_t n) {
	return fi_cq_read((struct fid_cq *)cq, (struct fi_cq_data_entry *)e, n);
}

// amigo_cq_read2 reads up to ntx completions of the transmit queue into
// te (none if ntx is 0) and up to nrx of the receive queue into re (none if
// nrx is 0) in one call, so that a poll of both queues crosses from Go to C
// once. With spin above 0 and both queues found empty, it reads them again,
// up to spin more times, until one has something: a port that waits for its
// peer looks at its queues as often as a loop in C can, instead of once per
// pass of the AMI's progress loop, which costs several reads. It returns
// both results of fi_cq_read, the transmit queue's in the low 32 bits and
// the receive queue's in the high 32, each -FI_EAGAIN for a queue not read.
int64_t amigo_cq_read2(uintptr_t tx, uintptr_t te, size_t ntx, uintptr_t rx, uintptr_t re, size_t nrx, int spin) {
	ssize_t a, b;
	for (;;) {
		a = ntx ? fi_cq_read((struct fid_cq *)tx, (struct fi_cq_data_entry *)te, ntx) : -FI_EAGAIN;
		b = nrx ? fi_cq_read((struct fid_cq *)rx, (struct fi_cq_data_entry *)re, nrx) : -FI_EAGAIN;
		if (a != -FI_EAGAIN || b != -FI_EAGAIN || spin-- <= 0) break;
	}
	return (int64_t)(uint64_t)(uint32_t)(int32_t)a | (int64_t)((uint64_t)(uint32_t)(int32_t)b << 32);
}

// amigo_args_cq_read2 and amigo_args_inject_packet are amigo_cq_read2
// and amigo_inject_packet taking their arguments from a block, in the
// order of theirs, for package cstack's calls (one argument each);
// amigo_args_fn gives their addresses (0 and 1).
int64_t amigo_args_cq_read2(struct amigo_args *a) {
	return amigo_cq_read2(a->a[0], a->a[1], a->a[2], a->a[3], a->a[4], a->a[5], (int)a->a[6]);
}

int64_t amigo_args_inject_packet(struct amigo_args *a) {
	return amigo_inject_packet(a->a[0], a->a[1], a->a[2], a->a[3], a->a[4], a->a[5]);
}

uintptr_t amigo_args_fn(int which) {
	return which == 0 ? (uintptr_t)amigo_args_cq_read2 : (uintptr_t)amigo_args_inject_packet;
}

// amigo_cq_cost reads cq n times for no entries (which runs the provider's
// progress and takes nothing), for the port to time a look at its queues.
void amigo_cq_cost(uintptr_t cq, int n) {
	struct fi_cq_data_entry e;
	for (int i = 0; i < n; i++) fi_cq_read((struct fid_cq *)cq, &e, 0);
}

ssize_t amigo_cq_readerr(struct fid_cq *cq, uintptr_t *ctx, int *err, int *perr) {
	struct fi_cq_err_entry e;
	memset(&e, 0, sizeof e);
	ssize_t rc = fi_cq_readerr(cq, &e, 0);
	if (rc < 0) return rc;
	*ctx = (uintptr_t)e.op_context;
	*err = e.err;
	*perr = e.prov_errno;
	return rc;
}

int amigo_mr_reg(struct fid_domain *dom, struct fid_ep *ep, uintptr_t buf, size_t len,
		uint64_t access, uint64_t reqkey, int bind, struct fid_mr **mr, uint64_t *key, uintptr_t *desc) {
	int rc = fi_mr_reg(dom, (void *)buf, len, access, 0, reqkey, 0, mr, NULL);
	if (rc) return rc;
	if (bind) {
		if ((rc = fi_mr_bind(*mr, &ep->fid, 0)) || (rc = fi_mr_enable(*mr))) {
			fi_close(&(*mr)->fid);
			return rc;
		}
	}
	*key = fi_mr_key(*mr);
	*desc = (uintptr_t)fi_mr_desc(*mr);
	return 0;
}

// amigo_trywait reports whether the port may sleep on its completion
// queues' file descriptors (0) or must read them first.
int amigo_trywait(struct fid_fabric *fab, struct fid_cq *a, struct fid_cq *b) {
	struct fid *f[2] = {&a->fid, &b->fid};
	return fi_trywait(fab, f, 2);
}

const char *amigo_strerror(int e) { return fi_strerror(e < 0 ? -e : e); }
char *amigo_tostr(uint64_t v, int t) {
	return fi_tostr(&v, (enum fi_type)t);
}

// amigo_floor_pingpong is the provider's floor for a port's ping-pong:
// iters round trips of a 24-byte message (a packet header of kind 1 and 8
// bytes) on the port's own endpoint, receive buffers and queues, driven by
// a loop in C with no call from Go between messages. The pinging side
// injects, then spins on its receive queue; the answering side (server)
// answers each message until one of 16 bytes (a header alone) ends it.
// Receive buffers go back to the provider as the port's Poll gives them
// back (multi: once the provider released one); a completion that only
// releases a buffer, with no message, is not counted as one. It returns
// the round trips made, or a negative libfabric error.
int64_t amigo_floor_pingpong(uintptr_t ep, uintptr_t rxcq, fi_addr_t dest, int64_t iters, int server,
		uintptr_t rxmem, size_t rxsize, uintptr_t desc, uintptr_t ctxbase, size_t stride, int multi, uint32_t rank) {
	char msg[24];
	memset(msg, 0, sizeof msg);
	msg[0] = 1;
	memcpy(msg + 4, &rank, 4);
	struct fi_cq_data_entry e;
	ssize_t rc, n;
	for (int64_t k = 0; k < iters; k++) {
		if (!server) {
			while ((rc = fi_inject((struct fid_ep *)ep, msg, sizeof msg, dest)) == -FI_EAGAIN)
				fi_cq_read((struct fid_cq *)rxcq, &e, 0);
			if (rc) return rc;
		}
		// A completion without a message (a multi-receive buffer given
		// back alone) is not an answer: its buffer goes back, and the
		// wait goes on.
		do {
			while ((n = fi_cq_read((struct fid_cq *)rxcq, &e, 1)) == -FI_EAGAIN);
			if (n < 0) return n;
			size_t i = ((uintptr_t)e.op_context - ctxbase) / stride;
			rc = 0;
			if (!multi) {
				rc = fi_recv((struct fid_ep *)ep, (void *)(rxmem + i * rxsize), rxsize, (void *)desc, FI_ADDR_UNSPEC, e.op_context);
			} else if (e.flags & FI_MULTI_RECV) {
				rc = amigo_recv_multi((struct fid_ep *)ep, rxmem + i * rxsize, rxsize, desc, (uintptr_t)e.op_context);
			}
			if (rc) return rc;
		} while (e.len == 0);
		if (server) {
			if (e.len == 16) return k;
			while ((rc = fi_inject((struct fid_ep *)ep, msg, sizeof msg, dest)) == -FI_EAGAIN)
				fi_cq_read((struct fid_cq *)rxcq, &e, 0);
			if (rc) return rc;
		}
	}
	return iters;
}
