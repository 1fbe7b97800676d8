/*
 * Reference posting loops for `cargo xtask bench post`, linked into the Rust benchmark so all
 * run side by side in one process.
 *
 * c_post_mlx5dv: RDMA WRITE WQEs posted as rdma-core's provider posts them
 * (providers/mlx5/qp.c _mlx5_post_send, for an RC QP, no inline, no fence): per work request
 * the queue-overflow and SGE-count checks, bytes 8..11 of the control segment zeroed, imm and
 * fm_ce_se, the remote-address segment, the data segments (skipping empty SGEs, wrapping at
 * the ring's end), then opmod_idx_opcode and qpn_ds, wrid[idx] and wqe_head[idx], cur_post
 * advanced by ceil(ds / 4) blocks. Then the doorbell as post_send_db rings it: head += nreq,
 * udma_to_device_barrier, dbrec[MLX5_SND_DBR] = htobe32(cur_post & 0xffff), mmio_wc_start,
 * either a BlueFlame copy of the single WQE (nreq == 1, prefer_bf, 1 < ds <= buf_size / 16:
 * 64-byte chunks of 8-byte stores, the source wrapping at the ring's end) or one 8-byte store
 * of the WQE's first 8 bytes, mmio_flush_writes, and the BlueFlame half alternates.
 *
 * c_post_mlx5dv_read, c_post_mlx5dv_send: the same loop for IBV_WR_RDMA_READ (opcode 0x10:
 * control, remote-address and data segments) and IBV_WR_SEND (0x0a: control and data segments,
 * or with IBV_SEND_INLINE one inline segment: set_data_inl_seg's memcpy of each SGE's bytes,
 * wrapping at the ring's end, the max_inline_data check, byte_count | MLX5_INLINE_SEG, size
 * align(inl + 4, 16) / 16), each work request with an SGE list of its own (`stride` elements
 * apart, as each ibv_send_wr has its own sg_list) or all sharing one (stride 0). Like
 * c_post_mlx5dv it leaves out qp->sq.wr_data[idx] = 0 (read only for BIND_MW and LOCAL_INV
 * completions), which only makes the C loop cheaper.
 *
 * c_post_floor: the cheapest code that stores the same bytes: each WQE's segments built once
 * per call in vector registers and stored whole (16-byte stores, one index computation per
 * WQE, none per word), only the control segment's WQE counter and completion flag computed per
 * WQE; the same doorbell record, barriers, doorbell or BlueFlame copy and half alternation.
 * c_post_floor_op does the same for READ and SEND WQEs (an inline payload's segments built
 * once per call, like the others); where each request has SGEs of its own, their data
 * segments are encoded per WQE (two loads, three byte swaps, one 16-byte store each: the
 * least a WQE of new addresses costs).
 */
#include <endian.h>
#include <errno.h>
#include <emmintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench_mlx5.h"

_Static_assert(sizeof(struct bench_sge) == sizeof(struct ibv_sge), "SGE layout");
_Static_assert(sizeof(struct mlx5_wqe_ctrl_seg) == 16, "control segment");
_Static_assert(sizeof(struct mlx5_wqe_raddr_seg) == 16, "remote-address segment");
_Static_assert(sizeof(struct mlx5_wqe_data_seg) == 16, "data segment");

struct bench_qp *c_qp_new(void *sq_buf, unsigned wqe_cnt, uint32_t *db, void *bf_reg,
			  unsigned bf_size, uint32_t qp_num, int max_gs, void *cq_buf,
			  unsigned log_cqe_cnt, uint32_t *cq_dbrec);
void c_qp_free(struct bench_qp *qp);
uint32_t c_qp_cur_post(const struct bench_qp *qp);
int c_post_mlx5dv(struct bench_qp *qp, uint64_t n, uint32_t batch,
		  const struct bench_sge *sges, uint32_t nsge, uint64_t raddr, uint32_t rkey,
		  uint64_t wr_id);
uint32_t c_post_floor(void *ring, uint32_t wqe_cnt, volatile uint32_t *dbrec,
		      volatile char *bf_reg, uint32_t bf_size, uint32_t pi, uint64_t n,
		      uint32_t batch, const struct bench_sge *sges, uint32_t nsge, uint32_t qpn,
		      uint64_t raddr, uint32_t rkey, int use_bf);
