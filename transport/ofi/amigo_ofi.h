// Declarations of the C side of package ofi (amigo_ofi.c).
#ifndef AMIGO_OFI_H
#define AMIGO_OFI_H
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>

struct fi_info *amigo_hints(const char *prov, int multi);
int amigo_getinfo(const char *prov, const char *node, int multi, struct fi_info **out);
int amigo_listinfo(struct fi_info **out);
const char *amigo_prov(struct fi_info *i);
const char *amigo_fabric_name(struct fi_info *i);
const char *amigo_domain_name(struct fi_info *i);
uint64_t amigo_caps(struct fi_info *i);
uint64_t amigo_mr_mode(struct fi_info *i);
uint64_t amigo_mode(struct fi_info *i);
size_t amigo_inject_size(struct fi_info *i);
size_t amigo_tx_size(struct fi_info *i);
size_t amigo_rx_size(struct fi_info *i);
uint64_t amigo_tx_order(struct fi_info *i);
int amigo_progress(struct fi_info *i);
size_t amigo_max_msg(struct fi_info *i);
size_t amigo_mr_key_size(struct fi_info *i);
struct fi_info *amigo_next(struct fi_info *i);
int amigo_open(struct fi_info *info, struct fid_fabric **fab, struct fid_domain **dom, struct fid_av **av);
int amigo_cq_open(struct fid_domain *dom, size_t size, int wantfd, struct fid_cq **cq, int *fd);
int amigo_ep_open(struct fid_domain *dom, struct fi_info *info, struct fid_av *av, struct fid_cq *txcq, struct fid_cq *rxcq, size_t min_multi, struct fid_ep **ep);
int amigo_getname(struct fid_ep *ep, void *buf, size_t *len);
int amigo_av_insert(struct fid_av *av, const void *addr, fi_addr_t *out);
int amigo_close(struct fid *f);
struct fid *amigo_fid_ep(struct fid_ep *e);
struct fid *amigo_fid_cq(struct fid_cq *c);
struct fid *amigo_fid_av(struct fid_av *a);
struct fid *amigo_fid_domain(struct fid_domain *d);
struct fid *amigo_fid_fabric(struct fid_fabric *f);
struct fid *amigo_fid_mr(struct fid_mr *m);
ssize_t amigo_recv(struct fid_ep *ep, uintptr_t buf, size_t len, uintptr_t desc, uintptr_t ctx);
ssize_t amigo_recv_multi(struct fid_ep *ep, uintptr_t buf, size_t len, uintptr_t desc, uintptr_t ctx);
ssize_t amigo_send(struct fid_ep *ep, uintptr_t hdr, size_t hlen, uintptr_t hdesc, uintptr_t data, size_t dlen, uintptr_t ddesc, fi_addr_t dest, uintptr_t ctx);
ssize_t amigo_inject(struct fid_ep *ep, uintptr_t hdr, size_t hlen, uintptr_t data, size_t dlen, fi_addr_t dest);
ssize_t amigo_inject_packet(uintptr_t ep, uintptr_t hdr, uintptr_t data, size_t dlen, uint64_t ack, fi_addr_t dest);
ssize_t amigo_rma(struct fid_ep *ep, int write, uintptr_t buf, size_t len, uintptr_t desc, fi_addr_t peer, uint64_t raddr, uint64_t key, uintptr_t ctx, uint64_t flags);
ssize_t amigo_cq_read(uintptr_t cq, uintptr_t e, size_t n);
int64_t amigo_cq_read2(uintptr_t tx, uintptr_t te, size_t ntx, uintptr_t rx, uintptr_t re, size_t nrx, int spin);
int64_t amigo_floor_pingpong(uintptr_t ep, uintptr_t rxcq, fi_addr_t dest, int64_t iters, int server,
		uintptr_t rxmem, size_t rxsize, uintptr_t desc, uintptr_t ctxbase, size_t stride, int multi, uint32_t rank);
void amigo_cq_cost(uintptr_t cq, int n);
// The message path's calls in the form package cstack calls them: one
// argument, a block of eight numbers (struct amigo_args).
struct amigo_args { uint64_t a[8]; };
int64_t amigo_args_cq_read2(struct amigo_args *a);
int64_t amigo_args_inject_packet(struct amigo_args *a);
uintptr_t amigo_args_fn(int which);
ssize_t amigo_cq_readerr(struct fid_cq *cq, uintptr_t *ctx, int *err, int *perr);
int amigo_mr_reg(struct fid_domain *dom, struct fid_ep *ep, uintptr_t buf, size_t len, uint64_t access, uint64_t reqkey, int bind, struct fid_mr **mr, uint64_t *key, uintptr_t *desc);
int amigo_trywait(struct fid_fabric *fab, struct fid_cq *a, struct fid_cq *b);
const char *amigo_strerror(int e);
char *amigo_tostr(uint64_t v, int t);
#endif