void c_qp_set_max_inline(struct bench_qp *qp, int max_inline_data);
int c_post_mlx5dv_read(struct bench_qp *qp, uint64_t n, uint32_t batch,
		       const struct bench_sge *sges, uint32_t nsge, uint32_t stride, uint64_t raddr,
		       uint32_t rkey, uint64_t wr_id);
int c_post_mlx5dv_send(struct bench_qp *qp, uint64_t n, uint32_t batch,
		       const struct bench_sge *sges, uint32_t nsge, uint32_t stride, int inl,
		       uint64_t wr_id);
uint32_t c_post_floor_op(void *ring, uint32_t wqe_cnt, volatile uint32_t *dbrec,
			 volatile char *bf_reg, uint32_t bf_size, uint32_t pi, uint64_t n,
			 uint32_t batch, uint32_t opcode, const struct bench_sge *sges, uint32_t nsge,
			 uint32_t stride, int inl, uint32_t qpn, uint64_t raddr, uint32_t rkey,
			 int use_bf);

/*
 * A QP over the caller's memory: the send ring (wqe_cnt blocks of 64 bytes), its doorbell
 * record, the BlueFlame register (two halves of bf_size bytes), and a send CQ of
 * 2^log_cqe_cnt 64-byte entries, each marked invalid as the provider does, with its doorbell
 * record. The wrid and wqe_head tables are ours. NULL if they cannot be allocated.
 */
struct bench_qp *c_qp_new(void *sq_buf, unsigned wqe_cnt, uint32_t *db, void *bf_reg,
			  unsigned bf_size, uint32_t qp_num, int max_gs, void *cq_buf,
			  unsigned log_cqe_cnt, uint32_t *cq_dbrec)
{
	struct bench_qp *qp = calloc(1, sizeof(*qp));

	if (!qp)
		return NULL;
	qp->sq.wrid = calloc(wqe_cnt, sizeof(*qp->sq.wrid));
	qp->sq.wqe_head = calloc(wqe_cnt, sizeof(*qp->sq.wqe_head));
	if (!qp->sq.wrid || !qp->sq.wqe_head) {
		c_qp_free(qp);
		return NULL;
	}
	qp->sq.wqe_cnt = wqe_cnt;
	/* Work requests against blocks: never binding here, but checked as the provider does. */
	qp->sq.max_post = wqe_cnt;
	qp->sq.max_gs = max_gs;
	qp->sq.start = sq_buf;
	qp->sq.qend = (char *)sq_buf + ((size_t)wqe_cnt << MLX5_SEND_WQE_SHIFT);
	qp->bf.reg = bf_reg;
	qp->bf.buf_size = bf_size;
	qp->db = db;
	qp->qp_num = qp_num;
	/* rdma-core's default: MLX5_POST_SEND_PREFER_BF unset means BlueFlame for single posts. */
	qp->prefer_bf = 1;
	qp->max_inline_data = 0;
	qp->send_cq.buf = cq_buf;
	qp->send_cq.cqe = (1u << log_cqe_cnt) - 1;
	qp->send_cq.dbrec = cq_dbrec;
	for (unsigned i = 0; i <= qp->send_cq.cqe; i++) {
		struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)cq_buf + i;

		cqe->op_own = MLX5_CQE_INVALID << 4;
	}
	return qp;
}

void c_qp_free(struct bench_qp *qp)
{
	free(qp->sq.wrid);
	free(qp->sq.wqe_head);
	free(qp);
}

uint32_t c_qp_cur_post(const struct bench_qp *qp)
{
	return qp->sq.cur_post;
}

/* ibv_qp_cap.max_inline_data as the QP was created with (qp->max_inline_data). */
void c_qp_set_max_inline(struct bench_qp *qp, int max_inline_data)
{
	qp->max_inline_data = max_inline_data;
}

static inline int wq_overflow(const struct bench_wq *wq, unsigned nreq)
{
	/* The provider re-reads under the CQ lock before failing; one thread here. */
	return wq->head - wq->tail + nreq >= wq->max_post;
}

static inline void *send_wqe(struct bench_qp *qp, unsigned idx)
{
	return (char *)qp->sq.start + ((size_t)idx << MLX5_SEND_WQE_SHIFT);
}

static inline void bf_copy(volatile uint64_t *dst, const uint64_t *src, unsigned bytecnt,
			   const struct bench_qp *qp)
{
	do {
		for (int k = 0; k < 8; k++)
			dst[k] = src[k];
		bytecnt -= 64;
		dst += 8;
		src += 8;
		if (unlikely((const void *)src == qp->sq.qend))
			src = qp->sq.start;
	} while (bytecnt > 0);
}

static inline void post_send_db(struct bench_qp *qp, unsigned nreq, unsigned size, void *ctrl)
{
	if (unlikely(!nreq))
		return;
	qp->sq.head += nreq;
	to_device_barrier();
	qp->db[MLX5_SND_DBR] = htobe32(qp->sq.cur_post & 0xffff);
	wc_sfence(); /* mmio_wc_start */
	if (nreq == 1 && qp->prefer_bf && size > 1 && size <= qp->bf.buf_size / 16)
		bf_copy((volatile uint64_t *)(qp->bf.reg + qp->bf.offset), ctrl,
			(size * 16 + 63) & ~63u, qp);
	else
		*(volatile uint64_t *)(qp->bf.reg + qp->bf.offset) = *(uint64_t *)ctrl;
	wc_sfence(); /* mmio_flush_writes */
	qp->bf.offset ^= qp->bf.buf_size;
}

/*
 * Post n RDMA WRITEs of the same SGEs in doorbell batches of `batch`, the last of each batch
 * signalled, with wr_ids wr_id, wr_id + 1, ... Returns 0, or -1 if the queue was full (what
 * was posted before is rung).
 */
int c_post_mlx5dv(struct bench_qp *qp, uint64_t n, uint32_t batch,
		  const struct bench_sge *sges, uint32_t nsge, uint64_t raddr, uint32_t rkey,
		  uint64_t wr_id)
{
	void *qend = qp->sq.qend;

	while (n) {
		unsigned todo = n < batch ? (unsigned)n : batch;
		struct mlx5_wqe_ctrl_seg *ctrl = NULL;
		unsigned size = 0;
		unsigned nreq;

		for (nreq = 0; nreq < todo; ++nreq) {
			struct mlx5_wqe_raddr_seg *rseg;
			struct mlx5_wqe_data_seg *dpseg;
			unsigned idx;
			char *seg;

			if (unlikely(wq_overflow(&qp->sq, nreq)) ||
			    unlikely((int)nsge > qp->sq.max_gs)) {
				post_send_db(qp, nreq, size, ctrl);
				return -1;
			}
			idx = qp->sq.cur_post & (qp->sq.wqe_cnt - 1);
			seg = send_wqe(qp, idx);
			ctrl = (void *)seg;
			*(uint32_t *)(seg + 8) = 0;
			ctrl->imm = 0;
			ctrl->fm_ce_se = qp->sq_signal_bits |
					 (nreq + 1 == todo ? MLX5_WQE_CTRL_CQ_UPDATE : 0);
			seg += sizeof(*ctrl);
			size = sizeof(*ctrl) / 16;

			rseg = (void *)seg;
			rseg->raddr = htobe64(raddr);
			rseg->rkey = htobe32(rkey);
			rseg->reserved = 0;
			seg += sizeof(*rseg);
			size += sizeof(*rseg) / 16;

			dpseg = (void *)seg;
			for (uint32_t i = 0; i < nsge; ++i) {
				if (unlikely((void *)dpseg == qend))
					dpseg = send_wqe(qp, 0);
				if (likely(sges[i].length)) {
					mlx5dv_set_data_seg(dpseg, sges[i].length, sges[i].lkey,
							    sges[i].addr);
					++dpseg;
					size += sizeof(*dpseg) / 16;
				}
			}

			ctrl->opmod_idx_opcode =
				htobe32(((qp->sq.cur_post & 0xffff) << 8) | MLX5_OPCODE_RDMA_WRITE);
			ctrl->qpn_ds = htobe32(size | (qp->qp_num << 8));
			qp->sq.wrid[idx] = wr_id++;
			qp->sq.wqe_head[idx] = qp->sq.head + nreq;
			qp->sq.cur_post += (size * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
		}
		post_send_db(qp, nreq, size, ctrl);
		n -= todo;
	}
	return 0;
}

/*
 * The floor's stores stay stores: GCC would otherwise turn a segment-copy loop into a call to
 * memcpy (loop distribution), which is not the cheapest code.
 */
#if defined(__GNUC__) && !defined(__clang__)
#define FLOOR_CODE __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define FLOOR_CODE
#endif

/* Store the ds 16-byte segments of a WQE at block pi, wrapping at the ring's end. */
static inline __attribute__((always_inline)) FLOOR_CODE void
floor_store(char *ring, char *qend, uint32_t mask, uint32_t pi, const __m128i *seg,
	    unsigned ds)
{
	__m128i *p = (__m128i *)(ring + ((size_t)(pi & mask) << 6));

	if (likely((char *)(p + ds) <= qend)) {
		for (unsigned k = 0; k < ds; k++)
			_mm_store_si128(p + k, seg[k]);
	} else {
		for (unsigned k = 0; k < ds; k++) {
			if ((char *)p == qend)
				p = (__m128i *)ring;
			_mm_store_si128(p++, seg[k]);
		}
	}
}

/*
 * One lap of the floor for a WQE of ds segments with `opcode`; ds is a constant where this is
 * inlined, so the stores unroll and the segments stay in registers. With `var`, segments
 * var_first .. var_first + var_n - 1 are data segments encoded from var_n new SGEs per WQE
 * (all non-empty); otherwise seg[1 ..] are the same for every WQE.
 */
static inline __attribute__((always_inline)) FLOOR_CODE uint32_t
floor_run_op(char *ring, uint32_t wqe_cnt, volatile uint32_t *dbrec, volatile char *bf_reg,
	     uint32_t bf_size, uint32_t pi, uint64_t n, uint32_t batch, __m128i *seg, unsigned ds,
	     uint32_t qpn, uint32_t opcode, const struct bench_sge *var, unsigned var_first,
	     unsigned var_n, int use_bf)
{
	char *qend = ring + ((size_t)wqe_cnt << 6);
	uint32_t mask = wqe_cnt - 1;
	uint32_t wqebbs = (ds + 3) / 4;
	unsigned bf_off = 0;
	/* control segment: qpn_ds in bytes 4..7; the counter word and fm_ce_se set per WQE */
	__m128i ctrl0 = _mm_set_epi32(0, 0, (int)htobe32(ds | (qpn << 8)), 0);
	__m128i sig = _mm_set_epi32(0, MLX5_WQE_CTRL_CQ_UPDATE << 24, 0, 0);

	while (n) {
		uint32_t nreq = n < batch ? (uint32_t)n : batch;
		uint32_t last = pi;

		for (uint32_t r = 0; r < nreq; r++) {
			uint32_t w = htobe32(((pi & 0xffff) << 8) | opcode);
			__m128i c = _mm_or_si128(ctrl0, _mm_cvtsi32_si128((int)w));

			if (r + 1 == nreq)
				c = _mm_or_si128(c, sig);
			seg[0] = c;
			if (var) {
				/* the header from registers, each data segment straight from
				 * its SGE in two 8-byte stores (no trip through a vector) */
				char *p = ring + ((size_t)(pi & mask) << 6) + var_first * 16;

				floor_store(ring, qend, mask, pi, seg, var_first);
				for (unsigned k = 0; k < var_n; k++, var++, p += 16) {
					if (p >= qend)
						p -= (size_t)wqe_cnt << 6;
					((uint64_t *)p)[0] = htobe32(var->length) |
							     (uint64_t)htobe32(var->lkey) << 32;
					((uint64_t *)p)[1] = htobe64(var->addr);
				}
			} else {
				floor_store(ring, qend, mask, pi, seg, ds);
			}
			last = pi;
			pi += wqebbs;
		}
		to_device_barrier();
		dbrec[MLX5_SND_DBR] = htobe32(pi & 0xffff);
		wc_sfence(); /* mmio_wc_start */
		if (use_bf && nreq == 1 && ds <= bf_size / 16) {
			const __m128i *src = (const __m128i *)(ring + ((size_t)(last & mask) << 6));
			volatile __m128i *dst = (volatile __m128i *)(bf_reg + bf_off);

			for (uint32_t b = 0; b < wqebbs; b++) {
				for (int k = 0; k < 4; k++)
					dst[k] = src[k];
				dst += 4;
				src += 4;
				if ((const char *)src == qend)
					src = (const __m128i *)ring;
			}
		} else {
			_mm_storel_epi64((__m128i *)(bf_reg + bf_off), seg[0]);
		}
		wc_sfence(); /* mmio_flush_writes */
		bf_off ^= bf_size;
		n -= nreq;
	}
	return pi;
}

/* The RDMA WRITE floor: floor_run_op with the WRITE opcode and the same segments every WQE. */
static inline __attribute__((always_inline)) FLOOR_CODE uint32_t
floor_run(char *ring, uint32_t wqe_cnt, volatile uint32_t *dbrec, volatile char *bf_reg,
	  uint32_t bf_size, uint32_t pi, uint64_t n, uint32_t batch, __m128i *seg, unsigned ds,
	  uint32_t qpn, int use_bf)
{
	return floor_run_op(ring, wqe_cnt, dbrec, bf_reg, bf_size, pi, n, batch, seg, ds, qpn,
			    MLX5_OPCODE_RDMA_WRITE, NULL, 0, 0, use_bf);
}

FLOOR_CODE uint32_t c_post_floor(void *ring, uint32_t wqe_cnt, volatile uint32_t *dbrec,
				 volatile char *bf_reg, uint32_t bf_size, uint32_t pi, uint64_t n,
				 uint32_t batch, const struct bench_sge *sges, uint32_t nsge,
				 uint32_t qpn, uint64_t raddr, uint32_t rkey, int use_bf)
{
	__m128i seg[2 + 64];
	unsigned ds = 2;

	if (nsge > 64)
		return pi;
	/* remote-address segment, then one data segment per non-empty SGE, big-endian */
	seg[1] = _mm_set_epi64x(htobe32(rkey), (long long)htobe64(raddr));
	for (uint32_t i = 0; i < nsge; i++) {
		if (!sges[i].length)
			continue;
		seg[ds++] = _mm_set_epi64x((long long)htobe64(sges[i].addr),
					   (long long)(htobe32(sges[i].length) |
						       (uint64_t)htobe32(sges[i].lkey) << 32));
	}
	switch (ds) {
	case 3:
		return floor_run(ring, wqe_cnt, dbrec, bf_reg, bf_size, pi, n, batch, seg, 3, qpn,
				 use_bf);
	case 6:
		return floor_run(ring, wqe_cnt, dbrec, bf_reg, bf_size, pi, n, batch, seg, 6, qpn,
				 use_bf);
	case 18:
		return floor_run(ring, wqe_cnt, dbrec, bf_reg, bf_size, pi, n, batch, seg, 18, qpn,
				 use_bf);
	default:
		return floor_run(ring, wqe_cnt, dbrec, bf_reg, bf_size, pi, n, batch, seg, ds, qpn,
				 use_bf);
	}
}

/* struct mlx5_wqe_inline_seg (providers/mlx5/wqe.h). */
struct bench_inline_seg {
	__be32 byte_count;
};

/*
 * set_data_inl_seg: copy the bytes of the request's nsge SGEs (CPU addresses) into the WQE
 * after its inline header, wrapping at the ring's end; *sz is the inline segment's size in
 * 16-byte units. ENOMEM above max_inline_data.
 */
static int set_data_inl_seg(struct bench_qp *qp, const struct bench_sge *sg, uint32_t nsge,
			    void *wqe, int *sz)
{
	struct bench_inline_seg *seg = wqe;
	void *qend = qp->sq.qend;
	int inl = 0;

	wqe = (char *)wqe + sizeof(*seg);
	for (uint32_t i = 0; i < nsge; ++i) {
		void *addr = (void *)(uintptr_t)sg[i].addr;
		int len = (int)sg[i].length;

		inl += len;
		if (unlikely(inl > qp->max_inline_data))
			return ENOMEM;
		if (unlikely((char *)wqe + len > (char *)qend)) {
			int copy = (int)((char *)qend - (char *)wqe);

			memcpy(wqe, addr, copy);
			addr = (char *)addr + copy;
			len -= copy;
			wqe = send_wqe(qp, 0);
		}
		memcpy(wqe, addr, len);
		wqe = (char *)wqe + len;
	}
	if (likely(inl)) {
		seg->byte_count = htobe32((uint32_t)inl | MLX5_INLINE_SEG);
		*sz = (int)((inl + sizeof(seg->byte_count) + 15) & ~15u) / 16;
	} else {
		*sz = 0;
	}
	return 0;
}

/*
 * The provider's loop for an RC READ (raddr_seg set) or SEND, as c_post_mlx5dv is for WRITE;
 * opcode and raddr_seg are constants where this is inlined, as the provider's switch on the
 * opcode resolves to one arm per request.
 */
static inline __attribute__((always_inline)) int
post_verb(struct bench_qp *qp, uint32_t opcode, int raddr_seg, uint64_t n, uint32_t batch,
	  const struct bench_sge *sg_list, uint32_t nsge, uint32_t stride, int inline_flag,
	  uint64_t raddr, uint32_t rkey, uint64_t wr_id)
{
	void *qend = qp->sq.qend;

	while (n) {
		unsigned todo = n < batch ? (unsigned)n : batch;
		struct mlx5_wqe_ctrl_seg *ctrl = NULL;
		unsigned size = 0;
		unsigned nreq;

		for (nreq = 0; nreq < todo; ++nreq, sg_list += stride) {
			unsigned idx;
			char *seg;

			if (unlikely(wq_overflow(&qp->sq, nreq)) ||
			    unlikely((int)nsge > qp->sq.max_gs)) {
				post_send_db(qp, nreq, size, ctrl);
				return -1;
			}
			idx = qp->sq.cur_post & (qp->sq.wqe_cnt - 1);
			seg = send_wqe(qp, idx);
			ctrl = (void *)seg;
			*(uint32_t *)(seg + 8) = 0;
			ctrl->imm = 0;
			ctrl->fm_ce_se = qp->sq_signal_bits |
					 (nreq + 1 == todo ? MLX5_WQE_CTRL_CQ_UPDATE : 0);
			seg += sizeof(*ctrl);
			size = sizeof(*ctrl) / 16;

			if (raddr_seg) {
				struct mlx5_wqe_raddr_seg *rseg = (void *)seg;

				rseg->raddr = htobe64(raddr);
				rseg->rkey = htobe32(rkey);
				rseg->reserved = 0;
				seg += sizeof(*rseg);
				size += sizeof(*rseg) / 16;
			}

			if (inline_flag && nsge) {
				int sz;

				if (unlikely(set_data_inl_seg(qp, sg_list, nsge, seg, &sz))) {
					post_send_db(qp, nreq, size, ctrl);
					return -1;
				}
				/* `inl = 1`: post_send_db reads it only with prefer_bf off. */
				size += (unsigned)sz;
			} else {
				struct mlx5_wqe_data_seg *dpseg = (void *)seg;

				for (uint32_t i = 0; i < nsge; ++i) {
					if (unlikely((void *)dpseg == qend))
						dpseg = send_wqe(qp, 0);
					if (likely(sg_list[i].length)) {
						mlx5dv_set_data_seg(dpseg, sg_list[i].length,
								    sg_list[i].lkey,
								    sg_list[i].addr);
						++dpseg;
						size += sizeof(*dpseg) / 16;
					}
				}
			}

			ctrl->opmod_idx_opcode =
				htobe32(((qp->sq.cur_post & 0xffff) << 8) | opcode);
			ctrl->qpn_ds = htobe32(size | (qp->qp_num << 8));
			qp->sq.wrid[idx] = wr_id++;
			qp->sq.wqe_head[idx] = qp->sq.head + nreq;
			qp->sq.cur_post += (size * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
		}
		post_send_db(qp, nreq, size, ctrl);
		n -= todo;
	}
	return 0;
}

/*
 * Post n RDMA READs of `raddr` into SGE lists of nsge elements, the k-th request's at
 * sges + k * stride, in doorbell batches of `batch`, the last of each batch signalled.
 * Returns 0, or -1 if the queue was full.
 */
int c_post_mlx5dv_read(struct bench_qp *qp, uint64_t n, uint32_t batch,
		       const struct bench_sge *sges, uint32_t nsge, uint32_t stride, uint64_t raddr,
		       uint32_t rkey, uint64_t wr_id)
{
	return post_verb(qp, MLX5_OPCODE_RDMA_READ, 1, n, batch, sges, nsge, stride, 0, raddr,
			 rkey, wr_id);
}

/*
 * Post n SENDs of SGE lists as c_post_mlx5dv_read takes them; with `inl`, IBV_SEND_INLINE
 * (the SGEs' addresses are CPU addresses).
 */
int c_post_mlx5dv_send(struct bench_qp *qp, uint64_t n, uint32_t batch,
		       const struct bench_sge *sges, uint32_t nsge, uint32_t stride, int inl,
		       uint64_t wr_id)
{
	if (inl)
		return post_verb(qp, MLX5_OPCODE_SEND, 0, n, batch, sges, nsge, stride, 1, 0, 0,
				 wr_id);
	return post_verb(qp, MLX5_OPCODE_SEND, 0, n, batch, sges, nsge, stride, 0, 0, 0, wr_id);
}

/*
 * The floor of c_post_mlx5dv_read (opcode MLX5_OPCODE_RDMA_READ) and c_post_mlx5dv_send
 * (MLX5_OPCODE_SEND, inline with `inl`), taking the SGEs as they do. With stride != 0 it must
 * equal nsge and every SGE be non-empty; an inline payload is at most 256 bytes.
 */
FLOOR_CODE uint32_t c_post_floor_op(void *ring, uint32_t wqe_cnt, volatile uint32_t *dbrec,
				    volatile char *bf_reg, uint32_t bf_size, uint32_t pi, uint64_t n,
				    uint32_t batch, uint32_t opcode, const struct bench_sge *sges,
				    uint32_t nsge, uint32_t stride, int inl, uint32_t qpn,
				    uint64_t raddr, uint32_t rkey, int use_bf)
{
	__m128i seg[2 + 64];
	unsigned hdr = opcode == MLX5_OPCODE_RDMA_READ ? 1 : 0;
	unsigned ds = 1 + hdr;

	if (nsge > 64 || (stride && stride != nsge))
		return pi;
	if (hdr)
		seg[1] = _mm_set_epi64x(htobe32(rkey), (long long)htobe64(raddr));
	if (inl) {
		/* the inline segment: header, payload, zeros to the next 16 bytes */
		unsigned char b[16 * 17] = { 0 };
		uint32_t len = 0;

		for (uint32_t i = 0; i < nsge; i++) {
			if (len + sges[i].length > sizeof(b) - 16)
				return pi;
			memcpy(b + 4 + len, (const void *)(uintptr_t)sges[i].addr,
			       sges[i].length);
			len += sges[i].length;
		}
		if (len) {
			uint32_t h = htobe32(len | MLX5_INLINE_SEG);

			memcpy(b, &h, 4);
			for (unsigned k = 0; k < (len + 4 + 15) / 16; k++)
				seg[ds++] = _mm_loadu_si128((const __m128i *)(b + 16 * k));
		}
	} else if (stride) {
		ds += nsge;
	} else {
		for (uint32_t i = 0; i < nsge; i++) {
			if (!sges[i].length)
				continue;
			seg[ds++] = _mm_set_epi64x((long long)htobe64(sges[i].addr),
						   (long long)(htobe32(sges[i].length) |
							       (uint64_t)htobe32(sges[i].lkey) << 32));
		}
	}
#define FLOOR_OP(op_, ds_, var_, first_, vn_)                                                   \
	return floor_run_op(ring, wqe_cnt, dbrec, bf_reg, bf_size, pi, n, batch, seg, ds_, qpn,  \
			    op_, var_, first_, vn_, use_bf)
	if (opcode == MLX5_OPCODE_RDMA_READ && stride) {
		if (ds == 3)
			FLOOR_OP(MLX5_OPCODE_RDMA_READ, 3, sges, 2, 1);
		if (ds == 6)
			FLOOR_OP(MLX5_OPCODE_RDMA_READ, 6, sges, 2, 4);
		FLOOR_OP(MLX5_OPCODE_RDMA_READ, ds, sges, 2, nsge);
	}
	if (opcode == MLX5_OPCODE_SEND && !stride) {
		if (ds == 2)
			FLOOR_OP(MLX5_OPCODE_SEND, 2, NULL, 0, 0);
		if (ds == 5)
			FLOOR_OP(MLX5_OPCODE_SEND, 5, NULL, 0, 0);
		if (ds == 6)
			FLOOR_OP(MLX5_OPCODE_SEND, 6, NULL, 0, 0);
	}
	FLOOR_OP(opcode, ds, stride ? sges : NULL, 1 + hdr, stride ? nsge : 0);
#undef FLOOR_OP
}
